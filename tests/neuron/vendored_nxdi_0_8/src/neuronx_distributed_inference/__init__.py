# Copyright Amazon Web Services and its Affiliates. All Rights Reserved.
# ==============================================================================
from ._version import __version__  # noqa F401
