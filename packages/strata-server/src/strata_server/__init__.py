"""Strata's OpenAI/vLLM-compatible HTTP server: completions and chat with full logprobs."""

from strata_server.app import create_app
from strata_server.context import ServerSettings

__all__ = ["ServerSettings", "create_app"]
