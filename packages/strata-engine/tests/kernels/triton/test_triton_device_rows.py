"""The logprob tail's selection on the device: what a Triton step copies back of a row.

The selection kernel (kernels/triton/select.py) against `logprobs.best_first` over the whole
row and `logprobs.top_n` (ties, NaN, -inf, signed zeros, K beyond the vocabulary, odd sizes);
the one rule (row_reads.read_for) and the host's `SparseRow` against the full row's readers
(np.argmax's NaN rule included); and a whole engine on TritonOps giving the CPU engine's events
for a batch mixing sparse and full rows, while greedy rows copy back a fraction of a full row.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)
from strata_engine.testing.triton_setup import FixedUniform, engine_on, on

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT

from strata_engine import LogprobParams, Request, SamplingParams
from strata_engine.kernels.rows import NotFetched, RowRead, SparseRow
from strata_engine.kernels.triton import select
from strata_engine.logprobs import best_first, build_row, top_n
from strata_engine.row_reads import read_for
from strata_engine.sampler import Sampler
from strata_engine.testing.tiny_arch_models import ARCH_SPECS, write_arch_model


def _rows(vocab: int) -> np.ndarray:
    """Rows whose best entries a wrong tie, NaN or sign rule would list differently."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, vocab)).astype(np.float32)
    x[0, [3, vocab // 2, vocab - 1]] = 5.0  # three copies of the max, spread out
    x[1] = np.round(x[1])  # thousands of ties at every value
    x[2, ::3] = np.nan  # NaN counts as -inf; first NaN is id 0
    x[3] = -np.inf
    x[3, [vocab - 2, 4]] = [-0.0, 0.0]  # -0.0 ties +0.0: the lower id first
    x[3, 9] = np.nan
    x[4] = np.nan
    x[5, 1:] = -np.inf  # one finite value, the rest -inf
    return x


@pytest.mark.parametrize(
    "vocab,k", [(1000, 32), (2051, 64), (37, 64)], ids=["1000-k32", "odd-2051-k64", "k>V"]
)
def test_the_selection_is_best_first_over_the_row(vocab, k) -> None:
    x = _rows(vocab)
    want = np.array([[0, vocab - 1, 5, -1]] * len(x), dtype=np.int32)
    packed = select.select(on(x), torch.arange(len(x)), k, torch.from_numpy(want)).numpy()
    ids, values, nan_ids, nan_values, got = select.unpack(packed, k)
    n = min(k, vocab)
    for r, row in enumerate(x):
        expected = best_first(enumerate(row.tolist()), n)
        assert ids[r, :n].tolist() == [i for i, _ in expected], f"row {r}"
        assert (ids[r, n:] == -1).all(), "entries past the vocabulary are marked"
        # the row's own bits (NaN payloads and signed zeros included)
        assert (values[r, :n].view(np.uint32) == row[ids[r, :n]].view(np.uint32)).all()
        nan = np.flatnonzero(np.isnan(row))
        assert nan_ids[r] == (nan[0] if nan.size else -1)
        if nan.size:
            assert math.isnan(nan_values[r])
        assert (got[r, :3].view(np.uint32) == row[[0, vocab - 1, 5]].view(np.uint32)).all()
        if not np.isnan(row).any():  # the CPU's top_n (argpartition + best_first) agrees
            assert top_n(row, n) == tuple(zip(ids[r, :n].tolist(), values[r, :n].tolist(), strict=True))


def test_each_selected_row_is_its_own() -> None:
    """Rows picked out of order, more of them than one program takes: each output row is the
    selection of the row its index names, whatever else shares its program."""
    x = np.random.default_rng(3).standard_normal((80, 300)).astype(np.float32)
    x[::7, 11] = 40.0  # some rows' best entries differ from their neighbours'
    picked = np.random.default_rng(4).permutation(80)[:70]
    want = np.stack([picked % 300, (picked * 7) % 300], axis=1).astype(np.int32)
    packed = select.select(on(x), torch.from_numpy(picked), 32, torch.from_numpy(want)).numpy()
    ids, _, _, _, got = select.unpack(packed, 32)
    for j, r in enumerate(picked.tolist()):
        assert ids[j].tolist() == [i for i, _ in best_first(enumerate(x[r].tolist()), 32)], f"row {r}"
        assert (got[j] == x[r, want[j]]).all()


def test_top_n_keeps_the_lowest_ids_of_a_tie_wider_than_its_slack() -> None:
    """The CPU listing's own tie rule, which the device's must equal: 40 ids share the max."""
    row = np.full(500, -3.0, dtype=np.float32)
    tied = np.random.default_rng(1).choice(500, 40, replace=False)
    row[tied] = -1.0
    assert [i for i, _ in top_n(row, 5)] == sorted(tied.tolist())[:5]


def _sparse(row: np.ndarray, k: int, named: tuple[int, ...]) -> SparseRow:
    """The SparseRow the device would hand over, built from a full row on the host."""
    nan = np.flatnonzero(np.isnan(row))
    return SparseRow.of(
        row.shape[0],
        best_first(enumerate(row.tolist()), min(k, row.shape[0])),
        (int(nan[0]), float(row[nan[0]])) if nan.size else None,
        zip(named, row[list(named)].tolist(), strict=True),
    )


@pytest.mark.parametrize("allowed", [None, (9, 3, 300, 3), (1, 2)])
def test_a_sparse_greedy_draw_is_np_argmax(allowed) -> None:
    """np.argmax's rules on the full row: the first NaN if any, ties to the first, all -inf -> 0."""
    greedy = Sampler(SamplingParams(temperature=0.0, allowed_token_ids=allowed))
    for row in _rows(400):
        sparse = _sparse(row, 32, allowed or ())
        assert greedy.sample(sparse) == greedy.sample(row)
    assert greedy.sample(_sparse(np.full(400, -np.inf, np.float32), 32, allowed or ())) == 0


@pytest.mark.parametrize(
    "allowed",
    [(9, 3, 300, 3, 17, 250), (5,), (0, 1, 2, 3), tuple(range(0, 400, 7))],
    ids=["six", "one", "nan", "57"],
)
@pytest.mark.parametrize(
    "case", [(1.0, 0, 1.0), (0.7, 2, 1.0), (1.3, 0, 0.6), (0.9, 30, 0.8), (1.0, 400, 0.9)]
)
def test_a_draw_among_allowed_ids_reads_only_their_values(allowed, case) -> None:
    """At temperature > 0 with allowed ids the host draws from their values alone (a sparse row):
    the full row's token for every u, top-k wider than the set or the vocabulary included."""
    temperature, top_k, top_p = case
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, allowed_token_ids=allowed)
    rows = _rows(400)
    for r, row in enumerate(rows):
        sparse = _sparse(row, 32, tuple(sorted(set(allowed))))
        for u in (0.0, 0.3, 0.77, 1.0 - 2.0**-53):
            full_sampler, sparse_sampler = Sampler(params), Sampler(params)
            full_sampler.uniform = sparse_sampler.uniform = FixedUniform(u)  # type: ignore[assignment]
            assert sparse_sampler.sample(sparse) == full_sampler.sample(row), f"row {r}, u {u}"


def test_a_sparse_row_refuses_what_it_was_not_given() -> None:
    row = _rows(400)[0]
    sparse = _sparse(row, 32, (7,))
    params = LogprobParams(top_n=3, named_ids=(7,))
    assert build_row(sparse, 3, params) == build_row(row, 3, params)
    with pytest.raises(NotFetched):
        build_row(sparse, 3, LogprobParams(top_n=3, named_ids=(8,)))
    with pytest.raises(NotFetched):
        sparse.best(33)
    with pytest.raises(NotFetched):
        build_row(sparse, 3, LogprobParams(top_n=3, prompt_top_n=3), prompt=True)  # a rank
    with pytest.raises(NotFetched):  # a draw at temperature > 0 the device did not make
        Sampler(SamplingParams(temperature=1.0, seed=1)).sample(sparse)


GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


@pytest.mark.parametrize(
    "request_,prompt_token,samples",
    [
        (Request((1,), replace(GREEDY, temperature=0.7)), None, True),  # no generator given
        (Request((1,), replace(GREEDY, logit_bias=((5, 1.0),))), None, True),
        (Request((1,), replace(GREEDY, presence_penalty=0.5)), None, True),
        (Request((1,), replace(GREEDY, frequency_penalty=0.5)), None, True),
        (Request((1,), replace(GREEDY, min_tokens=2, ignore_eos=False)), None, True),  # eos blocked
        (Request((1,), replace(GREEDY, min_tokens=2, stop_token_ids=(4,))), None, True),
        (Request((1,), GREEDY, LogprobParams(top_n=65)), None, True),
        (Request((1,), GREEDY, LogprobParams(named_ids=tuple(range(1025)))), None, True),
        (Request((1,), GREEDY, LogprobParams(prompt_logprobs=True, prompt_top_n=0)), 3, False),
    ],
    ids=[
        "temperature",
        "bias",
        "presence",
        "frequency",
        "min_tokens-eos",
        "min_tokens-stop",
        "top_n>K",
        "ids>cap",
        "rank",
    ],
)
def test_the_rule_reads_full_rows_where_a_reader_needs_them(request_, prompt_token, samples) -> None:
    assert (
        read_for(request_, prompt_token=prompt_token, samples=samples, num_generated=0, eog_ids=(2,)) is None
    )


def test_the_rule_reads_greedy_and_scoring_rows_sparsely() -> None:
    lp = LogprobParams(top_n=20, named_ids=(9, 4), renormalize_over=(4, 5), prompt_logprobs=True)
    req = Request((1, 2, 3), replace(GREEDY, min_tokens=1, allowed_token_ids=(8, 4)), lp)
    assert read_for(req, prompt_token=3, samples=True, num_generated=1, eog_ids=(2,)) == RowRead(
        20, (3, 4, 5, 8, 9)
    )
    scoring = Request((1, 2, 3), replace(GREEDY, temperature=1.0, max_tokens=0), lp)
    assert read_for(scoring, prompt_token=3, samples=False, num_generated=0, eog_ids=(2,)) == RowRead(
        20, (3, 4, 5, 9)
    )


# -- a whole engine on the device against the CPU engine ----------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_arch_model(
        tmp_path_factory.mktemp("rows") / "f32.gguf", ARCH_SPECS[0], seed=4, types=(QT.F32,)
    )


