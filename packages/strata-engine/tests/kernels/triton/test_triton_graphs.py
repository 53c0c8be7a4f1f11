"""The static decode path of the Triton backend (kernels/triton/graphs.py, `STRATA_CUDA_GRAPHS=1`),
under Triton's interpreter: what a CUDA graph captures per batch-size bucket runs eagerly each
step here, so its bits, its padding and its buffers are proven without a GPU.

One scenario drives an engine (a one-layer llama, fp32 weights): requests of different lengths
join and leave, so that decode-only steps run 1, 2, 5, 4, 3 and 1 rows (buckets 1, 2, 8 and 4; a
prefill joining makes a step of mixed rows, which stays on the eager path). It runs on the CPU engine (the C kernels) and on
TritonOps with the switch on, instrumented:

- every full-vocabulary logprob row with the switch on equals, as bytes, the CPU engine's (the
  rows of TritonOps with the switch off are the CPU engine's too, test_triton_engine_bits.py,
  and the mixed steps here run that eager path);
- each step of a bucket makes the same launches and torch ops with the same sizes, scalars and
  grids, reads the same static input buffers at the same addresses, reads no device value on the
  host and makes no tensor from host data: what a graph captures once repeats verbatim;
- the padding rows' K/V land only in the scratch block: the device cache's real blocks equal the
  CPU engine's cache, byte for byte;
- a step ends with the LM head over the bucket's rows and their log-softmax, in place (the last
  launches recorded inside `run`); the runner's reads of those rows after it (top logprobs,
  named ids, a draw on the device) give the CPU engine's events with no log-softmax run again.

A short gemma2 run takes the static path through its extras (soft-capping, a sliding window, the
embedding scale) to the CPU engine's rows too.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from triton.runtime import interpreter

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams
from strata_engine.kernels.rows import DeviceDraw, RowRead, SparseRow
from strata_engine.kernels.triton import graphs, logprobs, select
from strata_engine.logprobs import best_first
from strata_engine.testing.tiny_arch_models import ArchSpec, write_arch_model
from strata_engine.testing.triton_checks import assert_same_rows
from strata_engine.testing.triton_setup import DEVICE

SPEC = ArchSpec("llama-bpe", "llama", spm=False, n_layers=1)  # fp32 weights: the C kernels' bits
# step -> (prompt length, tokens to generate) of the requests added before that step
JOINS = {0: [(6, 8)], 2: [(5, 6)], 4: [(18, 5), (3, 2), (4, 3)]}
ALLOCATIONS = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}
NOT_OPS = {"detach", "lift_fresh", "alias", "set_"}


@dataclass
class Run:
    """What one engine computed: each row's bytes, each step's rows, and its KV cache."""

    rows: dict[tuple, bytes] = field(default_factory=dict)
    steps: list[tuple[int, bool]] = field(default_factory=list)  # (rows, every row one token)
    engine: Any = None


def _drive(
    path: Path, kernels_device: str, monkeypatch: pytest.MonkeyPatch | None = None, joins: dict = JOINS
) -> Run:
    """The scenario on one engine: "cpu" or "graphs" (TritonOps, switch on)."""
    if kernels_device == "graphs":
        assert monkeypatch is not None
        monkeypatch.setenv(graphs.SWITCH, "1")
    device = "cpu" if kernels_device == "cpu" else "cuda"
    kw: dict[str, Any] = {"num_threads": 2} if device == "cpu" else {}
    engine = LLMEngine(
        path, device=device, kernels="native-fp32", parallel=8, prefix_cache=False, kv_cache_mb=1, **kw
    )
    if monkeypatch is not None:
        monkeypatch.delenv(graphs.SWITCH, raising=False)
    out = Run(engine=engine)
    engine.runner.sparse = False  # every row whole: the rows are compared as bytes
    run = engine.runner.run

    def recording_run(work):  # type: ignore[no-untyped-def]
        out.steps.append((len(work), all(w.end - w.start == 1 for w in work)))
        refs, lp = run(work)

        def rows():  # type: ignore[no-untyped-def]
            for ref, row in zip(refs, lp, strict=True):  # rows share a buffer: copy each now
                out.rows[(ref.work.seq.request.prompt_ids, ref.position, ref.samples)] = row.tobytes()
                yield row

        return refs, rows()

    engine.runner.run = recording_run
    rng = np.random.default_rng(7)
    streams = []
    step = 0
    while step == 0 or engine.has_work():
        for length, generate in joins.get(step, []):
            prompt = tuple(int(t) for t in rng.integers(7, 250, size=length))
            params = SamplingParams(max_tokens=generate, temperature=0.0, ignore_eos=True)
            streams.append(engine.add(Request(prompt, params, LogprobParams(top_n=1))))
        engine.step()
        step += 1
    assert all(s.take() for s in streams)
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_arch_model(tmp_path_factory.mktemp("graphs") / "m.gguf", SPEC, seed=3, types=(QT.F32,))


@pytest.fixture(scope="module")
def runs(model) -> dict[str, Run]:
    """The scenario on the CPU engine; the switch-on run is `graphs_run`'s."""
    return {"cpu": _drive(model, "cpu")}


