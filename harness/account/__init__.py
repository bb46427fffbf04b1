"""The commands about the AWS account rather than a run: what it needs before spending
(``preflight``, with ``preflight_fresh`` for what a fresh account trips on and
``preflight_weights`` for the commit each deployment serves), the kit's machine images
(``images``, with ``image_share`` for other accounts), ``deploy`` (cdk deploy after checking those
images) and ``leftovers`` (what still bills after cdk destroy). ``touched`` records the regions a
share reached outside the configuration, so ``leftovers`` looks there too.

Typed as ``python -m harness preflight|images|deploy|leftovers`` (harness/__main__.py).
"""
