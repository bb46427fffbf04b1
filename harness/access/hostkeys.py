"""The access path's errors and the run's host-key pins, shared by the in-process forwarder
(``harness.access.tunnel``) and the forwarder process (``harness.access.process``/``harness.access.child``)."""
from __future__ import annotations

import threading
from typing import Any

from kit.errors import KitError


class AccessError(KitError, RuntimeError):
    """The tunnel could not be opened; the message says which step failed."""

    exit_code = 1


class HostKeyMismatch(AccessError):
    """An instance showed another host key than the one pinned for this run."""


class HostKeyPins:
    """Trust on first use, for one run only: the first key an instance shows is pinned in memory."""

    def __init__(self) -> None:
        self._pins: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def check(self, host: str, key: Any) -> None:
        self.check_blob(host, key.get_name(), key.get_base64(), key.fingerprint)

    def check_blob(self, host: str, name: str, blob: str, fingerprint: str = "") -> None:
        """``check`` for a key given as its type name and base64 blob (as a tunnel process reports it)."""
        seen = (name, blob)
        with self._lock:
            pinned = self._pins.setdefault(host, seen)
        if pinned != seen:
            raise HostKeyMismatch(f"host key of {host} changed during the run "
                                  f"(now {name} {fingerprint or blob[-16:]}); aborting")

    def get(self, host: str) -> tuple[str, str] | None:
        return self._pins.get(host)
