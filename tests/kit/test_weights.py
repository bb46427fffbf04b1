"""kit/weights.py: commit ids, the weights' repository, the digest, and the Neuron engine's copy of it.

The engine stands alone on its image (ami/neuron imports nothing of the kit), so its digest
(ami/neuron/served.py) repeats kit/weights.py's list and rule: held equal here, on real files, and
for the tiny random model the demo serves (the same digest on every start).
"""
from __future__ import annotations

import pytest

from ami.neuron import served
from kit import weights
from kit.schemes import QAT_SOURCE


def test_a_commit_is_40_hex_characters():
    assert weights.revision_problem("0123456789abcdef0123456789ABCDEF01234567") is None
    for bad in ("main", "v1.0", "0123456", "g" * 40, "a" * 41, None, 40):
        assert weights.revision_problem(bad).startswith(" is not a commit id (40 hex characters")


def test_weights_repo_and_cache_folder():
    assert weights.weights_repo("google/gemma-4-E2B-it") == "google/gemma-4-E2B-it"
    assert weights.weights_repo("package") == weights.weights_repo("package:emb4") == QAT_SOURCE
    assert weights.weights_repo("package:int8") == "google/gemma-4-E2B-it"
    assert weights.cache_folder("google/gemma-4-E2B-it") == "models--google--gemma-4-E2B-it"
    assert weights.short("a" * 40) == "a" * 12 and weights.short(None) == "—"


def test_the_engine_digests_as_the_kit_does(tmp_path):
    assert served.DIGEST_FILES == weights.DIGEST_FILES
    assert weights.file_digest(tmp_path) is None and served.digest(str(tmp_path)) == (None, [])
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "config.json").write_text('{"a": 1}')
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 16)
    sha, files = served.digest(str(tmp_path))
    assert sha == weights.file_digest(tmp_path) and files == ["config.json", "tokenizer.json"]
    (tmp_path / ".kit-revision").write_text("c" * 40 + "\n")
    rec = served.record(str(tmp_path), "org/m")
    assert (rec["revision"], rec["digest"], rec["model"]) == ("c" * 40, sha, "org/m")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_tiny_models_digest_is_the_same_on_every_start():
    pytest.importorskip("transformers")
    a, b = served.record(None, "tiny-random-gemma4", True), served.record(None, "tiny-random-gemma4", True)
    assert a == b and len(a["digest"]) == 64 and "config.json" in a["files"] and "tokenizer.json" in a["files"]
