"""vLLM settings shared by the SageMaker container and the EC2 servers."""
from __future__ import annotations

# Tool-call parser per model family (vLLM's --tool-call-parser). A model not listed gets no tool
# flags rather than a parser that would mangle its output; the harness then skips the agent trial.
TOOL_CALL_PARSERS: tuple[tuple[str, str], ...] = (
    ("gemma-4", "gemma4"),
    ("qwen3-coder", "qwen3_coder"),
    ("qwen3", "hermes"),
)


def tool_call_parser(model_id: str) -> str | None:
    name = model_id.lower()
    return next((parser for key, parser in TOOL_CALL_PARSERS if key in name), None)


def tool_flags(model_id: str) -> str:
    """Command-line flags for `vllm serve` (empty when the model has no known parser)."""
    parser = tool_call_parser(model_id)
    return f"--enable-auto-tool-choice --tool-call-parser {parser}" if parser else ""