@dataclass
class Replays:
    """Each static step's ops (by bucket), and what must never happen inside one."""

    ops: dict[int, list[list[tuple]]] = field(default_factory=lambda: defaultdict(list))
    rows: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    host_reads: Counter[str] = field(default_factory=Counter)
    buffer_ptrs: set[tuple[int, ...]] = field(default_factory=set)


class _Ops(TorchDispatchMode):
    """Records torch ops (allocations included) with their tensors described by `describe`."""

    def __init__(self, log: list[tuple], describe, replays: Replays) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.log, self.describe, self.replays = log, describe, replays
        self.inside_triton = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.overloadpacket.__name__
        if not self.inside_triton:
            if name == "_local_scalar_dense":
                self.replays.host_reads[".item()"] += 1
            elif name == "lift_fresh":
                self.replays.host_reads["a tensor from host data"] += 1
            elif not func.is_view and name not in NOT_OPS:  # views: no launch to capture
                self.log.append(("torch." + name, self.describe((args, kwargs or {}))))
        out = func(*args, **(kwargs or {}))
        if name in ALLOCATIONS and not self.inside_triton:
            self.log.append(("alloc", tuple(out.shape), str(out.dtype)))
        return out


@pytest.fixture(scope="module")
def graphs_run(model) -> tuple[Run, Replays]:
    """The scenario with the switch on, each static step recorded (see the module docstring)."""
    mp = pytest.MonkeyPatch()
    replays = Replays()
    try:
        run = _instrumented(model, mp, replays)
    finally:
        mp.undo()
    return run, replays


