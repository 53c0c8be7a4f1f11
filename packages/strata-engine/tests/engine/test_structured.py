"""The structured-output adaptor (`strata_engine.structured`) on tiny vocabularies.

The masks are checked against an independent reference: for a finite language (a list of
choices) the ids allowed after a prefix are exactly those whose bytes keep the prefix a
prefix of some choice, and the EOS ids exactly when the prefix is a whole choice. That is
computed here from the token bytes alone, for a byte-level BPE and a SentencePiece
vocabulary, along random walks through the language.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from strata_engine.api import LogprobParams, Request, RequestError, SamplingParams, Step, StructuredSpec
from strata_engine.engine import LLMEngine
from strata_engine.sampler import Sampler
from strata_engine.structured import (
    GrammarError,
    Guide,
    Guides,
    choice_spec,
    grammar_spec,
    json_object_spec,
    json_schema_spec,
    regex_spec,
    vocabulary,
)
from strata_engine.testing.spm_vocab import load_golden, tokenizer_metadata
from strata_engine.testing.tiny_models import TINY_SPECS, tiny_vocabulary, write_tiny_model
from strata_engine.text.load import load_tokenizer
from strata_engine.text.tokenizer import Tokenizer


def bpe_tokenizer() -> Tokenizer:
    tokens, merges, types = tiny_vocabulary()
    n = len(tokens)
    return Tokenizer(tokens, merges, types, "smollm", bos_id=n - 3, eos_id=n - 1)


def spm_tokenizer() -> Tokenizer:
    return load_tokenizer(tokenizer_metadata(load_golden()["vocab"]))


TOKENIZERS = {"bpe": bpe_tokenizer, "spm": spm_tokenizer}


@pytest.fixture(scope="module", params=list(TOKENIZERS))
def tokenizer(request) -> Tokenizer:
    return TOKENIZERS[request.param]()


def test_vocabulary_maps_every_id_to_our_bytes(tokenizer: Tokenizer) -> None:
    vocab = vocabulary(tokenizer, tokenizer.vocab_size)
    assert vocab.vocab_size == tokenizer.vocab_size
    assert sorted(vocab.eos_tokens) == sorted(tokenizer.eog_ids)
    for i in range(tokenizer.vocab_size):
        piece = tokenizer.token_bytes(i)
        if piece.startswith(b"\xff"):  # llguidance's special-token marker; never valid UTF-8 text
            assert vocab.is_special_token(i), i
            continue
        assert vocab.decode_bytes([i]) == piece, i
        assert vocab.is_special_token(i) == tokenizer.is_special(i), i


@pytest.mark.parametrize("text", ["the cat", " a dog", "  in 1999\n", '{"a": [1]}', "<|im_end|> x", "é ok"])
def test_encode_exact_spells_exactly_the_text(tokenizer: Tokenizer, text: str) -> None:
    """What llguidance tokenizes forced text with: no BOS, no SentencePiece space prefix."""
    assert b"".join(tokenizer.token_bytes(i) for i in tokenizer.encode_exact(text)) == text.encode()


def reference_mask(tokenizer: Tokenizer, n_vocab: int, prefix: bytes, choices: list[bytes]) -> np.ndarray:
    """Ids allowed after `prefix` in the language `choices`, from the token bytes alone."""
    allowed = np.zeros(n_vocab, dtype=bool)
    for i in range(tokenizer.vocab_size):
        piece = tokenizer.token_bytes(i)
        if piece and not tokenizer.is_special(i):
            allowed[i] = any(c.startswith(prefix + piece) for c in choices)
    if prefix in choices:
        allowed[sorted(tokenizer.eog_ids)] = True
    return allowed


CHOICES = ["the cat", "the cart", "a dog", "and", "an end", "in 1999", "is it?"]


def forced(prefix: bytes, choices: list[bytes]) -> bool:
    """Whether the language allows exactly one next byte after `prefix` (and no end)."""
    return prefix not in choices and len({c[len(prefix)] for c in choices if c.startswith(prefix)}) == 1


def test_choice_masks_equal_the_reference_along_random_walks(tokenizer: Tokenizer) -> None:
    """Where the language branches the mask is exactly the reference; where it forces its next
    bytes llguidance keeps only the canonical tokenization's ids, a non-empty subset of it."""
    padded = tokenizer.vocab_size + 5  # the model's rows may outnumber the vocabulary
    guides = Guides(tokenizer, padded)
    spec = choice_spec(CHOICES)
    choices = [c.encode() for c in CHOICES]
    rng = random.Random(0)
    branching = 0
    for _ in range(12):
        guide, prefix = guides.new(spec), b""
        while True:
            mask = guide.mask()
            reference = reference_mask(tokenizer, padded, prefix, choices)
            assert not mask[tokenizer.vocab_size :].any()  # padding ids spell nothing
            if forced(prefix, choices):
                assert mask.any() and not (mask & ~reference).any()
            else:
                np.testing.assert_array_equal(mask, reference)
                branching += 1
            token = rng.choice(np.flatnonzero(mask).tolist())
            guide.advance(token)
            if token in tokenizer.eog_ids:
                break
            prefix += tokenizer.token_bytes(token)
            if guide.finished:  # nothing can follow: a whole choice, and no longer one starts with it
                assert prefix in choices
                assert not any(c != prefix and c.startswith(prefix) for c in choices)
                break
        assert prefix in choices
    assert branching >= 12


