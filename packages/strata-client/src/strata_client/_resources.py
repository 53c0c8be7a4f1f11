"""What the route groups (``completions``, ``chat.completions``, ``models``) share: paths, types.

Each ``create`` keyword is the wire field of the same name (``None``: not sent, the server's
default applies); ``extra_body`` adds or overrides fields; ``timeout`` overrides the
client's timeout for this call only. ``model=None`` uses the first model the server lists.
"""

from __future__ import annotations

from typing import Any

COMPLETIONS_PATH = "/v1/completions"
CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"

Prompt = str | list[str] | list[int] | list[list[int]]
Stop = str | list[str]
Message = dict[str, Any]
JsonSchema = dict[str, Any] | bool
