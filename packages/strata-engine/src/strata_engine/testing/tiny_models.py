"""Tiny random GGUF models written with gguf.GGUFWriter, one per supported architecture.

Each model has two layers, hidden 256 (so every K-quant fits a row) and a ~300-token
byte-level BPE vocabulary, and stores its 2-D weights in a rotating mix of weight types so
that one model holds every type the engine supports. Types gguf-py can quantize are
quantized from random normal values; the rest (K-quants and other fallback types) are
random blocks with sane fp16 scales, written as raw bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFWriter, quants
from gguf import GGMLQuantizationType as QT

from strata_engine import LLMEngine, LogprobParams, PromptScores, Request, SamplingParams, Step

SUPPORTED_TYPES = (
    QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q4_K, QT.Q5_K, QT.Q6_K,
)  # fmt: skip
NATIVE_TYPES = (
    QT.F32,
    QT.F16,
    QT.BF16,
    QT.Q4_0,
    QT.Q4_1,
    QT.Q5_0,
    QT.Q5_1,
    QT.Q8_0,
    QT.Q2_K,
    QT.Q4_K,
    QT.Q5_K,
    QT.Q6_K,
    QT.IQ2_XXS,
    QT.IQ2_XS,
    QT.IQ2_S,
    QT.IQ3_XXS,
    QT.IQ3_S,
    QT.IQ1_S,
    QT.IQ4_NL,
    QT.IQ4_XS,
    QT.MXFP4,
)  # what the C kernels read in block form
# types beyond SUPPORTED_TYPES: Q3_K rewritten at load (kernels/transcode.py), IQ4_NL read as held
EXTRA_FALLBACK_TYPES = (QT.Q3_K, QT.IQ4_NL)

HIDDEN = 256
FFN = 512
N_LAYERS = 2
N_HEADS = 4
N_KV_HEADS = 2
CTX = 256

# fp16 scale fields of the types gguf-py cannot quantize: byte offset -> (low, high) of the
# value written there, chosen so that dequantised weights are of order 0.05.
_RAW_SCALES: dict[QT, dict[int, tuple[float, float]]] = {
    QT.Q4_K: {0: (1e-4, 3e-4), 2: (1e-3, 2e-3)},  # d, dmin
    QT.Q5_K: {0: (5e-5, 1.5e-4), 2: (1e-3, 2e-3)},  # d, dmin
    QT.Q6_K: {208: (2e-5, 6e-5)},  # d (after ql, qh, scales)
    QT.Q3_K: {108: (5e-4, 1.5e-3)},  # d (after hmask, qs, scales)
    QT.Q2_K: {80: (1e-3, 3e-3), 82: (1e-3, 3e-3)},  # d, dmin
    QT.IQ4_NL: {0: (5e-4, 1.5e-3)},  # d
    QT.IQ4_XS: {0: (3e-5, 8e-5)},  # d, times (ls - 32) up to 32 and codebook values up to 127
    QT.IQ3_XXS: {0: (4e-4, 8e-4)},  # d
    QT.IQ3_S: {0: (2e-4, 6e-4)},  # d
    QT.IQ2_XXS: {0: (5e-4, 1.5e-3)},  # d
    QT.IQ1_S: {0: (3e-3, 8e-3)},  # d
    QT.IQ2_XS: {0: (3e-4, 9e-4)},  # d
    QT.IQ2_S: {0: (3e-4, 9e-4)},  # d
    QT.Q8_1: {0: (1e-3, 3e-3), 2: (-1.0, 1.0)},  # d, s (types gguf-py cannot dequantize)
    QT.Q8_K: {},  # its d is an fp32; left random, the engine must refuse the type anyway
}


@dataclass(frozen=True)
class TinySpec:
    """One tiny model: architecture, tokenizer pre-splitter, head layout and weight types."""

    name: str
    arch: str
    pre: str
    tied: bool  # no output.weight: the head reuses token_embd.weight
    head_dim: int
    type_offset: int  # where in SUPPORTED_TYPES the rotation of weight types starts


TINY_SPECS = (
    TinySpec("llama-tied", "llama", "smollm", tied=True, head_dim=64, type_offset=0),
    TinySpec("qwen2-untied", "qwen2", "qwen2", tied=False, head_dim=64, type_offset=4),
    TinySpec("qwen3-untied", "qwen3", "qwen2", tied=False, head_dim=128, type_offset=8),
)


def byte_symbols() -> list[str]:
    """GPT-2's byte-to-printable-character table (byte-level BPE vocabulary entries)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


_MERGES = (
    "Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "r e", "a t", "e n", "Ġ s", "Ġ w", "Ġ o",
    "i s", "o r", "e s", "Ġ c", "Ġ b", "a n", "Ġa n", "Ġan d", "i t", "Ġ f", "Ġ p", "l l", "Ġ m",
    "o u", "Ġ i", "Ġi s", "Ġ d", "in g", "e d", "Ċ Ċ", "Ġ 1", "Ġ Ġ", "ĠĠ ĠĠ",
)  # fmt: skip
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def tiny_vocabulary() -> tuple[list[str], list[str], list[int]]:
    """(tokens, merges, token types): 256 byte tokens, the merged pieces, then the specials."""
    tokens = byte_symbols()
    for merge in _MERGES:
        left, right = merge.split(" ")
        assert left in tokens and right in tokens, merge
        tokens.append(left + right)
    tokens += SPECIAL_TOKENS
    types = [1] * (len(tokens) - len(SPECIAL_TOKENS)) + [3] * len(SPECIAL_TOKENS)
    return tokens, list(_MERGES), types