def _instrumented(path: Path, mp: pytest.MonkeyPatch, replays: Replays) -> Run:
    original_run = graphs.DecodeGraphs.run
    original_step = graphs.DecodeGraphs.step
    launch = interpreter.InterpretedFunction.run
    real_rows: list[int] = []
    state: dict[str, Any] = {"mode": None}

    def step(self, model, ids, meta, kv):  # type: ignore[no-untyped-def]
        real_rows.append(len(ids))
        return original_step(self, model, ids, meta, kv)

    def run(self, model, kv, b):  # type: ignore[no-untyped-def]
        roles = {}
        assert self.buffers is not None
        replays.buffer_ptrs.add(tuple(t.data_ptr() for t in self.buffers.tensors()))
        for name, t in zip(
            ("ids", "positions", "token_seq", "slots", "tables"), self.buffers.tensors(), strict=True
        ):
            roles[t.untyped_storage().data_ptr()] = f"static.{name}"
        ops = model.ops
        for i, (k, v) in enumerate(kv):
            roles[ops._cache(k).untyped_storage().data_ptr()] = f"kv{i}.k"
            roles[ops._cache(v).untyped_storage().data_ptr()] = f"kv{i}.v"

        def describe(tree):  # type: ignore[no-untyped-def]
            leaves, _ = tree_flatten(tree)
            out = []
            for x in leaves:
                if isinstance(x, torch.Tensor):
                    role = roles.get(x.untyped_storage().data_ptr(), "temp")
                    out.append((role, tuple(x.shape), tuple(x.stride()), x.storage_offset(), str(x.dtype)))
                elif isinstance(x, float):
                    out.append(("float", np.float64(x).tobytes()))
                else:
                    out.append(repr(x))
            return tuple(out)

        log: list[tuple] = []
        mode = _Ops(log, describe, replays)
        state["mode"] = mode

        def from_numpy(a):  # type: ignore[no-untyped-def]
            replays.host_reads["torch.from_numpy"] += 1
            return original_from_numpy(a)

        def host_read(name, method):  # type: ignore[no-untyped-def]
            def read(t, *a, **k):  # type: ignore[no-untyped-def]
                if not mode.inside_triton:
                    replays.host_reads[f"Tensor.{name}"] += 1
                return method(t, *a, **k)

            return read

        original_from_numpy = torch.from_numpy
        methods = {name: getattr(torch.Tensor, name) for name in ("cpu", "numpy", "tolist", "item")}
        torch.from_numpy = from_numpy  # type: ignore[assignment]
        for name, method in methods.items():
            setattr(torch.Tensor, name, host_read(name, method))
        try:
            with mode:
                out = original_run(self, model, kv, b)
        finally:
            torch.from_numpy = original_from_numpy  # type: ignore[assignment]
            for name, method in methods.items():
                setattr(torch.Tensor, name, method)
            state["mode"] = None
        replays.ops[b].append(log)
        replays.rows[b].append(real_rows[-1])
        return out

    def launched(self, *args, grid, warmup, **kwargs):  # type: ignore[no-untyped-def]
        mode = state["mode"]
        if mode is None:
            return launch(self, *args, grid=grid, warmup=warmup, **kwargs)
        mode.log.append(("triton." + self.fn.__name__, repr(grid), mode.describe((args, kwargs))))
        mode.inside_triton = True
        try:
            return launch(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            mode.inside_triton = False

    mp.setattr(graphs.DecodeGraphs, "run", run)
    mp.setattr(graphs.DecodeGraphs, "step", step)
    mp.setattr(interpreter.InterpretedFunction, "run", launched)
    return _drive(path, "graphs", mp)


def test_the_scenario_crosses_buckets(runs, graphs_run) -> None:
    """The static path ran every decode-only step, padded into buckets 1, 2, 4 and 8, with two
    steps of different row counts in one bucket (else the tests below would prove less)."""
    run, replays = graphs_run
    decode_only = [n for n, single in run.steps if single]
    assert decode_only == [n for n, single in runs["cpu"].steps if single]
    assert sorted(n for rows in replays.rows.values() for n in rows) == sorted(decode_only)
    assert set(replays.rows) == {1, 2, 4, 8}, dict(replays.rows)
    assert run.engine.ops.decode_graphs.steps == Counter({b: len(n) for b, n in replays.rows.items()})
    assert len(set(replays.rows[4])) == 2, dict(replays.rows)
    assert any(not single for _, single in run.steps), "a mixed step (a prefill joining) ran eagerly"


def test_rows_equal_the_cpu_engine(runs, graphs_run) -> None:
    run, _ = graphs_run
    assert len(run.rows) == sum(generate for joins in JOINS.values() for _, generate in joins)
    assert_same_rows(runs["cpu"].rows, run.rows, "switch on vs the CPU engine")


def test_each_step_of_a_bucket_repeats_the_same_launches(graphs_run) -> None:
    """A replayed graph repeats each launch with the captured addresses, sizes and scalars: so
    every step of a bucket must make the same ops with the same arguments (temporaries compared
    by shape), read its inputs from the same static buffers, and never read the device on the
    host or make a tensor from host data."""
    _, replays = graphs_run
    assert not replays.host_reads, f"inside the captured region: {dict(replays.host_reads)}"
    assert len(replays.buffer_ptrs) == 1, "the static buffers moved"
    for b, logs in replays.ops.items():
        for i, log in enumerate(logs[1:], 1):
            for j, (x, y) in enumerate(zip(logs[0], log, strict=False)):
                assert x == y, f"bucket {b}, step {i} vs 0, op {j}: {x} != {y}"
            assert len(log) == len(logs[0]), (
                f"bucket {b}: step {i} made {len(log)} ops, step 0 {len(logs[0])}"
            )
    roles = {
        part[0] for log in replays.ops[4] for entry in log for part in entry[-1] if isinstance(part, tuple)
    }
    assert {"static.ids", "static.positions", "static.token_seq", "static.slots", "static.tables"} <= roles


def test_the_lm_head_and_log_softmax_are_inside_the_step(graphs_run) -> None:
    """What a graph captures ends with the LM head over every row of the bucket ([b, vocab]
    logits) and the log-softmax of those rows in place: the runner only selects and reads after
    it (a tail moved back out of `run` would not be recorded here)."""
    run, replays = graphs_run
    vocab = run.engine.model.output.out_features
    for b, logs in replays.ops.items():
        launches = [entry for entry in logs[0] if entry[0].startswith("triton.")]
        *_, head, tail = launches
        assert tail[0] == "triton._log_softmax_kernel", f"bucket {b}: the last launch is {tail[0]}"
        assert head[0] == "triton._dot1_kernel", f"bucket {b}: before the log-softmax, {head[0]}"
        shapes = [part[1:3] for part in tail[-1] if isinstance(part, tuple) and len(part) == 5]
        assert shapes == [((b, vocab), (vocab, 1))] * 2, f"bucket {b}: log-softmax over {shapes}, in place"
        assert ((b, vocab), (vocab, 1)) in [part[1:3] for part in head[-1] if isinstance(part, tuple)]


def test_reads_of_the_steps_rows_give_the_cpu_engines_events(model, monkeypatch) -> None:
    """The runner's reads of the rows a static step log-softmaxed (top logprobs, named ids, a
    draw on the device), selected after it with nothing recomputed: the CPU engine's events, no
    row copied back whole."""
    prompt = (12, 200, 33, 71)
    requests = [
        Request(
            prompt, SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True), LogprobParams(top_n=5)
        ),
        Request(
            prompt[1:],
            SamplingParams(max_tokens=2, temperature=0.9, top_p=0.9, seed=5, ignore_eos=True),
            LogprobParams(top_n=2, named_ids=(3, 17)),
        ),
    ]
    kw: dict[str, Any] = dict(kernels="native-fp32", parallel=8, prefix_cache=False, kv_cache_mb=1)
    cpu = LLMEngine(model, device="cpu", num_threads=2, **kw).generate_batch(requests)
    softmaxed: list[tuple[int, ...]] = []
    log_softmax = logprobs.log_softmax

    def counted_log_softmax(logits, out=None):  # type: ignore[no-untyped-def]
        softmaxed.append(tuple(logits.shape))
        return log_softmax(logits, out)

    # before the engine: the backend hands the static path its log-softmax when it is made
    monkeypatch.setattr(logprobs, "log_softmax", counted_log_softmax)
    monkeypatch.setenv(graphs.SWITCH, "1")
    engine = LLMEngine(model, device="cuda", **kw)
    monkeypatch.delenv(graphs.SWITCH)
    reads: list = []
    read_logprobs = engine.runner._read_logprobs

    def counted(lp, wants, at):  # type: ignore[no-untyped-def]
        reads.extend(wants)
        return read_logprobs(lp, wants, at)

    engine.runner._read_logprobs = counted
    softmaxed.clear()
    gpu = engine.generate_batch(requests)
    vocab = engine.model.output.out_features
    # one log-softmax a step: the prefill's (eager, its 2 rows), the static step's (bucket 2), none after
    assert softmaxed == [(2, vocab), (2, vocab)], softmaxed
    assert engine.ops.decode_graphs.steps == Counter({2: 1}), "the decode step on the static path"
    assert len(reads) == 2 and all(r is not None for r in reads), "every row read sparse"
    # each token of the sampled request drawn on the device (the first from the prefill's row)
    assert sum(r.draw is not None for r in reads) == 1 and engine.ops.device_draws == 2
    for i, (a, b) in enumerate(zip(cpu, gpu, strict=True)):
        assert a == b, f"request {i}: the static path's events differ from the CPU engine's"


