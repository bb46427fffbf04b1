# Copyright Amazon Web Services and its Affiliates. All Rights Reserved.
# ==============================================================================
__version__ = "0.8.0"