VOCAB_SIZE = len(tiny_vocabulary()[0])
BOS_ID = VOCAB_SIZE - 3  # <|endoftext|>
EOS_ID = VOCAB_SIZE - 1  # <|im_end|>


def random_blocks(qtype: QT, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Random stored blocks of a type gguf-py cannot quantize, with sane fp16 scales."""
    block, type_size = GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    data = rng.integers(0, 256, size=(rows * cols // block, type_size), dtype=np.uint8)
    for offset, (low, high) in _RAW_SCALES[qtype].items():
        scale = rng.uniform(low, high, size=data.shape[0]).astype(np.float16)
        data[:, offset : offset + 2] = scale.view(np.uint8).reshape(-1, 2)
    return data.reshape(rows, cols // block * type_size)


# where each block keeps its fp16 fields (scale d; Q4_1's and Q5_1's min m; the K-quants' d and
# dmin); F16 and BF16 have none: every bit pattern (infinities, NaNs, subnormals) is a value
HALF_OFFSETS: dict[QT, tuple[int, ...]] = {
    QT.F16: (),
    QT.BF16: (),
    QT.Q4_0: (0,),
    QT.Q8_0: (0,),
    QT.Q4_1: (0, 2),
    QT.Q5_0: (0,),
    QT.Q5_1: (0, 2),
    QT.Q2_K: (80, 82),
    QT.Q4_K: (0, 2),
    QT.Q5_K: (0, 2),
    QT.Q6_K: (208,),
    QT.IQ2_XS: (0,),
    QT.IQ2_S: (0,),
}


def random_native_blocks(qtype: QT, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Arbitrary bytes with any finite fp16 scales: zero, negative, subnormal, huge."""
    block, type_size = GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(rows * cols // block, type_size), dtype=np.uint8)
    data[:8, len(HALF_OFFSETS[qtype]) * 2 :] = 0xFF  # the largest quants (a Q8_0 -1, a Q6_K scale -1)
    data[8:16, len(HALF_OFFSETS[qtype]) * 2 :] = 0  # the smallest
    if not HALF_OFFSETS[qtype]:  # F16, BF16: signed zeros, subnormals, the extremes, infinities, NaNs
        special = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7C01]
        special += [0x7E00, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7F81, 0x7FC0]
        data[16 : 16 + len(special)] = np.array(special, dtype=np.uint16).view(np.uint8).reshape(-1, 2)
    for offset in HALF_OFFSETS[qtype]:
        scale = rng.integers(0, 1 << 16, size=data.shape[0], dtype=np.uint16)
        scale[(scale & 0x7C00) == 0x7C00] &= 0x83FF  # inf/NaN exponent -> a subnormal instead
        scale[:4] = [0x0000, 0x8000, 0x0001, 0x03FF]  # +0, -0, smallest and largest subnormal
        data[:, offset : offset + 2] = scale.view(np.uint8).reshape(-1, 2)
    return data.reshape(rows, -1)


def encode_tensor(values: np.ndarray, qtype: QT, rng: np.random.Generator) -> np.ndarray:
    """The stored form of a 2-D tensor in `qtype` (quantised, or random blocks)."""
    if qtype in _RAW_SCALES:
        return random_blocks(qtype, values.shape, rng)
    return quants.quantize(values.astype(np.float32), qtype)


def add_weight(
    writer: GGUFWriter, name: str, values: np.ndarray, qtype: QT, rng: np.random.Generator
) -> None:
    writer.add_tensor(name, encode_tensor(values, qtype, rng), raw_dtype=qtype)


def _add_tokenizer(writer: GGUFWriter, pre: str) -> None:
    tokens, merges, types = tiny_vocabulary()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types(types)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(False)


def write_tiny_model(
    path: Path,
    spec: TinySpec,
    seed: int = 0,
    overrides: dict[str, QT] | None = None,
    chat_template: str | None = None,
    scales: dict[str, float] | None = None,
    ctx: int = CTX,
    weight_type: QT | None = None,
    extra: Callable[[GGUFWriter], None] | None = None,
) -> Path:
    """Write `spec` as a GGUF file at `path`; weights are random (seeded).

    `overrides` forces the type of named 2-D weights (to write a type the engine must refuse);
    `chat_template` is stored as `tokenizer.chat_template` (none by default); `scales`
    multiplies named tensors' values (e.g. denormal embeddings); `weight_type` stores every 2-D
    weight in one type instead of the rotation; `extra` adds keys or tensors of its own.
    """
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(path), spec.arch)
    writer.add_block_count(N_LAYERS)
    writer.add_context_length(ctx)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(N_HEADS)
    writer.add_head_count_kv(N_KV_HEADS)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(10000.0 if spec.arch == "llama" else 1000000.0)
    writer.add_layer_norm_rms_eps(1e-5 if spec.arch == "llama" else 1e-6)
    writer.add_vocab_size(VOCAB_SIZE)
    _add_tokenizer(writer, spec.pre)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    types = itertools.cycle(SUPPORTED_TYPES[spec.type_offset :] + SUPPORTED_TYPES[: spec.type_offset])

    def matrix(name: str, rows: int, cols: int, std: float) -> None:
        qtype = next(types) if weight_type is None else weight_type
        qtype = (overrides or {}).get(name, qtype)
        values = rng.normal(0.0, std, size=(rows, cols)) * (scales or {}).get(name, 1.0)
        add_weight(writer, name, values, qtype, rng)

    def vec(name: str, n: int, center: float, std: float) -> None:
        values = (center + rng.normal(0.0, std, size=n)) * (scales or {}).get(name, 1.0)
        writer.add_tensor(name, values.astype(np.float32))

    q_out, kv_out = N_HEADS * spec.head_dim, N_KV_HEADS * spec.head_dim
    matrix("token_embd.weight", VOCAB_SIZE, HIDDEN, 0.15)
    for i in range(N_LAYERS):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", HIDDEN, 1.0, 0.1)
        matrix(p + "attn_q.weight", q_out, HIDDEN, 0.05)
        matrix(p + "attn_k.weight", kv_out, HIDDEN, 0.05)
        matrix(p + "attn_v.weight", kv_out, HIDDEN, 0.05)
        if spec.arch == "qwen2":
            vec(p + "attn_q.bias", q_out, 0.0, 0.1)
            vec(p + "attn_k.bias", kv_out, 0.0, 0.1)
            vec(p + "attn_v.bias", kv_out, 0.0, 0.1)
        if spec.arch == "qwen3":
            vec(p + "attn_q_norm.weight", spec.head_dim, 1.0, 0.1)
            vec(p + "attn_k_norm.weight", spec.head_dim, 1.0, 0.1)
        matrix(p + "attn_output.weight", HIDDEN, q_out, 0.05)
        vec(p + "ffn_norm.weight", HIDDEN, 1.0, 0.1)
        matrix(p + "ffn_gate.weight", FFN, HIDDEN, 0.05)
        matrix(p + "ffn_up.weight", FFN, HIDDEN, 0.05)
        matrix(p + "ffn_down.weight", HIDDEN, FFN, 0.05)
    vec("output_norm.weight", HIDDEN, 1.0, 0.1)
    if not spec.tied:
        matrix("output.weight", VOCAB_SIZE, HIDDEN, 0.15)
    if extra is not None:
        extra(writer)
    _write(writer)
    return path


