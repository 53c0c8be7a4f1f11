"""Label decisions on top of strata-client: one-token reads of single-token labels.

See docs/decide.md. The pieces: ``labels`` (single-token labels), ``prompts`` (state first,
then the question), ``read`` (the one-token read), ``distribution`` (mass, renormalised
probabilities, confidence), ``decider`` (one decision, rotations), ``calibrate``,
``parity``, the ``gateway`` (``POST /v1/systemone``) and the ``cli``.
"""

from .decider import DecideOptions, Decider, Decision
from .distribution import Distribution
from .errors import (
    ContextOverflowError,
    DecideError,
    LabelCollisionError,
    LabelError,
    UpstreamError,
)
from .questions import Option, Question, choice, from_wire, noul, score

__all__ = [
    "ContextOverflowError",
    "DecideError",
    "DecideOptions",
    "Decider",
    "Decision",
    "Distribution",
    "LabelCollisionError",
    "LabelError",
    "Option",
    "Question",
    "UpstreamError",
    "choice",
    "from_wire",
    "noul",
    "score",
]
