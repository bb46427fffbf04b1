"""A stand-in for the ``hf`` CLI that the boot scripts and image scripts run (userdata/lib.sh
kit_model_revision, engine-*.sh, ami/scripts/neuron-precompile.sh), laying files out as
huggingface_hub does (kit/weights.py names the facts): ``hf download MODEL config.json`` into the
cache writes ``$HF_HOME/hub/models--<org>--<name>/refs/main`` (the newest commit, NEWEST) and that
snapshot's config.json; ``hf download MODEL --revision R`` writes ``snapshots/R/`` (config and
tokenizer files, their content naming R, so two commits have two digests); with ``--local-dir D``
the same files go to D. Every call is appended to CALLS, one line: ``hf <args>``.
"""
from __future__ import annotations

from pathlib import Path

NEWEST = "c0ffee" + "0" * 34  # main's commit as the stand-in hub reports it

SCRIPT = r"""#!/bin/bash
echo "hf $*" >> {calls}
model=$2; shift 2
rev={newest}; dir=""; files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --revision) rev=$2; shift 2 ;;
    --local-dir) dir=$2; shift 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
repo="$HF_HOME/hub/models--${{model//\//--}}"
if [ -z "$dir" ]; then
  dir="$repo/snapshots/$rev"
  mkdir -p "$repo/refs"
  [ "$rev" != {newest} ] || echo -n {newest} > "$repo/refs/main"
fi
mkdir -p "$dir"
echo "{{\"model\": \"$model\", \"commit\": \"$rev\"}}" > "$dir/config.json"
[ ${{#files[@]}} -gt 0 ] || echo "{{\"tokenizer_of\": \"$rev\"}}" > "$dir/tokenizer.json"
"""


def fake_hf(path: Path, calls: Path, newest: str = NEWEST) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCRIPT.format(calls=calls, newest=newest))
    path.chmod(0o755)
    return path