def greedy_walk(tokenizer: Tokenizer, spec: StructuredSpec, scores: np.ndarray, limit: int = 200) -> str:
    """Greedy generation under `spec` with fixed per-id scores; the text until the guide ends."""
    guide = Guides(tokenizer, tokenizer.vocab_size).new(spec)
    out = b""
    for _ in range(limit):
        token = int(np.argmax(np.where(guide.mask(), scores, -np.inf)))
        guide.advance(token)
        if token in tokenizer.eog_ids:
            break
        out += tokenizer.token_bytes(token)
        if guide.finished:
            break
    return out.decode()


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]{1,6}$"},
        "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 1, "maxItems": 3},
        "n": {"type": "integer", "minimum": 3, "maximum": 7},
    },
    "required": ["name", "tags", "n"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("seed", range(4))
def test_any_scores_give_output_in_the_language(tokenizer: Tokenizer, seed: int) -> None:
    """Whatever the model prefers, the guided output parses: a regex and a JSON schema."""
    scores = np.random.default_rng(seed).normal(size=tokenizer.vocab_size)
    text = greedy_walk(tokenizer, regex_spec(r"(ab|c)[0-9]{2,4}!"), scores)
    assert re.fullmatch(r"(ab|c)[0-9]{2,4}!", text), text
    value = json.loads(greedy_walk(tokenizer, json_schema_spec(SCHEMA, any_whitespace=False), scores))
    assert set(value) == {"name", "tags", "n"}
    assert re.fullmatch("[a-z]{1,6}", value["name"]) and 3 <= value["n"] <= 7
    assert 1 <= len(value["tags"]) <= 3 and set(value["tags"]) <= {"x", "y"}


def test_grammar(tokenizer: Tokenizer) -> None:
    scores = np.random.default_rng(5).normal(size=tokenizer.vocab_size)
    assert greedy_walk(tokenizer, grammar_spec('root ::= "yes" | "no"'), scores) in {"yes", "no"}  # GBNF
    assert greedy_walk(tokenizer, grammar_spec('start: "on" | "off"'), scores) in {"on", "off"}  # Lark


def feed(tokenizer: Tokenizer, spec: StructuredSpec, text: str) -> Guide | None:
    """The guide after `text`'s tokens, or None when one of them is not allowed."""
    guide = Guides(tokenizer, tokenizer.vocab_size).new(spec)
    for token in tokenizer.encode_exact(text):
        if not guide.mask()[token]:
            return None
        guide.advance(token)
    return guide


def test_json_object_takes_objects_only_and_bounds_whitespace(tokenizer: Tokenizer) -> None:
    spec = json_object_spec()
    done = feed(tokenizer, spec, '{"a": [1, 2.5, {"b": null}], "c": "d"}')
    assert done is not None and done.accepting
    assert feed(tokenizer, spec, '{\n  "a": 1\n}') is not None  # pretty-printed
    assert feed(tokenizer, spec, "[1]") is None
    assert feed(tokenizer, spec, '{"a" 1}') is None
    assert feed(tokenizer, spec, "{" + " " * 32 + "}") is not None
    assert feed(tokenizer, spec, "{" + " " * 33 + "}") is None  # no runaway whitespace
    assert feed(tokenizer, json_object_spec(any_whitespace=False), '{"a": 1}') is None
    assert feed(tokenizer, json_object_spec(any_whitespace=False), '{"a":1}') is not None


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (lambda: json_schema_spec({"type": "strin"}), "strin"),
        (lambda: json_schema_spec({"type": "string", "pattern": "(("}), "unclosed group"),
        (lambda: json_schema_spec({"$ref": "#/nowhere"}), "nowhere"),
        (lambda: json_schema_spec({"not": {"type": "string"}}), "not"),
        (lambda: json_schema_spec([1, 2]), "object or a boolean"),  # type: ignore[arg-type]
        (lambda: json_schema_spec(False), "allows no value"),
        (lambda: regex_spec("a(b"), "unclosed group"),
        (lambda: grammar_spec("root ::= undefined_rule"), "undefined_rule"),
        (lambda: choice_spec([]), "empty"),
    ],
)
def test_bad_constraints_are_refused_naming_the_problem(build, needle: str) -> None:
    with pytest.raises(GrammarError) as err:
        build()
    assert needle in str(err.value)


def test_schema_true_is_any_json_value() -> None:
    tokenizer = bpe_tokenizer()
    for text in ('"x"', "[1, 2]", "null", '{"a": true}'):
        guide = feed(tokenizer, json_schema_spec(True), text)
        assert guide is not None and guide.accepting, text


