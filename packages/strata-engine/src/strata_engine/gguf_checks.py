"""A model file's tensors against its own hyper-parameters, before any weight is read.

A GGUF is untrusted input: its header may claim a vocabulary, head count or FFN size its
tensors do not have, and every kernel sizes its reads from those claims (the embedding
gather, the LM head, the attention). `check_shapes` proves that each tensor the model reads
has exactly the shape the configuration implies, and that the vocabulary the header, the
tokenizer and the embedding state is one number, so that token ids checked against
`ModelConfig.vocab_size` are rows the embedding really has. The file layer (offsets, sizes,
types inside the file) is `gguf_loader`'s; a missing tensor is the model's own refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strata_engine.api import ModelLoadError
from strata_engine.config import ModelConfig
from strata_engine.gguf_loader import TensorInfo

_TOKENIZER_KEYS = {  # key -> (kind of value, kind of each element for a list)
    "tokenizer.ggml.model": (str, None),
    "tokenizer.ggml.pre": (str, None),
    "tokenizer.ggml.tokens": (list, str),
    "tokenizer.ggml.merges": (list, str),
    "tokenizer.ggml.token_type": (list, int),
    "tokenizer.ggml.scores": (list, (int, float)),
    "tokenizer.ggml.bos_token_id": (int, None),
    "tokenizer.ggml.eos_token_id": (int, None),
    "tokenizer.ggml.unknown_token_id": (int, None),
    "tokenizer.ggml.padding_token_id": (int, None),
    "tokenizer.ggml.eot_token_id": (int, None),
    "tokenizer.ggml.eom_token_id": (int, None),
    "tokenizer.ggml.add_bos_token": (bool, None),
    "tokenizer.ggml.add_eos_token": (bool, None),
    "tokenizer.ggml.add_space_prefix": (bool, None),
    "tokenizer.chat_template": (str, None),
}


def check_metadata_types(meta: Mapping[str, Any]) -> None:
    """The tokenizer's keys hold the kinds of value the tokenizer reads (a list of strings for
    the tokens, an integer id, ...): a file that stores another kind is refused by key name."""
    for key, (kind, element) in _TOKENIZER_KEYS.items():
        if key not in meta:
            continue
        value = meta[key]
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if ok and element is not None:
            ok = all(isinstance(v, element) and not isinstance(v, bool) for v in value)
        if not ok:
            want = kind.__name__ if element is None else f"a list of {_names(element)}"
            raise ModelLoadError(f"GGUF metadata {key} must be {want}")


def _names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def check_shapes(tensors: Mapping[str, TensorInfo], cfg: ModelConfig, meta: Mapping[str, Any]) -> None:
    """Every tensor the model reads has the shape `cfg` implies; one vocabulary size throughout.

    Shapes are torch order ([out, in] for a weight). Absent optional tensors are skipped here;
    the model refuses a missing required one by name.
    """
    arch, h, d = cfg.arch, cfg.hidden, cfg.head_dim
    n_tokens = len(meta.get("tokenizer.ggml.tokens") or ())
    embedding = tensors.get("token_embd.weight")
    if embedding is not None and embedding.shape[:1] != (cfg.vocab_size,):
        raise ModelLoadError(
            f"tensor token_embd.weight has {embedding.shape[0]} rows but {arch}.vocab_size says "
            f"{cfg.vocab_size}: the vocabulary must be the embedding's rows"
        )
    if n_tokens and n_tokens != cfg.vocab_size:
        raise ModelLoadError(
            f"tokenizer.ggml.tokens holds {n_tokens} tokens but {arch}.vocab_size says {cfg.vocab_size}"
        )
    q, kv = cfg.n_heads * d, cfg.n_kv_heads * d
    want: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (cfg.vocab_size, h),
        "output.weight": (cfg.vocab_size, h),
        "output_norm.weight": (h,),
    }
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        want |= {
            p + "attn_norm.weight": (h,),
            p + "ffn_norm.weight": (h,),
            p + "post_attention_norm.weight": (h,),
            p + "post_ffw_norm.weight": (h,),
            p + "attn_q.weight": (q, h),
            p + "attn_k.weight": (kv, h),
            p + "attn_v.weight": (kv, h),
            p + "attn_qkv.weight": (q + 2 * kv, h),
            p + "attn_q.bias": (q,),
            p + "attn_k.bias": (kv,),
            p + "attn_v.bias": (kv,),
            p + "attn_q_norm.weight": (d,),
            p + "attn_k_norm.weight": (d,),
            p + "attn_output.weight": (h, q),
            p + "ffn_down.weight": (h, cfg.ffn),
            p + "ffn_gate.weight": (cfg.ffn, h),
            # phi3 stores [gate; up] as one ffn_up (no ffn_gate)
            p + "ffn_up.weight": (cfg.ffn, h) if p + "ffn_gate.weight" in tensors else (2 * cfg.ffn, h),
        }
        if cfg.n_experts:
            want |= _expert_shapes(tensors, p, cfg, meta)
    for name, shape in want.items():
        info = tensors.get(name)
        if info is not None and info.shape != shape:
            raise ModelLoadError(
                f"tensor {name} has shape {list(info.shape)}, but the header's {arch} hyper-parameters "
                f"need {list(shape)}"
            )


def _expert_shapes(
    tensors: Mapping[str, TensorInfo], p: str, cfg: ModelConfig, meta: Mapping[str, Any]
) -> dict[str, tuple[int, ...]]:
    """A mixture-of-experts layer's router and expert tensors; the experts' FFN size is
    expert_feed_forward_length where the file has it, else the gate tensor's own."""
    e, h = cfg.n_experts, cfg.hidden
    ffn = meta.get(f"{cfg.arch}.expert_feed_forward_length")
    if not isinstance(ffn, int) or isinstance(ffn, bool):
        gate = tensors.get(p + "ffn_gate_exps.weight")
        ffn = gate.shape[1] if gate is not None and len(gate.shape) == 3 else cfg.ffn
    return {
        p + "ffn_gate_inp.weight": (e, h),
        p + "ffn_gate_exps.weight": (e, ffn, h),
        p + "ffn_up_exps.weight": (e, ffn, h),
        p + "ffn_down_exps.weight": (e, h, ffn),
    }
