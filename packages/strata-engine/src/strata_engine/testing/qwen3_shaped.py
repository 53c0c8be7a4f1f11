"""A Qwen3-1.7B-shaped GGUF with random weights of one type mixture, for the benchmarks and the
accuracy tool: llama.cpp's Q4_K_M (or Q5_K_M) choice of types per tensor, or one type for every
projection; random blocks whose values have a real model's spread; the default model's tokenizer.
Written once, cached under STRATA_HOME/bench, never committed."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFReader, GGUFValueType, GGUFWriter
from gguf import GGMLQuantizationType as QT

# Qwen3-1.7B (config.json): tie_word_embeddings true, max_position_embeddings 40960
SHAPE = {"layers": 28, "hidden": 2048, "heads": 16, "kv_heads": 8, "head_dim": 128, "ffn": 6144}
CTX = 4096  # the file's context length (Qwen3's 40960 would only size Strata's KV reservation)
WEIGHT_STD = 0.02  # of the projections; the tied embedding 0.04 (logits of order 1-2)
# llama.cpp's LLAMA_FTYPE_MOSTLY_*: the K-quant mixes, then files of one type the loader rewrites
# as Q8_0 / Q6_K blocks (kernels/transcode.py; every projection of that type, the embedding Q6_K)
FTYPES = {
    "q4_k_m": 15, "q5_k_m": 17, "f16": 1, "bf16": 32, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8,
    "q5_1": 9, "q2_k": 10, "q3_k": 11, "q6_k": 18, "iq2_xxs": 19, "iq2_xs": 20, "iq3_xxs": 23,
    "iq1_s": 24, "iq4_nl": 25, "iq3_s": 26, "iq2_s": 28, "iq4_xs": 30, "iq1_m": 31, "mxfp4": 38,
}  # fmt: skip
BASE_TYPE = {"q4_k_m": QT.Q4_K, "q5_k_m": QT.Q5_K, **{m: QT[m.upper()] for m in FTYPES if not m.endswith("_m")},
             "iq1_m": QT.IQ1_M}  # fmt: skip
# where a type's fp16 block scale d lies (bytes from the block's start); with a second fp16 field
# (a min), where it lies and the min as a multiple of d that centres the block's values near zero
SCALE_AT = {QT.Q4_0: 0, QT.Q8_0: 0, QT.Q5_0: 0, QT.Q4_1: 0, QT.Q5_1: 0, QT.Q2_K: 80, QT.Q3_K: 108,
            QT.IQ2_XXS: 0, QT.IQ2_XS: 0, QT.IQ2_S: 0, QT.IQ3_XXS: 0, QT.IQ3_S: 0, QT.IQ1_S: 0,
            QT.IQ4_NL: 0, QT.IQ4_XS: 0}  # fmt: skip
MIN_AT = {QT.Q4_1: (2, -8.0), QT.Q5_1: (2, -16.0), QT.Q2_K: (82, 1.5)}


def use_more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's choice (llama-quant.cpp) of the Q4_K_M layers whose attn_v/ffn_down get Q6_K."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def _fp16_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).view(np.uint8).reshape(-1, 2)


def _scale_bytes(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K's 8 six-bit scales and mins in 12 bytes, as llama.cpp's get_scale_min_k4 unpacks them."""
    return np.concatenate(
        [
            (sc[:, :4] & 0x3F) | ((sc[:, 4:] >> 4) << 6),
            (m[:, :4] & 0x3F) | ((m[:, 4:] >> 4) << 6),
            (sc[:, 4:] & 0x0F) | ((m[:, 4:] & 0x0F) << 4),
        ],
        axis=1,
    )


