"""Which checkpoint a deployment serves: its repository, the commit pinned for it, and the digest
that proves two backends were handed the same config and tokenizer.

A Hugging Face repository moves: every download without a revision takes the newest commit of
its default branch, so a Neuron image compiled a week before a g6 deploy can hold another
checkpoint. The kit pins a commit per repository (``-c model_revision``, ``-c <id>_model_revision``;
kit/config.py) and records, on every backend, the commit it got and a digest of what it serves
(userdata/lib.sh ``kit_record_model`` writes ``SERVED_RECORD``; harness/run/weights.py reads it into
meta.json; harness/report/weights.py compares).

Facts this module relies on (huggingface_hub, its docs at v0.36.0 and at ee0a4510f, 2026-08-20,
docs/source/en/guides/manage-cache.md): a model's cache folder is ``models--<namespace>--<name>``
under ``$HF_HOME/hub``; its ``refs/<branch>`` file holds the commit that branch resolved to at
the last download, and ``snapshots/<commit>/`` holds the files of that commit. A commit id is the
repository's git SHA-1, 40 hexadecimal characters.

Plain Python (no aws-cdk-lib, no boto3): the stacks, the harness and the tests read it.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

REVISION = re.compile(r"^[0-9a-fA-F]{40}$")
UNPINNED = "unpinned"  # the ModelRevision output of a stack that pins no commit (kit/contracts/outputs.py)

# The files whose digest stands for "what the server was handed besides the weights": the model's
# config, generation defaults and everything the tokenizer and chat template are read from. Those
# that exist are hashed in this order; userdata/lib.sh kit_record_model and the Neuron engine's
# ami/neuron/served.py use the same list (tests/kit/test_weights.py holds them to it).
DIGEST_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "tokenizer.model", "special_tokens_map.json", "chat_template.jinja", "chat_template.json")
# Where an EC2 backend's instance records what it serves (userdata/lib.sh KIT_SERVED_RECORD's
# default; world-readable, so the harness reads it as the EC2 Instance Connect user).
SERVED_RECORD = "/etc/inference-kit/served-model.json"
# How the revision a record names was chosen.
HOW = {
    "pinned": "the configured commit (-c model_revision)",
    "resolved": "the newest commit when this instance first downloaded it, kept since",
    "image": "the commit baked into the machine image (ami tag kit-model-revision)",
    "package": "the source commit the package's manifest names",
    "configured": "the commit the stack gave the container (SageMaker: not read back from it)",
}


def revision_problem(value: object) -> str | None:
    """None for a commit id the kit accepts (40 hex characters), else the end of a one-line error."""
    if not isinstance(value, str) or not REVISION.match(value):
        return " is not a commit id (40 hex characters, e.g. the 'Commit' a model page's history shows)"
    return None


def weights_repo(model_id: str) -> str:
    """The repository whose commit a deployment of ``model_id`` serves: the id itself, or for a
    package (``package[:scheme]``, kit/schemes.py) the source its scheme is built from."""
    from kit.schemes import scheme_of_model

    s = scheme_of_model(model_id)
    return s.default_source if s else model_id


def cache_folder(repo_id: str) -> str:
    """The model's folder name in the Hugging Face cache (``google/x`` -> ``models--google--x``)."""
    return "models--" + repo_id.replace("/", "--")


def file_digest(directory: str | Path, names: tuple[str, ...] = DIGEST_FILES) -> str | None:
    """sha256 of the lines ``<sha256 of file>  <name>\\n`` for each of ``names`` present in
    ``directory`` (``sha256sum`` output, so ``cd DIR && sha256sum config.json ... | sha256sum``
    gives it by hand); None when none is present. Symbolic links (the cache's snapshot entries)
    are followed."""
    d = Path(directory)
    h, seen = hashlib.sha256(), False
    for name in names:
        p = d / name
        if p.is_file():
            h.update(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {name}\n".encode())
            seen = True
    return h.hexdigest() if seen else None


def short(revision: str | None) -> str:
    """A commit as the report prints it: its first 12 characters."""
    return revision[:12] if isinstance(revision, str) and REVISION.match(revision) else (revision or "—")
