"""Structured output: a grammar per request, one llguidance matcher per sequence.

A request's constraint (a JSON schema, any JSON object, a regex, a list of choices, a Lark
or GBNF grammar) becomes a `StructuredSpec`: llguidance's grammar text, checked when it is
built, so a bad schema is refused before anything runs. Each sequence then gets a `Guide`,
its own matcher state; before every draw the guide says which ids may come next, and after
it the drawn id advances the guide. The mask only narrows the draw: the log-probabilities
a response reports are the model's raw full-vocabulary row, computed before any mask.

llguidance sees the vocabulary through `vocabulary()`: every id's bytes exactly as
`Tokenizer.token_bytes` gives them (byte-level BPE and SentencePiece alike), control and
unknown tokens marked special (a grammar's text never matches them), and the model's
end-of-generation ids as its EOS set, allowed exactly when the grammar accepts.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import llguidance
import numpy as np
import numpy.typing as npt

from strata_engine.api import EngineError, ErrorCode, RequestError, StructuredSpec
from strata_engine.text.tokenizer import Tokenizer

Mask = npt.NDArray[np.bool_]


# JSON whitespace between tokens: any run of up to 32 characters. Unbounded runs let a small
# model emit whitespace until max_tokens (OpenAI warns of exactly that for JSON mode); 32
# still fits pretty-printed JSON indented eight levels deep.
BOUNDED_WHITESPACE = r"[\x20\x0A\x0D\x09]{0,32}"


class GrammarError(ValueError):
    """A constraint llguidance cannot compile (bad schema, regex or grammar); the message says why."""


def _checked(kind: str, build: Callable[[], str]) -> StructuredSpec:
    """Build llguidance's grammar text and validate it without a vocabulary (cheap: no tokens)."""
    try:
        grammar = build()
    except Exception as exc:  # the builders raise ValueError and others on malformed input
        raise GrammarError(str(exc) or type(exc).__name__) from None
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise GrammarError(first_line(error))
    return StructuredSpec(kind, grammar)


def json_schema_spec(
    schema: dict[str, Any] | bool,
    *,
    any_whitespace: bool = True,
    whitespace_pattern: str | None = None,
    kind: str = "json_schema",
) -> StructuredSpec:
    """Output that is one JSON value valid under `schema`.

    Between JSON tokens: `BOUNDED_WHITESPACE` by default, none with `any_whitespace` False
    (vLLM's `disable_any_whitespace`), or what `whitespace_pattern` (a regex) matches.
    """
    if not isinstance(schema, dict | bool):
        raise GrammarError("a JSON schema must be an object or a boolean")
    if schema is False:
        raise GrammarError("the schema `false` allows no value")
    if schema is True:
        schema = {}  # any JSON value
    options: dict[str, Any] = {"whitespace_flexible": any_whitespace}
    if any_whitespace or whitespace_pattern is not None:
        options["whitespace_pattern"] = whitespace_pattern or BOUNDED_WHITESPACE
    return _checked(
        kind,
        lambda: llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=options),  # type: ignore[arg-type]
    )


def json_object_spec(*, any_whitespace: bool = True, whitespace_pattern: str | None = None) -> StructuredSpec:
    """Any JSON object (OpenAI's `{"type": "json_object"}`)."""
    return json_schema_spec(
        {"type": "object"},
        any_whitespace=any_whitespace,
        whitespace_pattern=whitespace_pattern,
        kind="json_object",
    )


def regex_spec(regex: str) -> StructuredSpec:
    """Output that matches `regex` in full (Rust `regex` syntax)."""
    return _checked("regex", lambda: llguidance.LLMatcher.grammar_from_regex(regex))


def choice_spec(choices: Sequence[str]) -> StructuredSpec:
    """Output that is exactly one of `choices`."""
    if not choices:
        raise GrammarError("the list of choices is empty")
    return _checked("choice", lambda: llguidance.grammar_from("choice", json.dumps(list(choices))))


def grammar_spec(text: str) -> StructuredSpec:
    """Output in the language of a Lark or GBNF (llama.cpp) grammar."""
    return _checked("grammar", lambda: llguidance.grammar_from("grammar", text))


def _bits(bitmask: bytes, size: int) -> Mask:
    """llguidance's bitmask (bit i of 32-bit word i // 32, little-endian) as one bool per id."""
    bits = np.unpackbits(np.frombuffer(bitmask, dtype=np.uint8), bitorder="little")
    return bits[:size].astype(np.bool_)


class _VocabularySource:
    """Our tokenizer as llguidance's `TokenizerWrapper` expects it: ids <-> bytes, specials, EOS."""

    def __init__(self, tokenizer: Tokenizer, n_vocab: int) -> None:
        self._tokenizer = tokenizer
        size = min(tokenizer.vocab_size, n_vocab)
        self.eos_token_id = tokenizer.eos_id
        self.bos_token_id = tokenizer.bos_id
        # the model's rows may outnumber the tokenizer's entries: padding ids spell nothing
        self.tokens = [tokenizer.token_bytes(i) for i in range(size)] + [b""] * (n_vocab - size)
        self.special_token_ids = [i for i in range(size) if tokenizer.is_special(i)]
        self.eos_ids = sorted(i for i in tokenizer.eog_ids if i < n_vocab)

    def __call__(self, text: str | bytes) -> list[int]:
        """Text -> ids spelling exactly it (no BOS, no SentencePiece space prefix, specials as
        text): llguidance tokenizes forced text with it. Refusing bytes makes it send str."""
        if isinstance(text, bytes):
            raise TypeError("this tokenizer takes str")
        return self._tokenizer.encode_exact(text)


