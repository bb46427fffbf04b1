"""Quantized model packages: Gemma 4 QAT weights repacked losslessly into compressed-tensors.

``python -m harness.package build --source SRC --out DEST [--scheme emb4|ple4|text|int8]``.
Needs torch and safetensors (requirements-package.txt); the rest of the harness does not.
"""
