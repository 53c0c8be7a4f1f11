"""A model file's tensors against its own hyper-parameters, before any weight is read.

A GGUF is untrusted input: its header may claim a vocabulary, head count or FFN size its
tensors do not have, and every kernel sizes its reads from those claims (the embedding
gather, the LM head, the attention). `check_shapes` proves that each tensor the model reads
has exactly the shape the configuration implies, and that the vocabulary the header, the
tokenizer and the embedding state is one number, so that token ids checked against
`ModelConfig.vocab_size` are rows the embedding really has. The file layer (offsets, sizes,
types inside the file) is `gguf_loader`'s; a missing tensor is the model's own refusal.

`check_tensors_read` and `check_keys_read` prove the converse: nothing in the file is left unread. A tensor the model
does not read, or a key of the architecture or the tokenizer that no reader asked for (the
readers see the metadata through a `ReadKeys`, which records what they ask), would mean the
file asks for a computation Strata does not do: the load is refused naming it, unless the key
is on `INFORMATIONAL_KEYS`, each with the reason it cannot change a logprob.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from strata_engine.api import ModelLoadError
from strata_engine.config import ModelConfig
from strata_engine.gemma4 import MOE_TENSORS as GEMMA4_MOE_TENSORS
from strata_engine.gemma4 import PLE_TENSORS as GEMMA4_PLE_TENSORS
from strata_engine.gemma4 import TENSORS as GEMMA4_TENSORS
from strata_engine.gemma4 import moe_shapes as gemma4_moe_shapes
from strata_engine.gguf_loader import TensorInfo, shown
from strata_engine.gpt_oss import TENSORS as GPT_OSS_TENSORS
from strata_engine.hybrid import hybrid_shapes
from strata_engine.rope import FACTOR_TENSORS

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
    want: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (cfg.vocab_size, h),
        "output.weight": (cfg.vocab_size, h),
        "output_norm.weight": (h,),
    }
    if cfg.hybrid is not None:  # qwen35: its own layers (hybrid.py)
        want |= hybrid_shapes(cfg.hybrid, cfg.n_layers, h, cfg.n_heads, cfg.n_kv_heads, d, cfg.ffn)
    for i in range(cfg.n_layers if cfg.hybrid is None else 0):
        p = f"blk.{i}."
        kv_heads, d = cfg.heads(i)  # gemma4: per layer
        q, kv, ffn = cfg.n_heads * d, kv_heads * d, cfg.ffn_size(i)
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
            p + "ffn_down.weight": (h, ffn),
            p + "ffn_gate.weight": (ffn, h),
            # phi3 stores [gate; up] as one ffn_up (no ffn_gate)
            p + "ffn_up.weight": (ffn, h) if p + "ffn_gate.weight" in tensors else (2 * ffn, h),
        }
        if cfg.arch == "gemma4":  # its output scale and per-layer embedding parts
            e = cfg.ple_dim
            want |= {
                p + "layer_output_scale.weight": (1,),
                p + "inp_gate.weight": (e, h),
                p + "proj.weight": (h, e),
            }
            want[p + "post_norm.weight"] = (h,)
        if cfg.n_experts:
            want |= _expert_shapes(tensors, p, cfg, meta)
    if cfg.ple_dim:  # gemma4 E2B / E4B
        n, e = cfg.n_layers, cfg.ple_dim
        want["per_layer_token_embd.weight"] = (cfg.vocab_size, n * e)
        want["per_layer_model_proj.weight"] = (n * e, h)
        want["per_layer_proj_norm.weight"] = (e,)
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
    oai = {  # gpt-oss: sinks, the attention output's, the router's and the experts' biases
        p + "attn_sinks.weight": (cfg.n_heads,),
        p + "attn_output.bias": (h,),
        p + "ffn_gate_inp.bias": (e,),
        p + "ffn_gate_exps.bias": (e, ffn),
        p + "ffn_up_exps.bias": (e, ffn),
        p + "ffn_down_exps.bias": (e, h),
    }
    return {
        p + "ffn_gate_inp.weight": (e, h),
        p + "ffn_gate_exps.weight": (e, ffn, h),
        p + "ffn_up_exps.weight": (e, ffn, h),
        p + "ffn_down_exps.weight": (e, h, ffn),
        **(oai if cfg.arch == "gpt-oss" else {}),
        **(gemma4_moe_shapes(p, e, h, ffn) if cfg.arch == "gemma4" else {}),
    }


class ReadKeys(Mapping[str, Any]):
    """The file's metadata, recording each key a reader asks for (`get`, `[]`, `in`); iterating
    records nothing, so a reader that walks every key does not vouch for them all."""

    def __init__(self, meta: Mapping[str, Any]) -> None:
        self._meta = meta
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self._meta[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return key in self._meta

    def __iter__(self) -> Iterator[str]:
        return iter(self._meta)

    def __len__(self) -> int:
        return len(self._meta)


# Keys known not to change any logprob Strata computes, each with the reason ("{arch}." keys by
# their suffix). Everything under general. is informational; quantize. records how the file was
# made (imatrix provenance).
INFORMATIONAL_KEYS: dict[str, str] = {
    "{arch}.tensor_data_layout": "the converter's note on how q/k rows are permuted; the permuted rows are read as stored",
    "{arch}.rope.scaling.finetuned": "whether the model was fine-tuned with its scaling; llama.cpp only logs it",
    "{arch}.pooling_type": "embedding models' pooling; generation reads the logits, not a pooled vector",
    "phi3.attention.sliding_window": "llama.cpp disables Phi-3's sliding window (full attention), as Strata does",
    "tokenizer.ggml.scores": "read for SentencePiece vocabularies; BPE vocabularies rank merges instead, as llama.cpp",
    "tokenizer.ggml.merges": "read for BPE vocabularies; SentencePiece vocabularies merge by score, as llama.cpp",
    "tokenizer.ggml.pre": "read for byte-level BPE; llama.cpp ignores it for SentencePiece and Gemma 4 vocabularies",
    "tokenizer.ggml.unknown_token_id": "read for SentencePiece vocabularies; BPE ones cover every byte, never emitting it",
    "tokenizer.ggml.add_space_prefix": "read for SentencePiece vocabularies; llama.cpp's BPE never applies it",
    "tokenizer.ggml.remove_extra_whitespaces": "llama.cpp reads it for UGM (T5) vocabularies only",
    "tokenizer.ggml.precompiled_charsmap": "llama.cpp reads it for UGM (T5) vocabularies only",
    "tokenizer.ggml.token_type_count": "BERT's segment types: no decoder reads them",
    "tokenizer.ggml.cls_token_id": "an encoder's token, never inserted by a decoder's tokenizer",
    "tokenizer.ggml.seperator_token_id": "an encoder's token, never inserted by a decoder's tokenizer",
    "tokenizer.ggml.mask_token_id": "an encoder's token, never inserted by a decoder's tokenizer",
    "tokenizer.ggml.add_sep_token": "llama.cpp adds a separator for encoder (WPM/UGM) vocabularies only",
    "tokenizer.huggingface.json": "the original tokenizer file, kept for reference; the ggml keys define the vocabulary",
    "tokenizer.chat_templates": "the names of alternative templates (tool use, RAG); the default template is read",
    "tokenizer.chat_template.*": "alternative named templates; a client chooses one by passing it as the template",
}
_ALWAYS_INFORMATIONAL = ("general.", "quantize.")


def _informational(key: str, arch: str) -> bool:
    if key.startswith(_ALWAYS_INFORMATIONAL):
        return True
    for pattern in INFORMATIONAL_KEYS:
        name = pattern.replace("{arch}", arch)
        if key == name or (name.endswith(".*") and key.startswith(name[:-1])):
            return True
    return False


def check_tensors_read(tensors: Mapping[str, TensorInfo], cfg: ModelConfig) -> None:
    """Every tensor is one the model reads, else one `ModelLoadError` naming the first that is
    not and what reading it would need (before any weight is read)."""
    expected = _expected_tensors(cfg)
    for name in tensors:
        if name not in expected:
            raise ModelLoadError(
                f"model file has tensor {shown(name)}, which Strata's {cfg.arch} model does not read: "
                f"it would need {_needs(name)}"
            )


def check_keys_read(meta: ReadKeys, arch: str, tokenizer: bool) -> None:
    """Every key (the tokenizer's with `tokenizer`, else all others) was read or is informational;
    else one `ModelLoadError` naming it. Split files are refused: one part is not the model."""
    split = meta.get("split.count", 1)
    if split != 1:
        raise ModelLoadError(
            f"model file is part of a split GGUF (split.count = {split!r}): merge the parts into one file first"
        )
    for key in meta:
        if key.startswith("tokenizer.") != tokenizer or key in meta.read:
            continue
        if _informational(key, arch) or key.startswith("split."):
            continue
        where = "its tokenizer" if tokenizer else f"the {arch} model"
        raise ModelLoadError(
            f"GGUF metadata {shown(key)} is not read by {where} and not known to leave the computation "
            "unchanged: Strata refuses the file rather than compute something else than it asks"
        )


def _expected_tensors(cfg: ModelConfig) -> set[str]:
    """The names `Transformer` reads for this configuration (optional ones included)."""
    names = {"token_embd.weight", "output.weight", "output_norm.weight", *FACTOR_TENSORS.get(cfg.arch, ())}
    if cfg.hybrid is not None:
        hybrid = hybrid_shapes(cfg.hybrid, cfg.n_layers, 1, cfg.n_heads, cfg.n_kv_heads, 1, 1)
        return names | set(hybrid)
    layer = [
        "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_qkv.weight",
        "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.weight", "ffn_norm.weight",
    ]  # fmt: skip
    if cfg.qk_norm:
        layer += ["attn_q_norm.weight", "attn_k_norm.weight"]
    if cfg.post_norms:
        layer += ["post_attention_norm.weight", "post_ffw_norm.weight"]
    if cfg.arch == "gpt-oss":
        layer += GPT_OSS_TENSORS
    if cfg.arch == "gemma4":  # the per-layer embedding parts only where the model has them
        layer += GEMMA4_TENSORS if cfg.ple_dim else GEMMA4_TENSORS[:1]
        names.update(GEMMA4_PLE_TENSORS if cfg.ple_dim else ())
        layer += GEMMA4_MOE_TENSORS if cfg.n_experts else ()
    if cfg.n_experts:
        layer += ["ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"]
    if not cfg.n_experts or cfg.arch == "gemma4":  # gemma4's mixture-of-experts layers keep a dense FFN
        layer += ["ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"]
    names.update(f"blk.{i}.{n}" for i in range(cfg.n_layers) for n in layer)
    return names


TENSOR_NEEDS = {  # a tensor name's last parts -> what the computation would need
    "attn_qkv.bias": "a bias on the fused q/k/v projection",
    "attn_output.bias": "a bias on the attention output (gpt-oss only)",
    "attn_sinks.weight": "attention sinks (gpt-oss only)",
    "ffn_gate.bias": "biases in the feed-forward layer",
    "ffn_up.bias": "biases in the feed-forward layer",
    "ffn_down.bias": "biases in the feed-forward layer",
    "ffn_gate_shexp.weight": "shared experts",
    "ffn_up_shexp.weight": "shared experts",
    "ffn_down_shexp.weight": "shared experts",
    "ffn_gate_inp_shexp.weight": "a gated shared expert",
    "exp_probs_b.bias": "an expert-routing bias",
    "ssm_in.weight": "the legacy fused q/k/v/z DeltaNet projection (qwen3next files converted before attn_qkv)",
    "attn_q_norm.weight": "per-head q/k norms, which this architecture does not have",
    "attn_k_norm.weight": "per-head q/k norms, which this architecture does not have",
    "post_attention_norm.weight": "post-norms, which this architecture does not have",
    "post_ffw_norm.weight": "post-norms, which this architecture does not have",
    "rope_freqs.weight": "RoPE frequency factors, which llama.cpp reads for llama, mistral3 and gemma4 files only",
    "layer_output_scale.weight": "a per-layer output scale (gemma4 only)",
    "ffn_gate_up_exps.weight": "Gemma 4's mixture-of-experts layers (gemma4 with expert_count only)",
    "pre_ffw_norm_2.weight": "Gemma 4's mixture-of-experts layers (gemma4 with expert_count only)",
}


def _needs(name: str) -> str:
    for suffix, need in TENSOR_NEEDS.items():
        if name.endswith(suffix):
            return need
    if name.startswith("rope_factors_"):
        return "LongRoPE factor tables, which llama.cpp reads for llama, mistral3 and phi3 files only"
    return "a part of a model variant Strata does not implement"
