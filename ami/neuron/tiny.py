"""A tiny random-weight model of Gemma 4's text architecture, built in memory, no download.

For demos and tests of everything above the compiled model: same model class as the real
checkpoint's text stack (``Gemma4ForCausalLM``: sliding and full attention layers, per-layer
embeddings, logit soft-capping), two layers and a 64-wide hidden state. Its tokenizer is a small
byte-level BPE trained here on a few sentences, carrying Gemma 4's chat and tool special tokens
as single tokens so the chat template and tool-call parser see what they see in production.
Weights are random: the text it writes is noise, which is all the tests need from it.
"""
from __future__ import annotations

from importlib import resources

# Gemma 4's control tokens (chat turns, tool declarations, calls, results, string fence).
SPECIAL_TOKENS = [
    "<pad>", "<eos>", "<bos>", "<unk>",
    "<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
    "<|tool_response>", "<tool_response|>", '<|"|>', "<|channel>", "<channel|>", "<|think|>",
]

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Of these 11 ids, how many are >= 10? Use the count_ids tool.",
    "call:count_ids{ids:[3,12,15,8,21],filter:id >= 10}",
    "response:count_ids{value:8}",
    "system user model assistant tool description parameters properties type OBJECT STRING",
    "Hello! How can I help you today? The answer is 8.",
    "declaration: function name arguments required integer number array boolean",
]


def chat_template() -> str:
    return resources.files(__package__).joinpath("gemma4_chat_template.jinja").read_text("utf-8")


def build_tokenizer(vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>",
                                   additional_special_tokens=SPECIAL_TOKENS[4:])
    fast.chat_template = chat_template()
    return fast


def build_model(tokenizer, seed: int = 0):
    import torch
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    vocab = len(tokenizer)
    config = Gemma4TextConfig(
        vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"],
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=64,
        hidden_size_per_layer_input=16, sliding_window=64, max_position_embeddings=8192,
        final_logit_softcapping=30.0,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<turn|>")],
    )
    torch.manual_seed(seed)
    return Gemma4ForCausalLM(config).eval()


def build(seed: int = 0):
    """(model, tokenizer) — about a second on one core."""
    tokenizer = build_tokenizer()
    return build_model(tokenizer, seed), tokenizer


def save(directory: str, seed: int = 0) -> None:
    """Write the tiny model as a checkpoint directory (config, weights, tokenizer, template)."""
    model, tokenizer = build(seed)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
