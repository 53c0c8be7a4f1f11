"""A decision as the typed-decision API's answer object (also the CLI's ``--json`` answer).

* ``choice``: the argmax option, probabilities keyed by the option names, confidence
  ``(K * p_max - 1) / (K - 1)``;
* ``score``: ``sum(i * p_i)`` over the returned probabilities (keys ``"0"``..), the legend
  echoing the levels as sent, confidence ``max(0, 1 - sum(p_i |i - mode|) / D)``;
* ``noul``: P(yes), no confidence.

Extra fields carry the ``x_`` prefix: ``x_label_mass`` is the labels' share of the model's
full next-token distribution (averaged over reads in the rotations mode).
"""

from __future__ import annotations

from typing import Any

from .decider import Decision
from .distribution import choice_confidence, expected_score, score_confidence


def answer_json(decision: Decision) -> dict[str, Any]:
    """The wire answer for one decision."""
    question = decision.question
    probabilities = decision.distribution.probabilities
    extras = {"x_label_mass": decision.distribution.mass}
    if question.kind == "noul":
        return {"type": "noul", "noul": probabilities[0], **extras}
    keyed = dict(zip(question.names, probabilities, strict=True))
    if question.kind == "score":
        return {
            "type": "score",
            "score": expected_score(probabilities),
            "legend": {option.name: option.raw for option in question.options},
            "probabilities": keyed,
            "confidence": score_confidence(probabilities),
            **extras,
        }
    return {
        "type": "choice",
        "choice": decision.answer,
        "probabilities": keyed,
        "confidence": choice_confidence(probabilities),
        **extras,
    }