def test_a_read_of_rows_at_given_places_is_of_those_rows() -> None:
    """`select.read_rows(lp, reads, at)`, as the runner reads a bucket's rows: read i is of row
    at[i], full rows, selections and a draw mixed, out of order: each equals that row's own read
    (its bytes, `best_first`'s listing and named values of the numpy row, the draw of the row
    read alone)."""
    x = np.random.default_rng(9).standard_normal((6, 300)).astype(np.float32)
    x -= np.log(np.exp(x.astype(np.float64)).sum(axis=1, keepdims=True)).astype(np.float32)
    x[4, 17] = 3.0  # row 4's best entry differs from the others'
    draw = RowRead(2, (), DeviceDraw(0.8, 0, 1.0, 0.3))
    reads: list[RowRead | None] = [None, RowRead(4, (3, 250)), draw, None, RowRead(3, (17,))]
    at = [5, 4, 3, 0, 1]
    lp = torch.from_numpy(x).to(DEVICE)
    got, _ = select.read_rows(lp, reads, at)
    for row, read, r in zip(got, reads, at, strict=True):
        if read is None:
            assert isinstance(row, np.ndarray) and row.tobytes() == x[r].tobytes(), f"row {r}"
            continue
        assert isinstance(row, SparseRow)
        assert row.top[: read.top] == best_first(enumerate(x[r].tolist()), read.top), f"row {r}"
        assert row.take(read.ids).tobytes() == x[r, list(read.ids)].tobytes()
    alone, _ = select.read_rows(lp[3:4], [draw])
    assert isinstance(got[2], SparseRow) and isinstance(alone[0], SparseRow)
    assert got[2].drawn == alone[0].drawn is not None


