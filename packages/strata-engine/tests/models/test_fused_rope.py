"""fused_rope.qkv_rope: which layers a backend's one q/k/v + RoPE + cache-write op may take.

It asks the backend (`qkv_rope`) only for a layer whose steps are the projections, RoPE and the
cache write and nothing else: no q/k/v biases, no q/k norms (qwen3), no query temperature
(mistral3), fused projections present; the backend's None (its launch does not apply) passes
through, and the model then runs its own steps."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from strata_engine import fused_rope


class _Ops:
    def __init__(self, answer: Any) -> None:
        self.calls: list[tuple] = []
        self.answer = answer

    def qkv_rope(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.answer


def _case(ops: Any, **changes: Any) -> Any:
    projection = SimpleNamespace(weight="w", bias=changes.pop("bias", None), widths=(256, 128, 128))
    layer = SimpleNamespace(qkv=changes.pop("qkv", (projection,)), q_norm=None, k_norm=None)
    for name in ("q_norm", "k_norm"):
        if name in changes:
            setattr(layer, name, changes.pop(name))
    cfg = SimpleNamespace(n_heads=4, n_kv_heads=2, head_dim=64)
    model = SimpleNamespace(ops=ops, cfg=cfg, q_temp=changes.pop("q_temp", None))
    meta = SimpleNamespace(positions="pos", slots="slots")
    return fused_rope.qkv_rope(model, "h", layer, meta, "table", "kc", "vc")  # type: ignore[arg-type]


def test_a_plain_layer_asks_the_backend() -> None:
    ops = _Ops("q")
    assert _case(ops) == "q"
    assert ops.calls == [("h", [("w", (256, 128, 128))], (4, 2, 64), "pos", "table", "kc", "vc", "slots")]
    ops = _Ops(None)  # the backend's launch does not apply: the model's steps
    assert _case(ops) is None and len(ops.calls) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"bias": np.zeros(512, np.float32)},
        {"q_norm": np.ones(64, np.float32)},
        {"k_norm": np.ones(64, np.float32)},
        {"q_temp": (1.0, 2.0)},
        {"qkv": None},
    ],
    ids=["bias", "q-norm", "k-norm", "query-temperature", "unfused"],
)
def test_other_layers_never_ask(change: dict) -> None:
    ops = _Ops("q")
    assert _case(ops, **change) is None and not ops.calls


def test_a_backend_without_the_op_runs_the_model_steps() -> None:
    assert _case(SimpleNamespace()) is None
