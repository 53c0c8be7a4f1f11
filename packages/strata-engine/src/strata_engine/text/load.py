"""The one place a GGUF's `tokenizer.ggml.model` picks the tokenizer class.

It lives apart from both classes so that the base BPE tokenizer need not import its
SentencePiece subclass (which imports the base): the text layer has no import circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strata_engine.api import ModelLoadError
from strata_engine.text.spm_tokenizer import SentencePieceTokenizer
from strata_engine.text.tokenizer import BPE_MODELS, Tokenizer


def load_tokenizer(meta: Mapping[str, Any]) -> Tokenizer:
    """The model's tokenizer from GGUF key/values (plain Python values, as gguf-py's
    `contents()` gives); an unsupported tokenizer model is a `ModelLoadError` naming it."""
    model = meta.get("tokenizer.ggml.model")
    if model == "llama":
        return SentencePieceTokenizer.from_metadata(meta)
    if model not in BPE_MODELS:
        raise ModelLoadError(
            f"unsupported tokenizer model {model!r}: supported are 'gpt2' (byte-level BPE), "
            "'gemma4' (Gemma 4's BPE) and 'llama' (SentencePiece)"
        )
    return Tokenizer.from_metadata(meta)
