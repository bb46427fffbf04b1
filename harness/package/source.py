"""Resolve a build's source (a local checkpoint directory or a Hugging Face id) and read it."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from harness.package import checkpoint
from harness.package.checkpoint import TensorInfo
from harness.package.errors import PackageError
from harness.package.textconfig import text_config

__all__ = ["PackageError", "Source", "TensorInfo", "resolve"]


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
    tensors: dict[str, TensorInfo]  # tensor name -> its file, dtype and shape (from the headers)

    @property
    def files(self) -> dict[str, Path]:
        return {n: t.file for n, t in self.tensors.items()}

    def carried_files(self) -> list[Path]:
        """Tokenizer and template files to copy into the package (regular files inside the source)."""
        names = sorted(p for p in self.dir.iterdir() if CARRIED.match(p.name))
        return [checkpoint.regular_file(p, self.dir) for p in names if not p.is_dir()]

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
        tok = checkpoint.read_json(tok_cfg, self.dir) if tok_cfg.name in names else None
        in_cfg = isinstance(tok, dict) and "chat_template" in tok
        if not in_cfg and not names & {"chat_template.jinja", "chat_template.json"}:
            return (f"{self.id}: no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json's "
                    "chat_template); vLLM would refuse every chat request to the package")
        return None


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
    if not os.path.lexists(cfg_path):
        raise PackageError(f"{d}: no config.json")
    config = checkpoint.read_json(cfg_path, d)
    text = text_config(config, str(cfg_path))
    if "model_type" not in text and "model_type" not in config:
        raise PackageError(f"{cfg_path}: no model_type; this builder packs Gemma 4 checkpoints (gemma4, gemma4_text)")
    return Source(d, repo_id, rev, config, checkpoint.tensors(d))
