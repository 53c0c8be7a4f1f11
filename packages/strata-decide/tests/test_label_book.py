"""Label sets checked against a (fake) served tokenizer: fallbacks, limits, collisions."""

from __future__ import annotations

import asyncio

import pytest

from strata_client import AsyncStrataClient
from strata_decide.errors import LabelCollisionError, LabelError
from strata_decide.labels import Label, LabelBook, check_distinct


def labels_for(kind: str, count: int):
    async def run():
        async with AsyncStrataClient() as client:
            return await LabelBook(client).labels_for(kind, count)

    return asyncio.run(run())


def test_choice_labels_are_letters_first(fake):
    labels = labels_for("choice", 3)
    assert [label.text for label in labels] == ["A", "B", "C"]
    assert [label.token_id for label in labels] == [fake.encode(t)[0] for t in "ABC"]


def test_255_options_fall_back_to_lowercase_then_single_token_codes(fake):
    labels = labels_for("choice", 255)
    texts = [label.text for label in labels]
    assert texts[:26] == [chr(c) for c in range(65, 91)]
    assert texts[26:52] == [chr(c) for c in range(97, 123)]
    codes = texts[52:]
    assert all(code in fake.words for code in codes)  # only single-token codes are used
    assert "AB" not in codes  # 65 + 66 is odd: two tokens in the fake, so skipped
    assert len({label.token_id for label in labels}) == 255


def test_too_many_options_for_the_tokenizer_is_a_label_error(fake):
    fake.words = {}
    with pytest.raises(LabelError, match="only 52 single-token labels"):
        labels_for("choice", 53)


def test_space_prefixed_form_is_used_when_the_bare_form_is_not_one_token(fake):
    fake.words = {" Yes": 77, " No": 78}  # bare 'Yes' is three characters, ' Yes' one token
    labels = labels_for("noul", 2)
    assert [(label.text, label.token_id) for label in labels] == [("Yes", 77), ("No", 78)]


def test_score_takes_at_most_ten_digit_levels(fake):
    assert [label.text for label in labels_for("score", 10)] == list("0123456789")
    with pytest.raises(LabelError):
        labels_for("score", 11)


def test_collisions_are_refused_with_both_labels_named():
    with pytest.raises(LabelCollisionError, match="'A' and 'a'"):
        check_distinct([Label("A", 5), Label("B", 6), Label("a", 5)])