def write_tensor_file(path: Path, tensors: dict[str, tuple[np.ndarray, QT]], arch: str = "llama") -> Path:
    """A GGUF holding only the given stored tensors (name -> (stored array, type))."""
    writer = GGUFWriter(str(path), arch)
    for name, (stored, qtype) in tensors.items():
        writer.add_tensor(name, stored, raw_dtype=qtype)
    _write(writer)
    return path


def _write(writer: GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# every type the fp32 mode reads in blocks, in one model (the untied qwen2: q/k/v biases); q/k and
# gate/up share a type, so they run fused
QUANTISED_TYPES = {
    "token_embd": QT.Q8_0,
    "attn_q": QT.Q4_1,
    "attn_k": QT.Q4_1,
    "attn_v": QT.Q5_K,
    "attn_output": QT.Q4_K,
    "ffn_gate": QT.Q4_0,
    "ffn_up": QT.Q4_0,
    "ffn_down": QT.Q6_K,
    "output": QT.Q4_K,
}


def write_quantised_model(path: Path, seed: int = 5) -> Path:
    """The untied qwen2 tiny model with its 2-D weights in QUANTISED_TYPES."""
    spec = next(s for s in TINY_SPECS if s.arch == "qwen2")
    types = {
        f"{p}{name}.weight": qtype
        for name, qtype in QUANTISED_TYPES.items()
        for p in ([""] if name in ("token_embd", "output") else [f"blk.{i}." for i in range(N_LAYERS)])
    }
    return write_tiny_model(path, spec, seed=seed, overrides=types)


def vocab_logprobs(engine: LLMEngine, prompt: list[int]) -> np.ndarray:
    """The engine's logprob of every vocabulary id at every position after the first, and after
    the prompt ([len(prompt), VOCAB_SIZE]): what ReferenceModel.logprobs(prompt) gives."""
    events = engine.generate(
        Request(
            tuple(prompt),
            SamplingParams(max_tokens=1, temperature=0.0),
            LogprobParams(top_n=1, prompt_logprobs=True, named_ids=tuple(range(VOCAB_SIZE))),
        )
    )
    scores = next(e for e in events if isinstance(e, PromptScores))
    (step,) = [e for e in events if isinstance(e, Step)]
    rows = [r for r in scores.rows if r is not None] + [step.logprobs]
    return np.array([[row.named[i] for i in range(VOCAB_SIZE)] for row in rows])
