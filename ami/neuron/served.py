"""What the engine serves, for ``GET /v1/models``'s ``weights`` object: the model, the checkpoint's
commit when its directory records one, and the sha256 over its config and tokenizer files.

The kit's harness reads it for a server it reaches without an instance (``--endpoint``, ``make
demo``; harness/run/weights.py); on an EC2 backend it reads the boot's own record, which says the same
(userdata/lib.sh kit_record_model). The digest is the kit's (kit/weights.py file_digest: the lines
``<sha256 of file>  <name>`` of the files below that exist, in this order, hashed again); this
package stands alone on the image, so the list is repeated here and tests/kit hold the two equal.
``.kit-revision``: the commit the boot or the image build downloaded into the directory.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile

DIGEST_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "tokenizer.model", "special_tokens_map.json", "chat_template.jinja", "chat_template.json")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def digest(directory: str) -> tuple[str | None, list[str]]:
    h, files = hashlib.sha256(), []
    for name in DIGEST_FILES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                h.update(f"{hashlib.sha256(f.read()).hexdigest()}  {name}\n".encode())
            files.append(name)
    return (h.hexdigest() if files else None), files


def record(model_dir: str | None, model_id: str, tiny_random: bool = False) -> dict:
    """The ``weights`` object; the tiny random model's files are written to a scratch directory
    first (ami/neuron/tiny.py builds them the way the CPU generator serves them)."""
    if tiny_random:
        from . import tiny

        tokenizer = tiny.build_tokenizer()
        with tempfile.TemporaryDirectory() as d:
            tiny.build_model(tokenizer).config.save_pretrained(d)
            tokenizer.save_pretrained(d)
            sha, files = digest(d)
        return {"model": model_id, "how": "tiny random (built in memory)", "digest": sha, "files": files}
    out: dict = {"model": model_id, "how": "local"}
    if model_dir:
        sha, files = digest(model_dir)
        out.update(digest=sha, files=files)
        try:
            with open(os.path.join(model_dir, ".kit-revision")) as f:
                rev = f.read().strip()
            if _COMMIT.match(rev):
                out.update(revision=rev, how="recorded beside the checkpoint")
        except OSError:
            pass
    return out
