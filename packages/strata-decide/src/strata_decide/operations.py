"""The gateway's access and logging flags (``strata-decide serve``): the same rules as
`strata-server`'s. Standard library only, so the CLI builds its parser without the gateway extra.

Keys come from ``--api-key`` (repeatable), ``--api-key-file`` (one per line, blank lines and
``#`` comments skipped) and ``STRATA_DECIDE_API_KEY``, in that order, without repeats; each
``Authorization`` header is compared with every key in constant time. Log lines carry an ISO
8601 UTC time, as text (``TIME LEVEL LOGGER: MESSAGE``) or one JSON object per line
(``--log-format json``), at ``--log-level``.

strata-decide builds on strata-client alone (never on the server), so these rules live here
and in ``strata_server.cli``/``strata_server.log_format``; ``tests/integration/decide/test_gateway_flags.py``
holds both to one table of cases.
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import sys
import time
from collections.abc import Iterable

API_KEY_ENV = "STRATA_DECIDE_API_KEY"
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """``--api-key``, ``--api-key-file``, ``--log-level``, ``--log-format`` on ``parser``."""
    parser.add_argument(
        "--api-key",
        action="append",
        default=[],
        help=f"require 'Authorization: Bearer KEY' on /v1/* (repeat for several keys; also read "
        f"from {API_KEY_ENV} and --api-key-file)",
    )
    parser.add_argument(
        "--api-key-file",
        default=None,
        help="a file of accepted API keys, one per line (blank lines and # comments ignored)",
    )
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="log level")
    parser.add_argument(
        "--log-format",
        default="text",
        choices=LOG_FORMATS,
        help="text: 'TIME LEVEL LOGGER: MESSAGE' lines; json: one JSON object per line; both with "
        "ISO 8601 UTC timestamps",
    )


def api_keys(flag_keys: Iterable[str], key_file: str | None) -> tuple[str, ...]:
    """Keys from the flags, then the file, then the environment, in that order, without repeats."""
    keys = [key for key in flag_keys if key]
    if key_file:
        with open(key_file, encoding="utf-8") as handle:
            for line in handle:
                key = line.strip()
                if key and not key.startswith("#"):
                    keys.append(key)
    if env_key := os.environ.get(API_KEY_ENV, "").strip():
        keys.append(env_key)
    return tuple(dict.fromkeys(keys))


UPSTREAM_KEY_ENV = "STRATA_API_KEY"  # the Strata server's key, as strata_client reads it


def upstream_key(flag_key: str | None, key_file: str | None = None) -> str | None:
    """The key sent to the Strata server: --server-api-key, else the first key in
    --server-api-key-file, else STRATA_API_KEY (a flag's value is visible in `ps`; the file's
    and the environment's are not). Every upstream call of a command or gateway uses this one."""
    if flag_key:
        return flag_key
    if key_file:
        with open(key_file, encoding="utf-8") as handle:
            for line in handle:
                if (key := line.strip()) and not key.startswith("#"):
                    return key
    return os.environ.get(UPSTREAM_KEY_ENV, "").strip() or None


def accepted(authorization: str, keys: Iterable[str]) -> bool:
    """Whether an ``Authorization`` header carries one of ``keys`` as a bearer token; every key
    is compared (no early exit that would time the match)."""
    scheme, _, token = authorization.partition(" ")
    given = token.strip().encode()
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key.encode())
    return found and scheme.lower() == "bearer"


def iso_time(created: float) -> str:
    """``2026-12-01T15:40:00.123Z`` (UTC, milliseconds)."""
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{iso_time(record.created)} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": iso_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"), default=str)


def configure_logging(level: str, fmt: str = "text") -> None:
    """One stderr handler on the root logger in ``fmt`` at ``level``; uvicorn's loggers use it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