def _random_with_mins(n_blocks: int, std: float, rng: np.random.Generator, bits: int) -> np.ndarray:
    """Q4_K (bits 4, 144 bytes) or Q5_K (bits 5, 176 bytes) super-blocks: w = d * sc * q - dmin * m
    with random q of `bits` bits; dmin = 2^(bits-1) d (exact in fp16) and m = round(mean(q) sc /
    2^(bits-1)), so each sub-block is centred near zero. Q5_K's fifth bits (qh) come before its
    nibbles, both random."""
    blocks = np.empty((n_blocks, 16 + 32 * bits), dtype=np.uint8)
    sc = rng.integers(16, 64, size=(n_blocks, 8), dtype=np.uint8)
    half = 2 ** (bits - 1)
    m = np.rint(sc * ((2 * half - 1) / 2 / half)).astype(np.uint8)
    std_q = {4: 4.6, 5: 9.2}[bits]  # of uniform q over 0 .. 2^bits - 1
    d = std / (40 * std_q) * rng.uniform(0.75, 1.25, size=n_blocks)  # E[sc] ~ 40
    blocks[:, 0:2] = _fp16_bytes(d)
    blocks[:, 2:4] = _fp16_bytes(d.astype(np.float16).astype(np.float32) * half)
    blocks[:, 4:16] = _scale_bytes(sc, m)
    blocks[:, 16:] = rng.integers(0, 256, size=(n_blocks, 32 * bits), dtype=np.uint8)
    return blocks


def random_q4_k(n_blocks: int, std: float, rng: np.random.Generator) -> np.ndarray:
    return _random_with_mins(n_blocks, std, rng, 4)


def random_q5_k(n_blocks: int, std: float, rng: np.random.Generator) -> np.ndarray:
    return _random_with_mins(n_blocks, std, rng, 5)