def _mix() -> list[Request]:
    """One batch of rows read sparsely and rows read in full."""
    prompt = (12, 500, 33, 71, 9, 250, 17)
    return [
        Request(prompt, replace(GREEDY, max_tokens=3), LogprobParams(top_n=5, named_ids=(3, 999))),
        Request(prompt[:5], GREEDY, LogprobParams(top_n=2, renormalize_over=(40, 41, 42))),
        Request(prompt, replace(GREEDY, max_tokens=0), LogprobParams(prompt_logprobs=True, top_n=3)),
        Request(
            prompt[2:], replace(GREEDY, max_tokens=2), LogprobParams(prompt_logprobs=True, prompt_top_n=4)
        ),
        Request(prompt, replace(GREEDY, temperature=1.0, seed=11), LogprobParams(top_n=4)),  # drawn there
        Request(prompt[1:], replace(GREEDY, logit_bias=((7, 30.0),)), LogprobParams(top_n=1)),  # full rows
        Request(prompt, replace(GREEDY, allowed_token_ids=(600, 5, 77)), LogprobParams(top_within=(5, 6))),
    ]


def test_the_engine_on_the_device_gives_the_cpu_engines_events(model) -> None:
    cpu = engine_on(model, "cpu").generate_batch(_mix())
    gpu_engine = engine_on(model, "cuda")
    assert gpu_engine.runner.sparse
    reads: list[bool] = []
    read_rows = gpu_engine.ops.read_rows

    def counted(logits, wants):  # type: ignore[no-untyped-def]
        reads.extend(w is not None for w in wants)
        return read_rows(logits, wants)

    gpu_engine.runner._read_rows = counted
    gpu = gpu_engine.generate_batch(_mix())
    assert any(reads) and not all(reads), "the batch mixed sparse and full rows"
    for i, (a, b) in enumerate(zip(cpu, gpu, strict=True)):
        assert a == b, f"request {i}: the device's events differ from the CPU engine's"


def test_greedy_rows_copy_back_a_fraction_of_a_full_row(model) -> None:
    """Counted on the backend (bytes copied back), not timed: two top-20 greedy rows."""
    request = Request((12, 500, 33), replace(GREEDY, max_tokens=2), LogprobParams(top_n=20))
    engine = engine_on(model, "cuda")
    copied, events = {}, {}
    for sparse in (False, True):
        engine.runner.sparse = sparse
        before = engine.ops.bytes_read
        events[sparse] = engine.generate(request)
        copied[sparse] = engine.ops.bytes_read - before
    assert events[True] == events[False], "the same events either way"
    assert copied[False] == 2 * 1000 * 4, "two full rows of a 1000-token vocabulary"
    assert copied[True] <= copied[False] // 10, f"{copied[True]} bytes copied back for two top-20 rows"