def test_sampler_masks_only_the_draw() -> None:
    tokenizer = bpe_tokenizer()
    guide = Guides(tokenizer, tokenizer.vocab_size).new(choice_spec(["a dog"]))
    logits = torch.randn(tokenizer.vocab_size, generator=torch.Generator().manual_seed(1))
    lp = torch.log_softmax(logits, 0).numpy()
    raw = lp.copy()
    allowed = guide.mask()
    best = int(np.argmax(np.where(allowed, lp.astype(np.float64), -np.inf)))
    assert Sampler(SamplingParams(temperature=0.0), guide).sample(lp) == best
    assert np.array_equal(lp.view(np.uint32), raw.view(np.uint32))  # the reported row is untouched
    seeded = [Sampler(SamplingParams(temperature=1.0, seed=s), guide).sample(lp) for s in range(20)]
    assert all(allowed[t] for t in seeded)


def test_a_broken_grammar_fails_when_used_not_when_built() -> None:
    tokenizer = bpe_tokenizer()
    guide = Guides(tokenizer, tokenizer.vocab_size).new(StructuredSpec("grammar", "not a grammar"))
    with pytest.raises(Exception, match="structured output"):
        guide.mask()
    with pytest.raises(RequestError) as err:
        Guides(tokenizer, tokenizer.vocab_size).check(StructuredSpec("grammar", "not a grammar"))
    assert err.value.param == "sampling.structured"


# -- the engine on a tiny model -----------------------------------------------------


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory) -> LLMEngine:
    path = write_tiny_model(Path(tmp_path_factory.mktemp("tiny")) / "model.gguf", TINY_SPECS[0], seed=3)
    return LLMEngine(path, num_threads=2, kv_cache_mb=16, parallel=4)


PATTERN = r"(the|a) [0-9]{2,5}"


def structured_request(prompt: tuple[int, ...], seed: int, max_tokens: int = 24) -> Request:
    return Request(
        prompt,
        SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed, structured=regex_spec(PATTERN)),
        LogprobParams(top_n=3),
    )


def steps(events) -> list[Step]:
    return [e for e in events if isinstance(e, Step)]


def test_engine_follows_the_grammar_and_reports_raw_rows(tiny_engine: LLMEngine) -> None:
    prompt = tuple(tiny_engine.tokenizer.encode("the cat is", add_special=False))
    guided = steps(tiny_engine.generate(structured_request(prompt, seed=1)))
    text = "".join(s.text for s in guided)
    assert re.fullmatch(PATTERN, text), text
    assert guided[-1].finish_reason == "stop"
    free = steps(tiny_engine.generate(Request(prompt, SamplingParams(max_tokens=1), LogprobParams(top_n=3))))
    # the first row is the model's own distribution: the mask never touched it
    assert guided[0].logprobs is not None and free[0].logprobs is not None
    assert guided[0].logprobs.top == free[0].logprobs.top
    first = guided[0].token_id
    assert guided[0].logprobs.logprob == free[0].logprobs.named.get(first, guided[0].logprobs.logprob)


def test_each_sequence_has_its_own_matcher_in_a_batch(tiny_engine: LLMEngine) -> None:
    prompt = tuple(tiny_engine.tokenizer.encode("a dog", add_special=False))
    alone = [steps(tiny_engine.generate(structured_request(prompt, seed=s))) for s in range(4)]
    batch = [steps(e) for e in tiny_engine.generate_batch([structured_request(prompt, s) for s in range(4)])]
    for one, many in zip(alone, batch, strict=True):
        assert [s.token_id for s in one] == [s.token_id for s in many]
        assert [s.logprobs for s in one] == [s.logprobs for s in many]
        assert re.fullmatch(PATTERN, "".join(s.text for s in many))


def test_max_tokens_cuts_the_output_short_with_length(tiny_engine: LLMEngine) -> None:
    prompt = tuple(tiny_engine.tokenizer.encode("x", add_special=False))
    request = Request(prompt, SamplingParams(max_tokens=2, structured=json_schema_spec(SCHEMA)))
    out = steps(tiny_engine.generate(request))
    assert len(out) == 2 and out[-1].finish_reason == "length"


def test_engine_refuses_structured_with_allowed_ids(tiny_engine: LLMEngine) -> None:
    sampling = SamplingParams(structured=regex_spec("a"), allowed_token_ids=(1, 2))
    with pytest.raises(RequestError) as err:
        tiny_engine.check(Request((1,), sampling))
    assert err.value.param == "sampling.allowed_token_ids"


def test_the_vocabulary_is_built_at_load_not_by_the_first_structured_request(tmp_path, monkeypatch) -> None:
    """llguidance's vocabulary holds the GIL for up to seconds: building it on the first
    structured request stalls every other route, so the engine builds it while it loads."""
    path = write_tiny_model(tmp_path / "model.gguf", TINY_SPECS[0], seed=3)
    engine = LLMEngine(path, num_threads=2, kv_cache_mb=16, parallel=1)
    assert engine.guides.loaded

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a request built llguidance's vocabulary")

    monkeypatch.setattr("strata_engine.structured.vocabulary", refuse)
    prompt = tuple(engine.tokenizer.encode("the cat is", add_special=False))
    text = "".join(s.text for s in steps(engine.generate(structured_request(prompt, seed=1))))
    assert re.fullmatch(PATTERN, text), text
