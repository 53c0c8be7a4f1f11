"""Model files of a real model's shape (SmolLM2-135M, Qwen3-1.7B / 8B) with random weights, for
the GPU check and the Triton tests at a real shape: random stored blocks with sane scales (written
directly: quantising billions of values would take minutes) and the tiny byte-level vocabulary
padded to the shape's size."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Shape:
    """A llama/qwen3-style model shape."""

    arch: str
    hidden: int
    ffn: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    ctx: int
    rope_base: float = 0.0  # 0: the architecture's usual base (llama 10000, qwen3 1e6)


SMOLLM2 = Shape("llama", 576, 1536, 30, 9, 3, 64, 49152, 2048, rope_base=100000.0)
SIZES = {
    "qwen3-8b": Shape("qwen3", 4096, 12288, 36, 32, 8, 128, 151936, 4096),
    "qwen3-1.7b": Shape("qwen3", 2048, 6144, 28, 16, 8, 128, 151936, 4096),
}
# K-quant rows hold 256 values: the smallest shapes every mix can write
TINY = Shape("llama", 256, 256, 2, 4, 2, 64, 320, 256)
TINY_BIG = Shape("qwen3", 256, 512, 2, 4, 2, 64, 320, 256)


def random_blocks(qtype: Any, rows: int, cols: int, rng: Any) -> Any:
    """Random stored blocks with sane fp16 scales, written directly (quantising billions of values
    would take too long): tiny_models' rule for K-quants, a scale (and min) for the others."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as QT

    from strata_engine.testing.tiny_models import random_blocks as k_blocks

    if qtype in (QT.Q4_K, QT.Q5_K, QT.Q6_K):
        return k_blocks(qtype, (rows, cols), rng)
    block, size = GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
    data[:, :2] = (
        rng.uniform(5e-4, 1.5e-3, size=data.shape[0]).astype(np.float16).view(np.uint8).reshape(-1, 2)
    )
    if qtype == QT.Q4_1:  # the min
        data[:, 2:4] = (
            rng.uniform(-8e-3, -4e-3, size=data.shape[0]).astype(np.float16).view(np.uint8).reshape(-1, 2)
        )
    return data.reshape(rows, -1)


MIXES = {  # (layer weights, attn_v/ffn_down, embedding and head)
    "Q4_1": ("Q4_1", "Q4_1", "Q8_0"),
    "Q4_K_M": ("Q4_K", "Q6_K", "Q6_K"),
}


def write_model(path: Path, shape: Shape, mix: str, seed: int = 0) -> Path:
    """A GGUF of `shape` with random weights of `mix` and the tiny byte-level vocabulary padded to
    `shape.vocab` with unmergeable filler tokens."""
    import numpy as np
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFWriter

    from strata_engine.testing.tiny_models import tiny_vocabulary

    base, more, head = (QT[t] for t in MIXES[mix])
    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), shape.arch)
    w.add_block_count(shape.layers)
    w.add_context_length(shape.ctx)
    w.add_embedding_length(shape.hidden)
    w.add_feed_forward_length(shape.ffn)
    w.add_head_count(shape.heads)
    w.add_head_count_kv(shape.kv_heads)
    w.add_key_length(shape.head_dim)
    w.add_value_length(shape.head_dim)
    w.add_rope_dimension_count(shape.head_dim)
    w.add_rope_freq_base(shape.rope_base or (10000.0 if shape.arch == "llama" else 1000000.0))
    w.add_layer_norm_rms_eps(1e-5 if shape.arch == "llama" else 1e-6)
    w.add_vocab_size(shape.vocab)
    tokens, merges, types = tiny_vocabulary()
    specials = len(tokens) - 3
    fill = [f"<f{i}>" for i in range(shape.vocab - len(tokens))]
    tokens = tokens[:specials] + fill + tokens[specials:]
    types = types[:specials] + [1] * len(fill) + types[specials:]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_bos_token_id(shape.vocab - 3)
    w.add_eos_token_id(shape.vocab - 1)
    w.add_add_bos_token(False)

    def vec(name: str, n: int, center: float) -> None:
        w.add_tensor(name, (center + rng.normal(0, 0.05, size=n)).astype(np.float32))

    drawn: dict[tuple[Any, int, int], Any] = {}

    def mat(name: str, qtype: Any, rows: int, cols: int, layer: int = 0) -> None:
        """Each (type, shape) drawn once; layer `layer` gets its rows rotated by `layer`: layers
        differ, and an 8B file is written in seconds, not minutes (the draws dominated)."""
        if (qtype, rows, cols) not in drawn:
            drawn[qtype, rows, cols] = random_blocks(qtype, rows, cols, rng)
        w.add_tensor(name, np.roll(drawn[qtype, rows, cols], layer, axis=0), raw_dtype=qtype)

    q_out, kv_out = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    mat("token_embd.weight", head, shape.vocab, shape.hidden)
    for i in range(shape.layers):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", shape.hidden, 1.0)
        mat(p + "attn_q.weight", base, q_out, shape.hidden, i)
        mat(p + "attn_k.weight", base, kv_out, shape.hidden, i)
        mat(p + "attn_v.weight", more if i % 3 == 0 else base, kv_out, shape.hidden, i)
        if shape.arch == "qwen3":
            vec(p + "attn_q_norm.weight", shape.head_dim, 1.0)
            vec(p + "attn_k_norm.weight", shape.head_dim, 1.0)
        mat(p + "attn_output.weight", base, shape.hidden, q_out, i)
        vec(p + "ffn_norm.weight", shape.hidden, 1.0)
        mat(p + "ffn_gate.weight", base, shape.ffn, shape.hidden, i)
        mat(p + "ffn_up.weight", base, shape.ffn, shape.hidden, i)
        mat(p + "ffn_down.weight", more if i % 3 == 0 else base, shape.hidden, shape.ffn, i)
    vec("output_norm.weight", shape.hidden, 1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
