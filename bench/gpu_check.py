"""The GPU path checked in one run (issue 11): kernels, invariance, a model end to end, speed.

    python bench/gpu_check.py                 # on a CUDA machine with torch + triton, no network
    python bench/gpu_check.py --dry-run       # anywhere: Triton's interpreter on the CPU, tiny shapes

(a) every Triton kernel against its float64 torch reference (and gguf-py's dequantiser), and the
    bitwise batch invariance of every kernel (row i of an M-row call == the one-row call);
(b) a SmolLM2-135M-shaped GGUF (random weights, written here) through `LLMEngine(device="cuda")`:
    repeated identical requests and a batch of 16 give identical bits;
(c) a randomly initialised model of realistic size (Qwen3-8B-shaped by default; Q4_0 layers,
    Q8_0 embedding and head, the types the engine keeps packed today): decode tokens/s at batch
    1, 8, 64, prefill tokens/s at 2048 tokens, and the decode mat-vec kernels' achieved memory
    bandwidth (Q4_0, Q8_0, Q4_K, Q6_K at the model's shapes) as a fraction of a device-to-device
    copy measured here.
Prints one table; exits 1 if any check failed, 2 if there is no CUDA device.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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


SMOLLM2 = Shape("llama", 576, 1536, 30, 9, 3, 64, 49152, 2048)
SIZES = {
    "qwen3-8b": Shape("qwen3", 4096, 12288, 36, 32, 8, 128, 151936, 4096),
    "qwen3-1.7b": Shape("qwen3", 2048, 6144, 28, 16, 8, 128, 151936, 4096),
}
TINY = Shape("llama", 64, 128, 2, 4, 2, 16, 320, 256)
TINY_BIG = Shape("qwen3", 256, 256, 2, 4, 2, 64, 320, 256)

rows: list[tuple[str, str, str, str]] = []  # (section, check, result, detail)
failures: list[str] = []


def report(section: str, check: str, ok: bool | None, detail: str) -> None:
    result = "-" if ok is None else ("ok" if ok else "FAIL")
    rows.append((section, check, result, detail))
    if ok is False:
        failures.append(f"{section} {check}")
    print(f"  {section} {check}: {result} {detail}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="Triton interpreter on the CPU, tiny shapes")
    parser.add_argument("--size", choices=sorted(SIZES), default="qwen3-8b", help="the model of part (c)")
    parser.add_argument("--skip-speed", action="store_true", help="skip part (c)")
    args = parser.parse_args()
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print(
            f"gpu_check: no CUDA device visible to torch {torch.__version__} (CUDA build: {torch.version.cuda}); "
            "run on a GPU machine, or pass --dry-run to exercise the script under Triton's interpreter",
            file=sys.stderr,
        )
        return 2
    try:
        import triton
    except ImportError:
        print(
            'gpu_check: triton is not installed (pip install "./packages/strata-engine[gpu]")',
            file=sys.stderr,
        )
        return 2
    sys.path.insert(0, str(ROOT / "packages/strata-engine/tests"))  # tiny_models: random GGUF blocks
    device = torch.device("cpu" if args.dry_run else "cuda")
    name = "interpreter (CPU)" if args.dry_run else torch.cuda.get_device_name()
    print(f"gpu_check on {name}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    t0 = time.perf_counter()
    check_kernels(device, args.dry_run)
    with tempfile.TemporaryDirectory() as tmp:
        check_model(Path(tmp), TINY if args.dry_run else SMOLLM2, args.dry_run)
    if not args.skip_speed:
        with tempfile.TemporaryDirectory() as tmp:
            speed(Path(tmp), device, TINY_BIG if args.dry_run else SIZES[args.size], args.dry_run)
    print(f"\n{'section':<8} {'check':<44} {'result':<6} detail")
    for section, check, result, detail in rows:
        print(f"{section:<8} {check:<44} {result:<6} {detail}")
    print(f"\n{len(rows)} rows, {len(failures)} failed, {time.perf_counter() - t0:.0f} s")
    return 1 if failures else 0


# -- (a) kernels ------------------------------------------------------------------------------------
def check_kernels(device, dry: bool) -> None:
    import numpy as np
    import torch
    from gguf import GGMLQuantizationType as QT
    from gguf import quants
    from tiny_models import encode_tensor

    from strata_engine.kernels.base import AttentionMeta, RopeTable
    from strata_engine.kernels.torch_backend import tensor
    from strata_engine.kernels.triton import activation, attention, logprobs, matmul, norm, rope
    from strata_engine.kernels.triton.stored import from_gguf

    def same(a, b) -> bool:
        a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
        return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))

    gen = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    m_big = 8 if dry else 64
    n, k = (40, 512) if dry else (1000, 4096)
    for qtype in (QT.F32, QT.Q4_0, QT.Q4_1, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K):
        values = rng.normal(0, 0.05, size=(n, k)).astype(np.float32)
        blocks = values if qtype == QT.F32 else encode_tensor(values, qtype, rng)
        dense = torch.from_numpy(np.asarray(quants.dequantize(blocks, qtype), dtype=np.float32).reshape(n, k))
        sw = from_gguf(blocks, qtype, (n, k), device)
        got = matmul.gather_rows(torch.arange(n, device=device), sw.wq, sw.wf, sw.kt, k, sw.row_bytes)
        report("a", f"dequantise {qtype.name} == gguf-py", same(got, dense), "bitwise")
        x = torch.randn(m_big, k, generator=gen)
        y = matmul.matmul(x.to(device), sw.wq, sw.wf, sw.kt, n, k, sw.row_bytes).cpu()
        ref = matmul.matmul_reference(x, dense)
        err = float((y.double() - ref).abs().max() / (x.double().abs() @ dense.double().abs().T).max())
        report("a", f"matmul {qtype.name} vs float64", err < 1e-6, f"max err / max |x||w| = {err:.1e}")
        inv = all(
            same(
                matmul.matmul(x[i : i + 1].to(device), sw.wq, sw.wf, sw.kt, n, k, sw.row_bytes), y[i : i + 1]
            )
            for i in (0, m_big // 2, m_big - 1)
        )
        report("a", f"matmul {qtype.name} batch invariance", inv, f"rows of {m_big} == 1-row calls")

    x, w = torch.randn(m_big, 4096 if not dry else 96, generator=gen), None
    w = torch.randn(x.shape[1], generator=gen)
    y = norm.rmsnorm(x.to(device), w.to(device), 1e-6).cpu()
    err = float((y.double() - norm.rmsnorm_reference(x, w, 1e-6)).abs().max())
    report("a", "rmsnorm vs float64", err < 1e-5, f"max abs err {err:.1e}")
    report(
        "a", "rmsnorm batch invariance", same(norm.rmsnorm(x[-1:].to(device), w.to(device), 1e-6), y[-1:]), ""
    )

    g, u = torch.randn(m_big, 3000, generator=gen) * 4, torch.randn(m_big, 3000, generator=gen)
    y = activation.silu_mul(g.to(device), u.to(device)).cpu()
    err = float((y.double() - activation.silu_mul_reference(g, u)).abs().max())
    report("a", "silu_mul vs float64", err < 1e-5, f"max abs err {err:.1e}")
    report(
        "a",
        "silu_mul batch invariance",
        same(activation.silu_mul(g[-1:].to(device), u[-1:].to(device)), y[-1:]),
        "",
    )

    for interleaved in (True, False):
        d = 128
        ang = np.arange(512)[:, None] * 10000.0 ** (-np.arange(d // 2) * 2.0 / d)[None, :]
        table = RopeTable(np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32), d, interleaved)
        xq = torch.randn(m_big, 8, d, generator=gen)
        pos = torch.randint(0, 512, (m_big,), generator=gen, dtype=torch.int32)
        cs, sn = tensor(table.cos).to(device), tensor(table.sin).to(device)
        y = rope.rope(xq.to(device), pos.to(device), table, cs, sn).cpu()
        err = float((y.double() - rope.rope_reference(xq, pos, table)).abs().max())
        style = "interleaved" if interleaved else "neox"
        report("a", f"rope {style} vs float64", err < 1e-4, f"max abs err {err:.1e}")
        one = rope.rope(xq[-1:].to(device), pos[-1:].to(device), table, cs, sn)
        report("a", f"rope {style} batch invariance", same(one, y[-1:]), "")

    h, kvh, d, bs = 8, 2, 128, 16
    lengths = [40, 7, 70] if dry else [600, 37, 1500]
    need = [-(-x // bs) for x in lengths]
    perm = torch.randperm(sum(need) + 3, generator=gen)
    tables = torch.zeros(len(lengths), max(need), dtype=torch.int32)
    at = 0
    for i, nb in enumerate(need):
        tables[i, :nb] = perm[at : at + nb].to(torch.int32)
        at += nb
    kc = torch.randn(len(perm), bs, kvh, d, generator=gen)
    vc = torch.randn(len(perm), bs, kvh, d, generator=gen)
    token_seq = [0, 0, 0, 1, 2, 2]
    positions = [0, lengths[0] // 2, lengths[0] - 1, lengths[1] - 1, 3, lengths[2] - 1]
    q = torch.randn(len(positions), h, d, generator=gen)

    def attend(qq, seqs, poss, tab):
        meta = AttentionMeta(
            np.array(poss, dtype=np.int32), np.array(seqs, dtype=np.int32), tab.numpy(),
            np.zeros(len(poss), dtype=np.int64), bs,
        )  # fmt: skip
        out = attention.attention(
            qq.to(device), kc.to(device), vc.to(device), meta, tensor(meta.positions).to(device),
            tensor(meta.token_seq).to(device), tensor(meta.block_tables).to(device), max(poss),
        )  # fmt: skip
        return out.cpu(), meta

    out, meta = attend(q, token_seq, positions, tables)
    err = float((out.double() - attention.attention_reference(q, kc, vc, meta)).abs().max())
    report(
        "a", "attention vs float64", err < 1e-5, f"max abs err {err:.1e} (positions up to {max(positions)})"
    )
    inv = all(
        same(
            attend(q[i : i + 1], [0], [positions[i]], tables[token_seq[i] : token_seq[i] + 1])[0],
            out[i : i + 1],
        )
        for i in range(len(positions))
    )
    report("a", "attention batch/prefill/decode invariance", inv, "each token alone == in the batch")

    vocab = 300 if dry else 151936
    x = torch.randn(m_big // 2, vocab, generator=gen) * 5
    y = logprobs.log_softmax(x.to(device)).cpu()
    err = float((y.double() - logprobs.log_softmax_reference(x)).abs().max())
    report("a", "log_softmax vs float64", err < 1e-5, f"max abs err {err:.1e}, vocab {vocab}")
    report("a", "log_softmax batch invariance", same(logprobs.log_softmax(x[-1:].to(device)), y[-1:]), "")


def random_q(qtype, rows_: int, cols: int, rng):
    """Random Q4_0 / Q8_0 blocks (an fp16 scale d of order 1e-3, then random quants), written
    directly: quantising billions of values with gguf-py would take too long."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES

    block, size = GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(rows_ * cols // block, size), dtype=np.uint8)
    data[:, :2] = (
        rng.uniform(5e-4, 1.5e-3, size=data.shape[0]).astype(np.float16).view(np.uint8).reshape(-1, 2)
    )
    return data.reshape(rows_, -1)


# -- model files ------------------------------------------------------------------------------------
def write_model(path: Path, shape: Shape, seed: int = 0) -> Path:
    """A GGUF of `shape` with random Q4_0 layers and Q8_0 embedding/head (`random_q`) and the
    tiny byte-level vocabulary padded to `shape.vocab` with unmergeable filler tokens."""
    import numpy as np
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFWriter
    from tiny_models import tiny_vocabulary

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
    w.add_rope_freq_base(10000.0 if shape.arch == "llama" else 1000000.0)
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

    def vec(name, n_, center):
        w.add_tensor(name, (center + rng.normal(0, 0.05, size=n_)).astype(np.float32))

    def mat(name, qtype, rows_, cols):
        w.add_tensor(name, random_q(qtype, rows_, cols, rng), raw_dtype=qtype)

    q_out, kv_out = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    mat("token_embd.weight", QT.Q8_0, shape.vocab, shape.hidden)
    for i in range(shape.layers):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", shape.hidden, 1.0)
        mat(p + "attn_q.weight", QT.Q4_0, q_out, shape.hidden)
        mat(p + "attn_k.weight", QT.Q4_0, kv_out, shape.hidden)
        mat(p + "attn_v.weight", QT.Q4_0, kv_out, shape.hidden)
        if shape.arch == "qwen3":
            vec(p + "attn_q_norm.weight", shape.head_dim, 1.0)
            vec(p + "attn_k_norm.weight", shape.head_dim, 1.0)
        mat(p + "attn_output.weight", QT.Q4_0, shape.hidden, q_out)
        vec(p + "ffn_norm.weight", shape.hidden, 1.0)
        mat(p + "ffn_gate.weight", QT.Q4_0, shape.ffn, shape.hidden)
        mat(p + "ffn_up.weight", QT.Q4_0, shape.ffn, shape.hidden)
        mat(p + "ffn_down.weight", QT.Q4_0, shape.hidden, shape.ffn)
    vec("output_norm.weight", shape.hidden, 1.0)
    mat("output.weight", QT.Q8_0, shape.vocab, shape.hidden)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _signature(events) -> list:
    from strata_engine import PromptScores, Step

    out = []
    for ev in events:
        rows_ = ev.rows if isinstance(ev, PromptScores) else (ev.logprobs,)
        if isinstance(ev, Step):
            out.append(("step", ev.token_id))
        out += [(r.token_id, r.logprob, r.top) for r in rows_ if r is not None]
    return out


def run_batch(engine, requests) -> list[list]:
    return [_signature(e) for e in engine.generate_batch(requests)]


def submit(engine, requests):
    """Add `requests`; returns a function that says whether all have finished."""
    outputs = [engine.add(req) for req in requests]

    def finished() -> bool:
        for out in outputs:
            out.take()
        return all(out.drained for out in outputs)

    return finished


# -- (b) a model end to end -----------------------------------------------------------------------
def check_model(tmp: Path, shape: Shape, dry: bool) -> None:
    import random

    from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams

    t = time.perf_counter()
    path = write_model(tmp / "smollm2-shaped.gguf", shape)
    engine = LLMEngine(path, device="cuda", parallel=16)
    report(
        "b",
        "engine on the Triton kernels",
        (engine.kernels, engine.invariant) == ("triton", True),
        engine.kernels,
    )
    rnd = random.Random(0)
    n_req, max_tokens = (4, 2) if dry else (16, 8)
    requests = [
        Request(
            tuple(rnd.randrange(shape.vocab - 3) for _ in range(rnd.randint(3, 12 if dry else 200))),
            SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True),
            LogprobParams(top_n=5, prompt_logprobs=True),
        )
        for _ in range(n_req)
    ]
    alone = [run_batch(engine, [r])[0] for r in requests]
    again = [run_batch(engine, [r])[0] for r in requests[:4]]
    report("b", "identical requests, identical bits", again == alone[:4], f"{len(again)} requests run twice")
    together = run_batch(engine, requests)
    diff = [i for i in range(n_req) if together[i] != alone[i]]
    report("b", f"batch of {n_req} == each alone", not diff, f"differing: {diff}" if diff else "bitwise")
    report(
        "b",
        "model shape",
        None,
        f"{shape.layers} layers, hidden {shape.hidden}, {time.perf_counter() - t:.0f} s",
    )


