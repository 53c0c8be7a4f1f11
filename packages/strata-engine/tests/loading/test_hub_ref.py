"""What `--model` reads as a Hub reference, and which file a quant selects (no network here;
tests/integration/server/test_hub_models.py downloads through huggingface_hub from a stand-in Hub)."""

from __future__ import annotations

import pytest

from strata_engine.api import ModelLoadError
from strata_engine.hub import HubRef, parse_hub_ref, pick_file


@pytest.mark.parametrize(
    ("spec", "ref"),
    [
        ("owner/repo:Q4_K_M", HubRef("owner/repo", quant="Q4_K_M")),
        (
            "bartowski/Qwen2.5-0.5B-Instruct-GGUF:q8_0",
            HubRef("bartowski/Qwen2.5-0.5B-Instruct-GGUF", quant="q8_0"),
        ),
        ("owner/repo/sub/model-Q4_0.gguf", HubRef("owner/repo", filename="sub/model-Q4_0.gguf")),
        ("owner/repo", HubRef("owner/repo")),
    ],
)
def test_hub_references(spec: str, ref: HubRef) -> None:
    assert parse_hub_ref(spec) == ref
    assert str(ref) == spec


@pytest.mark.parametrize(
    "spec", ["model.gguf", "models/model.gguf", "./a/b", "/abs/owner/repo:Q4_0", "~/x/y", "a/b/c", "a:b", ""]
)
def test_paths_are_not_hub_references(spec: str) -> None:
    assert parse_hub_ref(spec) is None


FILES = [
    "README.md",
    "m-Q4_K_M.gguf",
    "m-Q4_K_S.gguf",
    "m_Q4_K.gguf",
    "m.Q4_0.gguf",
    "m-Q4_0_4_4.gguf",
    "sub/m-IQ4_XS.gguf",
]


@pytest.mark.parametrize(
    ("quant", "file"),
    [
        ("Q4_K_M", "m-Q4_K_M.gguf"),
        ("q4_k_s", "m-Q4_K_S.gguf"),
        ("Q4_K", "m_Q4_K.gguf"),  # not Q4_K_M's nor Q4_K_S's file
        ("Q4_0", "m.Q4_0.gguf"),  # not Q4_0_4_4's
        ("iq4_xs", "sub/m-IQ4_XS.gguf"),
    ],
)
def test_a_quant_is_a_whole_part_of_the_file_name(quant: str, file: str) -> None:
    assert pick_file(HubRef("o/r", quant=quant), FILES) == file


def test_none_or_several_is_one_line_naming_the_files() -> None:
    with pytest.raises(ModelLoadError, match=r"^o/r has no matching 'Q5_K_M' file \(its GGUFs: m-Q4_0_4_4"):
        pick_file(HubRef("o/r", quant="Q5_K_M"), FILES)
    with pytest.raises(ModelLoadError, match=r"^o/r has 6 GGUF files \(.*\); name one as o/r/FILE.gguf$"):
        pick_file(HubRef("o/r"), FILES)
    with pytest.raises(ModelLoadError, match=r"has no file m-Q8_0\.gguf"):
        pick_file(HubRef("o/r", filename="m-Q8_0.gguf"), FILES)
    assert pick_file(HubRef("o/r"), ["README.md", "only.gguf"]) == "only.gguf"
