"""The package commands' one error type (its own module so every reader can raise it)."""
from __future__ import annotations

from kit.errors import KitError


class PackageError(KitError):
    """A one-line, user-facing reason the build or check cannot go on."""