# -- (c) speed --------------------------------------------------------------------------------------
def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn, reps: int) -> float:
    fn()
    _sync()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    _sync()
    return (time.perf_counter() - t) / reps


def speed(tmp: Path, device, shape: Shape, dry: bool) -> None:
    import numpy as np
    import torch
    from gguf import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as QT
    from tiny_models import random_blocks

    from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams
    from strata_engine.kernels.triton import matmul
    from strata_engine.kernels.triton.stored import from_gguf

    reps = 1 if dry else 20
    nbytes = 2**20 if dry else 2**30
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    copy_bw = 2 * nbytes / _timed(lambda: dst.copy_(src), reps)
    report("c", "device-to-device copy bandwidth", None, f"{copy_bw / 1e9:.0f} GB/s (read + write)")
    src = dst = None
    rng = np.random.default_rng(1)
    for qtype, (n, k) in (
        (QT.Q4_0, (shape.ffn, shape.hidden)), (QT.Q8_0, (shape.vocab, shape.hidden)),
        (QT.Q4_K, (shape.ffn, shape.hidden)), (QT.Q6_K, (shape.hidden, shape.ffn)),
    ):  # fmt: skip
        data = (
            random_q(qtype, n, k, rng) if qtype in (QT.Q4_0, QT.Q8_0) else random_blocks(qtype, (n, k), rng)
        )
        sw = from_gguf(data, qtype, (n, k), device)
        x = torch.randn(1, k, device=device)
        sec = _timed(
            lambda sw=sw, x=x, n=n, k=k: matmul.matmul(x, sw.wq, sw.wf, sw.kt, n, k, sw.row_bytes), reps
        )
        block, size = GGML_QUANT_SIZES[qtype]
        bw = n * k // block * size / sec
        report(
            "c",
            f"mat-vec {qtype.name} [{n}x{k}]",
            None,
            f"{sec * 1e6:.0f} us, {bw / 1e9:.0f} GB/s = {bw / copy_bw:.0%} of copy",
        )
        del sw
    t = time.perf_counter()
    path = write_model(tmp / "big.gguf", shape, seed=2)
    engine = LLMEngine(
        path, device="cuda", parallel=64, step_tokens=max(2048 if not dry else 64, 64), kv_cache_mb=4096
    )
    prefill_len = 48 if dry else 2048
    load = time.perf_counter() - t
    report(
        "c",
        "big model",
        None,
        f"{shape.layers} layers, hidden {shape.hidden}, written + loaded in {load:.0f} s",
    )
    rnd = np.random.default_rng(3)

    def prompt(n_tok):
        return tuple(int(i) for i in rnd.integers(0, shape.vocab - 3, size=n_tok))

    engine.generate(Request(prompt(8), SamplingParams(max_tokens=2, ignore_eos=True)))  # warm-up: compile
    for batch in (1, 8, 64):
        if dry and batch > 8:
            continue
        decode = 2 if dry else 16
        finished = submit(
            engine,
            [
                Request(prompt(16), SamplingParams(max_tokens=decode + 1, ignore_eos=True))
                for _ in range(batch)
            ],
        )
        engine.step()  # the prefill (and first token) of every request
        _sync()
        t = time.perf_counter()
        steps = 0
        while not finished():
            engine.step()
            steps += 1
        _sync()
        sec = time.perf_counter() - t
        report(
            "c",
            f"decode batch {batch}",
            None,
            f"{batch * steps / sec:.1f} tokens/s ({steps} steps, {sec / steps * 1e3:.1f} ms/step)",
        )
    req = Request(prompt(prefill_len), SamplingParams(max_tokens=1), LogprobParams())
    t = time.perf_counter()
    engine.generate(req)  # fresh random ids: nothing comes from the prefix cache
    _sync()
    sec = time.perf_counter() - t
    report("c", f"prefill {prefill_len} tokens", None, f"{prefill_len / sec:.0f} tokens/s ({sec:.2f} s)")


if __name__ == "__main__":
    sys.exit(main())
