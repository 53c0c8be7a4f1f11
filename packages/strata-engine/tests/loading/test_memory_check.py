"""The memory a model may take (memory.py): each source read as the kernel writes it, the
lowest one wins, and a model is refused only past it (the refusal over a real server:
tests/integration/server/test_memory_faults.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata_engine.api import ModelLoadError
from strata_engine.memory import available_memory, cgroup_available, check_fits, parse_size


def test_cgroup_v2_limit_less_usage_not_counting_inactive_file_pages(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("1073741824\n")
    (tmp_path / "memory.current").write_text("536870912\n")
    (tmp_path / "memory.stat").write_text("anon 100\ninactive_file 134217728\nactive_file 5\n")
    assert cgroup_available(tmp_path) == 2**30 - (2**29 - 2**27)


def test_cgroup_v1_and_no_limit(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("max\n")  # v2 without a limit: v1's files are read next
    (tmp_path / "memory.current").write_text("5\n")
    assert cgroup_available(tmp_path) is None
    v1 = tmp_path / "memory"
    v1.mkdir()
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    (v1 / "memory.usage_in_bytes").write_text("6928658432\n")
    assert cgroup_available(tmp_path) is None
    (v1 / "memory.limit_in_bytes").write_text("8589934592\n")
    (v1 / "memory.stat").write_text("cache 1\ntotal_inactive_file 928658432\n")
    assert cgroup_available(tmp_path) == 2**33 - 6_000_000_000
    (v1 / "memory.limit_in_bytes").write_text("4294967296\n")  # over the limit: nothing left
    assert cgroup_available(tmp_path) == 0


def test_the_lowest_source_wins_and_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = (("MemAvailable", lambda: 8 * 2**30), ("the cgroup's limit less its usage", lambda: None))
    monkeypatch.delenv("STRATA_MEMORY_LIMIT", raising=False)
    assert available_memory(sources) is not None and available_memory(sources).source == "MemAvailable"
    monkeypatch.setenv("STRATA_MEMORY_LIMIT", "1.5G")
    low = available_memory(sources)
    assert low is not None and (low.bytes, low.source) == (3 * 2**29, "STRATA_MEMORY_LIMIT")
    assert [parse_size(t) for t in ("512M", "512MiB", "2g", "1000", "1 KB")] == [
        2**29,
        2**29,
        2**31,
        1000,
        1024,
    ]
    monkeypatch.setenv("STRATA_MEMORY_LIMIT", "lots")
    with pytest.raises(ModelLoadError, match="STRATA_MEMORY_LIMIT='lots' is not a size"):
        available_memory(sources)


def test_a_model_is_refused_only_past_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_MEMORY_LIMIT", "100M")
    check_fits("m.gguf", 60 * 2**20, 40 * 2**20, 512)  # exactly the limit: fits
    with pytest.raises(ModelLoadError) as refused:
        check_fits("m.gguf", 60 * 2**20, 40 * 2**20 + 1, 512)
    assert "60.0 MiB" in str(refused.value) and "100.0 MiB is available" in str(refused.value)
