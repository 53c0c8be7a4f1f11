"""Log lines with ISO 8601 UTC timestamps, as text or as one JSON object per line (`--log-format`).

text: `2026-12-01T15:40:00.123Z INFO strata_server: message`; the per-request access line's
message is its JSON object. json: `{"time", "level", "logger", "message"}` per line, and the
access line's fields merged in (`"event": "request"`, ...), so a log shipper reads every line
the same way. uvicorn's own loggers go through the same handler.
"""

from __future__ import annotations

import json
import logging
import sys
import time

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
FIELDS_ATTR = "fields"  # `extra={"fields": {...}}`: structured fields of a line (the access log's)


def iso_time(created: float) -> str:
    """`2026-12-01T15:40:00.123Z` (UTC, milliseconds)."""
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
        }
        fields = getattr(record, FIELDS_ATTR, None)
        if isinstance(fields, dict):
            entry.update(fields)
        else:
            entry["message"] = record.getMessage()
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"), default=str)


def configure_logging(level: str, fmt: str = "text") -> None:
    """One stderr handler on the root logger in `fmt`, at `level` (uvicorn's loggers propagate to it)."""
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
