"""Stop strings matched incrementally: an Aho-Corasick automaton over all of a request's stops.

A generated character costs one memoised transition however many stop strings a request
lists, and tells at once the longest stop that ends there and how many trailing characters
could still begin one (the text held back). The automaton is built lazily: a state is a
prefix of some stop, created the first time the text reaches it, and a prefix test is a
binary search in the sorted stops; so a request's 2,000 stop strings of 1,000 characters
cost a sort up front, not a two-million-node trie, and its states grow only with its text.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

ROOT = 0


class StopMatcher:
    """The automaton of one request's stop strings; `step` from `ROOT`, one character at a time.

    A state stands for the longest suffix of the text read so far that is a prefix of some
    stop. `match(state)` is the length of the longest stop ending at that suffix (0: none);
    `hold(state)` the length of the longest suffix that is a proper prefix of a stop (text
    that a later character may still turn into a stop).
    """

    def __init__(self, stops: Iterable[str]) -> None:
        self._keys = sorted({s for s in stops if s})
        self._stops = frozenset(self._keys)
        self._prefix = [""]
        self._fail = [ROOT]
        self._goto: list[dict[str, int]] = [{}]
        self._match = [0]
        self._hold = [0]

    def __bool__(self) -> bool:
        return bool(self._keys)

    def match(self, state: int) -> int:
        return self._match[state]

    def hold(self, state: int) -> int:
        return self._hold[state]

    def step(self, state: int, char: str) -> int:
        """The state after `char`. Memoised per (state, char); a new pair walks the failure
        chain only down to the first state that already knows `char`, creating the states
        (and their failure links) the text now reaches, shallowest first."""
        goto, fail = self._goto, self._fail
        known = goto[state].get(char)
        if known is not None:
            return known
        chain, s = [], state
        while True:
            chain.append(s)
            if s == ROOT:
                result = ROOT
                break
            s = fail[s]
            found = goto[s].get(char)
            if found is not None:
                result = found
                break
        for s in reversed(chain):  # result is now step(fail(s), char)
            prefix = self._prefix[s] + char
            if self._starts(prefix):
                result = self._new_state(prefix, ROOT if s == ROOT else result)
            goto[s][char] = result
        return result

    def _starts(self, prefix: str) -> bool:
        """Whether some stop starts with `prefix`."""
        i = bisect_left(self._keys, prefix)
        return i < len(self._keys) and self._keys[i].startswith(prefix)

    def _extends(self, prefix: str) -> bool:
        """Whether some stop longer than `prefix` starts with it (the stops after it in order)."""
        i = bisect_right(self._keys, prefix)
        return i < len(self._keys) and self._keys[i].startswith(prefix)

    def _new_state(self, prefix: str, fail: int) -> int:
        self._prefix.append(prefix)
        self._fail.append(fail)
        self._goto.append({})
        self._match.append(len(prefix) if prefix in self._stops else self._match[fail])
        self._hold.append(len(prefix) if self._extends(prefix) else self._hold[fail])
        return len(self._prefix) - 1