def random_q6_k(n_blocks: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """Q6_K super-blocks (210 bytes): w = d * sc * (q - 32), random 6-bit q, int8 scales of
    either sign."""
    blocks = np.empty((n_blocks, 210), dtype=np.uint8)
    blocks[:, :192] = rng.integers(0, 256, size=(n_blocks, 192), dtype=np.uint8)  # ql, qh
    sc = rng.integers(8, 25, size=(n_blocks, 16)) * rng.choice([-1, 1], size=(n_blocks, 16))
    blocks[:, 192:208] = sc.astype(np.int8).view(np.uint8)
    d = std / (16 * 18.5) * rng.uniform(0.75, 1.25, size=n_blocks)  # E|sc| ~ 16, std(q) ~ 18.5
    blocks[:, 208:210] = _fp16_bytes(d)
    return blocks


RANDOM_BLOCKS = {QT.Q4_K: random_q4_k, QT.Q5_K: random_q5_k, QT.Q6_K: random_q6_k}


def random_scaled(qtype: QT, n_blocks: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """Random blocks of another type whose values have about `std`: every byte random, then the
    block scale (fp16 d, IQ1_M's d in its scales' top nibbles, or MXFP4's power-of-two exponent)
    set from the spread at d = 1; F16 and BF16 as normal values."""
    from gguf import quants

    if qtype in (QT.F16, QT.BF16):
        values = rng.normal(0.0, std, size=n_blocks).astype(np.float32)
        return np.ascontiguousarray(quants.quantize(values, qtype)).view(np.uint8).reshape(n_blocks, -1)
    blocks = rng.integers(0, 256, size=(n_blocks, GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
    if qtype == QT.MXFP4:
        blocks[:, 0] = 128  # d = 2^-1, kvalues twice e2m1's
        unit = float(np.std(quants.dequantize(blocks[:256].reshape(-1), qtype)))
        blocks[:, 0] = 128 + int(np.rint(np.log2(std / unit)))
        return blocks

    def set_scale(d: np.ndarray) -> None:
        if qtype == QT.IQ1_M:  # d's 16 bits in the top nibble of each of the 4 u16 scales (bytes 48-55)
            bits = d.astype(np.float16).view(np.uint16)
            top = blocks[:, 49:56:2]
            for i in range(4):
                top[:, i] = (top[:, i] & 0x0F) | (((bits >> (4 * i)) & 0x0F) << 4).astype(np.uint8)
            blocks[:, 49:56:2] = top
            return
        at = SCALE_AT[qtype]
        blocks[:, at : at + 2] = _fp16_bytes(d)
        if qtype in MIN_AT:
            m_at, times = MIN_AT[qtype]
            blocks[:, m_at : m_at + 2] = _fp16_bytes(d.astype(np.float16).astype(np.float32) * times)

    set_scale(np.ones(n_blocks))
    unit = float(np.std(quants.dequantize(blocks[:256].reshape(-1), qtype)))
    set_scale(std / unit * rng.uniform(0.75, 1.25, size=n_blocks))
    return blocks


def random_weight(qtype: QT, rows: int, cols: int, std: float, rng: np.random.Generator) -> np.ndarray:
    block, size = GGML_QUANT_SIZES[qtype]
    make = RANDOM_BLOCKS.get(qtype, partial(random_scaled, qtype))
    return make(rows * cols // block, std, rng).reshape(rows, cols // block * size)


def mixture(layers: int, mix: str = "q4_k_m") -> dict[str, QT]:
    """Each 2-D weight's type, as llama.cpp's Q4_K_M (or Q5_K_M) would choose it for this shape."""
    base = BASE_TYPE[mix]
    types = {"token_embd.weight": QT.Q6_K}  # tied: quantised as the output, Q6_K
    for i in range(layers):
        more = use_more_bits(i, layers) and mix in ("q4_k_m", "q5_k_m")
        for name in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
            types[f"blk.{i}.{name}.weight"] = base
        for name in ("attn_v", "ffn_down"):
            types[f"blk.{i}.{name}.weight"] = QT.Q6_K if more else base
    return types


def copy_tokenizer(writer: GGUFWriter, source: Path) -> int:
    """Copy every tokenizer.* key of `source` into `writer`; the vocabulary size."""
    reader = GGUFReader(source)
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), field.types[0], sub)
    return len(reader.fields["tokenizer.ggml.tokens"].data)


def write_model(path: Path, layers: int, seed: int = 0, mix: str = "q4_k_m") -> None:
    """Write the random Qwen3-shaped Q4_K_M-style (or Q5_K_M-style) GGUF to `path` (atomically)."""
    from strata_engine.model_store import resolve_model

    s = {**SHAPE, "layers": layers}
    rng = np.random.default_rng(seed)
    tmp = path.with_suffix(".tmp")
    w = GGUFWriter(str(tmp), "qwen3")
    w.add_name(f"random Qwen3-1.7B-shaped {mix.upper()}-style ({layers} layers, SmolLM2 vocabulary)")
    w.add_file_type(FTYPES[mix])
    w.add_block_count(layers)
    w.add_context_length(CTX)
    w.add_embedding_length(s["hidden"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    vocab = copy_tokenizer(w, resolve_model("default"))
    w.add_vocab_size(vocab)

    def norm(name: str, n: int) -> None:
        w.add_tensor(name, (1.0 + rng.normal(0.0, 0.05, size=n)).astype(np.float32))

    types = mixture(layers, mix)
    q_out, kv_out = s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    shapes = {"attn_q": (q_out, s["hidden"]), "attn_k": (kv_out, s["hidden"]), "attn_v": (kv_out, s["hidden"]),
              "attn_output": (s["hidden"], q_out), "ffn_gate": (s["ffn"], s["hidden"]),
              "ffn_up": (s["ffn"], s["hidden"]), "ffn_down": (s["hidden"], s["ffn"])}  # fmt: skip
    emb = "token_embd.weight"
    w.add_tensor(
        emb, random_weight(types[emb], vocab, s["hidden"], 2 * WEIGHT_STD, rng), raw_dtype=types[emb]
    )
    for i in range(layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", s["hidden"])
        norm(p + "attn_q_norm.weight", s["head_dim"])
        norm(p + "attn_k_norm.weight", s["head_dim"])
        norm(p + "ffn_norm.weight", s["hidden"])
        for name, (rows, cols) in shapes.items():
            qtype = types[f"{p}{name}.weight"]
            w.add_tensor(
                f"{p}{name}.weight", random_weight(qtype, rows, cols, WEIGHT_STD, rng), raw_dtype=qtype
            )
    norm("output_norm.weight", s["hidden"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)


def model_path(out: str | None, layers: int, mix: str = "q4_k_m") -> Path:
    from strata_engine.paths import strata_home

    if out:
        return Path(out)
    return strata_home() / "bench" / f"qwen3-1.7b-shape-{layers}l-{mix}-random.gguf"