# llguidance's slicer (its default "general" slices) keeps extra token tries, about 250 bytes
# an id: 65 MiB for Gemma 3's 262k ids, a quarter of that model's weights. It only speeds up the
# first mask of a lexer state (3 ms against 0.1 ms at 262k ids; masks are cached per state, and
# equal either way), so vocabularies above this size go without it.
SLICED_VOCAB_MAX = 131_072


def vocabulary(tokenizer: Tokenizer, n_vocab: int) -> llguidance.LLTokenizer:
    """The model's vocabulary for llguidance (~0.1 s for 49k ids: build once per model).

    `n_vocab` is the model's row size; ids past the tokenizer's entries are never allowed.
    """
    source = _VocabularySource(tokenizer, n_vocab)
    wrapper = llguidance.TokenizerWrapper(source)
    built = llguidance.LLTokenizer(
        wrapper, n_vocab=n_vocab, eos_token=source.eos_ids, slices=None if n_vocab <= SLICED_VOCAB_MAX else []
    )
    # llguidance copied the token bytes into its own trie; the wrapper stays only to tokenize
    # (its __call__), so its list of every token's bytes (12 MiB at 262k ids) need not
    wrapper.tokens = source.tokens = []
    return built


class Guide:
    """One sequence's matcher: which ids may come next, advanced by each drawn id."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int) -> None:
        self._matcher = matcher
        self._size = vocab_size

    def mask(self) -> Mask:
        """True for every id the grammar allows next (EOS ids exactly when it accepts)."""
        bitmask = self._matcher.compute_bitmask()
        self._raise_on_error()
        allowed = _bits(bitmask, self._size)
        if not allowed.any():
            raise EngineError("structured output: the grammar allows no token here")
        return allowed

    def advance(self, token_id: int) -> None:
        """Feed the drawn id (it was allowed, so this only fails on a matcher bug)."""
        self._matcher.consume_token(token_id)
        self._raise_on_error()

    @property
    def finished(self) -> bool:
        """The grammar is complete and allows nothing more (not even optional text)."""
        return self._matcher.is_stopped()

    @property
    def accepting(self) -> bool:
        """The output so far is a complete sentence of the grammar (more may still follow)."""
        return self._matcher.is_accepting()

    def _raise_on_error(self) -> None:
        """A matcher error is the grammar's (llguidance's size and complexity limits): the
        request's fault, reported by its first line only (the rest repeats the grammar)."""
        if self._matcher.is_error():
            raise RequestError(
                f"structured output: {first_line(self._matcher.get_error())}",
                "sampling.structured",
                ErrorCode.INVALID_STRUCTURED_OUTPUT,
            )


class Guides:
    """Makes each sequence's `Guide` over one model's vocabulary, built by `load()` or on first use.

    A grammar is validated once and compiled once however many sequences use it (`n` > 1):
    the last few are remembered, and each sequence gets a copy of the compiled matcher.
    Thread-safe: requests are checked on the caller's thread and run on the engine's.
    """

    REMEMBERED = 16

    def __init__(self, tokenizer: Tokenizer, n_vocab: int) -> None:
        self._tokenizer = tokenizer
        self._n_vocab = n_vocab
        self._vocab: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()
        self._checked: OrderedDict[str, str] = OrderedDict()  # grammar -> error ("" when valid)
        self._compiled: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()

    def load(self) -> None:
        """Build llguidance's vocabulary now. It holds the GIL for 0.3 s to over a second, so
        the engine calls this while it loads: no request (and no `/health` poll) waits on it."""
        _ = self.vocab

    @property
    def loaded(self) -> bool:
        """Whether the vocabulary is built (so no request will build it)."""
        return self._vocab is not None

    @property
    def vocab(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._vocab is None:
                self._vocab = vocabulary(self._tokenizer, self._n_vocab)
            return self._vocab

    def check(self, spec: StructuredSpec) -> None:
        """Refuse a grammar that does not compile against this vocabulary (before it runs)."""
        error = _remembered(self._checked, spec.grammar, self._lock)
        if error is None:
            error = (llguidance.LLMatcher.validate_grammar(spec.grammar, self.vocab) or "").strip()
            _remember(self._checked, spec.grammar, error, self._lock, self.REMEMBERED)
        if error:
            raise RequestError(
                f"Invalid structured output constraint ({spec.kind}): {first_line(error)}",
                "sampling.structured",
                ErrorCode.INVALID_STRUCTURED_OUTPUT,
            )

    def new(self, spec: StructuredSpec) -> Guide:
        template = _remembered(self._compiled, spec.grammar, self._lock)
        if template is None:
            template = llguidance.LLMatcher(self.vocab, spec.grammar, log_level=0)  # never raises
            _remember(self._compiled, spec.grammar, template, self._lock, self.REMEMBERED)
        return Guide(template.deep_copy(), self.vocab.vocab_size)


T = TypeVar("T")


def _remembered(cache: OrderedDict[str, T], key: str, lock: threading.Lock) -> T | None:
    with lock:
        value = cache.get(key)
        if value is not None:
            cache.move_to_end(key)
        return value


def _remember(cache: OrderedDict[str, T], key: str, value: T, lock: threading.Lock, most: int) -> None:
    with lock:
        cache[key] = value
        while len(cache) > most:
            cache.popitem(last=False)


def first_line(message: str, most: int = 1000) -> str:
    """llguidance's message without the parser state and grammar it may append (a grammar may
    be the whole request, which must never reach a reply or a log line), at most `most` characters."""
    text = message.strip()
    for marker in ("<state>", "<grammar>"):
        text = text.split(marker, 1)[0].rstrip()
    return text if len(text) <= most else text[:most] + "..."