def test_padding_rows_write_only_the_scratch_block(runs, graphs_run) -> None:
    """The device cache's real blocks equal the CPU engine's cache byte for byte (a padding row's
    K/V anywhere in them would differ), and the scratch block past them was written."""
    run, _ = graphs_run
    cpu_kv = runs["cpu"].engine.runner.kv
    ops = run.engine.ops
    for i, (k, v) in enumerate(run.engine.runner.kv):
        for name, host, cpu in (("k", k, cpu_kv[i][0]), ("v", v, cpu_kv[i][1])):
            device = ops._cache(host).cpu().numpy()
            blocks = host.shape[0]
            assert device.shape[0] == blocks + graphs.SCRATCH_BLOCKS
            assert device[:blocks].tobytes() == cpu.tobytes(), f"layer {i} {name}: a real block differs"
            assert np.any(device[blocks:] != 0), f"layer {i} {name}: no padding row wrote the scratch block"


def test_gemma2_rows_equal_the_cpu_engine(tmp_path, monkeypatch) -> None:
    """The static path through gemma2's extras (embedding scale, soft-capped scores on a sliding
    window that the 12-token prompt outgrows, post-norms, GeGLU): the CPU engine's rows."""
    spec = ArchSpec("gemma2-bpe", "gemma2", spm=False, n_layers=1, window=8)
    path = write_arch_model(tmp_path / "gemma2.gguf", spec, seed=5, types=(QT.F32,))
    joins = {0: [(12, 4)], 2: [(9, 3)]}
    cpu = _drive(path, "cpu", joins=joins)
    run = _drive(path, "graphs", monkeypatch, joins=joins)
    assert run.engine.model.cfg.window(0) == 8 and run.engine.model.cfg.attn_softcap
    assert run.engine.ops.decode_graphs.steps == Counter({1: 2, 2: 1})
    assert_same_rows(cpu.rows, run.rows, "gemma2, switch on vs the CPU engine")
