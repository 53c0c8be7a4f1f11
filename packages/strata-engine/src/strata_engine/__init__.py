"""strata-engine: GGUF models, exact tokenization, batch-invariant logprobs on CPU."""

from strata_engine.api import (
    EngineError,
    EngineEvent,
    LogprobParams,
    LogprobRow,
    ModelLoadError,
    PromptScores,
    Request,
    RequestError,
    SamplingParams,
    Step,
)
from strata_engine.engine import AsyncEngine, LLMEngine

__all__ = [
    "AsyncEngine",
    "EngineError",
    "EngineEvent",
    "LLMEngine",
    "LogprobParams",
    "LogprobRow",
    "ModelLoadError",
    "PromptScores",
    "Request",
    "RequestError",
    "SamplingParams",
    "Step",
]
