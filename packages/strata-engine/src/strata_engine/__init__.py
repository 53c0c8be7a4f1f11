"""strata-engine: GGUF models, exact tokenization, batch-invariant logprobs on CPU."""

from strata_engine.api import (
    EngineError,
    EngineEvent,
    EngineOutOfMemory,
    ErrorCode,
    LogprobParams,
    LogprobRow,
    ModelLoadError,
    PromptScores,
    Request,
    RequestError,
    SamplingParams,
    Step,
)
from strata_engine.async_engine import AsyncEngine
from strata_engine.engine import LLMEngine

__all__ = [
    "AsyncEngine",
    "EngineError",
    "EngineEvent",
    "EngineOutOfMemory",
    "ErrorCode",
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
