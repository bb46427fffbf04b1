"""Resolve a build's source (a local checkpoint directory or a Hugging Face id) and read it."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path


class PackageError(Exception):
    """A one-line, user-facing reason the build cannot go on."""


# Files a package carries over from its source besides weights and config: tokenizer, chat
# template, generation defaults. Processor configs belong to the towers and are left out.
CARRIED = re.compile(r"^(tokenizer.*|special_tokens_map\.json|chat_template.*|generation_config\.json|.*\.jinja)$")
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SNAPSHOT = re.compile(r"^[0-9a-f]{40}$")


@dataclass
class Source:
    dir: Path
    id: str
    revision: str
    config: dict
    files: dict[str, Path]  # tensor name -> safetensors file

    def carried_files(self) -> list[Path]:
        return sorted(p for p in self.dir.iterdir() if p.is_file() and CARRIED.match(p.name))

    def serving_problem(self) -> str | None:
        """Why vLLM could not chat with a package of this source, or None. vLLM serves a local
        directory with the tokenizer found in it and that tokenizer's chat template (a
        ``chat_template.jinja``/``.json`` file or ``tokenizer_config.json``'s ``chat_template``, as
        transformers saves them); without a template every /v1/chat/completions request is
        refused, which a deploy would find only after the package is built and published."""
        names = {p.name for p in self.carried_files()}
        if not names & {"tokenizer.json", "tokenizer.model"}:
            return f"{self.id}: no tokenizer.json or tokenizer.model; vLLM could not tokenize for the package"
        tok_cfg = self.dir / "tokenizer_config.json"
        in_cfg = tok_cfg.is_file() and "chat_template" in json.loads(tok_cfg.read_text())
        if not in_cfg and not names & {"chat_template.jinja", "chat_template.json"}:
            return (f"{self.id}: no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json's "
                    "chat_template); vLLM would refuse every chat request to the package")
        return None


def _tensor_files(d: Path) -> dict[str, Path]:
    index = d / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {n: d / f for n, f in weight_map.items()}
    shards = sorted(d.glob("*.safetensors"))
    if not shards:
        raise PackageError(f"{d}: no model.safetensors.index.json and no *.safetensors file")
    from safetensors import safe_open

    files: dict[str, Path] = {}
    for shard in shards:
        with safe_open(str(shard), framework="pt") as f:
            for n in f.keys():
                files[n] = shard
    return files


def _download(repo_id: str, revision: str | None) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise PackageError("huggingface_hub is not installed; pip install -r requirements-package.txt") from None
    token = os.environ.get("HF_TOKEN") or None
    try:
        path = snapshot_download(repo_id=repo_id, revision=revision, token=token,
                                 allow_patterns=["*.json", "*.safetensors", "*.jinja", "tokenizer*"])
    except Exception as e:  # noqa: BLE001 - the hub's errors are many; the user needs the one line
        raise PackageError(f"cannot download {repo_id!r} (revision {revision or 'main'}): "
                           f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
                           "(gated Gemma repos need HF_TOKEN with access granted)") from None
    return Path(path)


def resolve(src: str, revision: str | None = None) -> Source:
    """A local directory is used as is; an ``owner/name`` that is not a directory is downloaded."""
    p = Path(src)
    if p.is_dir():
        d, repo_id = p.resolve(), str(p)
        rev = revision or (d.name if _SNAPSHOT.match(d.name) else "local")
    elif _HF_ID.match(src) and not p.exists():
        d = _download(src, revision)
        repo_id = src
        rev = d.name if _SNAPSHOT.match(d.name) else (revision or "unknown")
    else:
        raise PackageError(f"--source {src!r} is neither a checkpoint directory nor a Hugging Face id (owner/name)")
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise PackageError(f"{d}: no config.json")
    config = json.loads(cfg_path.read_text())
    model_type = (config.get("text_config") or config).get("model_type", config.get("model_type"))
    if not str(model_type).startswith("gemma4"):
        raise PackageError(f"{src}: model_type {model_type!r}; this builder packs Gemma 4 checkpoints (gemma4, gemma4_text)")
    return Source(d, repo_id, rev, config, _tensor_files(d))
