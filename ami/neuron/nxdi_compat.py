"""What the engine needs to run Gemma 4 on NxD Inference 0.8 under transformers 4.57.

The Neuron image pins transformers 4.57.6, NxD Inference's own ``transformers==4.57.*``
(kit/neuron_facts.py TRANSFORMERS_CHOICE says why). That transformers has every name NxD
Inference imports (``SampleDecoderOnlyOutput``, ``transformers.utils.fx``) but not Gemma 4:

- ``AutoConfig`` does not know ``model_type`` "gemma4", so NxD Inference's
  ``hf_adapter.load_pretrained_config`` (which calls it) fails on the checkpoint.
  ``load_config`` reads config.json itself, as the E2B port's own VLM loader falls back to
  ("Falls back to manual JSON loading if AutoConfig doesn't recognize the model_type (e.g.
  'gemma4' on older transformers versions)", modeling_gemma4_e2b_vlm.py at 6aa6121), and does
  what ``load_pretrained_config`` does with the result (NxD Inference 0.8, cd3abf3): the
  checkpoint's dtype goes to the NeuronConfig unless the caller set one, nested configs become
  namespaces, the rest become attributes.
- A tokenizer saved by transformers 5 names ``TokenizersBackend`` as its class and lists its
  extra special tokens as a list (4.x expects a dict: "the tokenizer's `extra_special_tokens` is a
  list; convert it to a dict", the 31B port's notes on transformers 4.57). ``load_tokenizer``
  builds the fast tokenizer from tokenizer.json with those tokens as additional special tokens
  when ``AutoTokenizer`` cannot.

Both are used on every transformers version: on 5.x AutoTokenizer simply succeeds first.
tests/neuron/test_nxdi08.py runs them against NxD Inference 0.8's real source under 4.57.6.
"""
from __future__ import annotations

import json
import os
from types import SimpleNamespace


def load_config(model_dir: str):
    """A ``load_config`` hook for NxD Inference's InferenceConfig, from ``model_dir``/config.json."""
    def hook(self) -> None:
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
        dtype = config.pop("dtype", None) or config.pop("torch_dtype", None)
        config.pop("torch_dtype", None)
        neuron_config = getattr(self, "neuron_config", None)
        if dtype is not None and neuron_config is not None and not getattr(neuron_config, "overrides_torch_dtype", True):
            from neuronx_distributed_inference.models.config import to_torch_dtype

            neuron_config.torch_dtype = to_torch_dtype(dtype)
        version = config.get("transformers_version")
        for key, value in list(config.items()):
            if isinstance(value, dict) and key.endswith("_config"):
                ns = SimpleNamespace(**value)
                if version is not None:
                    ns.transformers_version = version
                config[key] = ns
        self.__dict__.update(config)
        if not hasattr(self, "_name_or_path"):
            self._name_or_path = str(model_dir)

    return hook


def load_tokenizer(model_dir: str):
    """The checkpoint's tokenizer: AutoTokenizer when this transformers can read its files,
    else the fast tokenizer built from tokenizer.json and tokenizer_config.json."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        return AutoTokenizer.from_pretrained(model_dir)
    except (ValueError, AttributeError, TypeError) as first:
        path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.exists(path):
            raise first
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    extra = cfg.get("extra_special_tokens") or []
    extra = list(extra.values()) if isinstance(extra, dict) else list(extra)
    extra += [t for t in cfg.get("additional_special_tokens") or [] if t not in extra]
    special = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if isinstance(cfg.get(k), str)}
    tok = PreTrainedTokenizerFast(tokenizer_file=path, additional_special_tokens=extra, **special)
    template = os.path.join(model_dir, "chat_template.jinja")
    if cfg.get("chat_template"):
        tok.chat_template = cfg["chat_template"]
    elif os.path.exists(template):
        with open(template) as f:
            tok.chat_template = f.read()
    return tok
