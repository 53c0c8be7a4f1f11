"""The gateway's access and logging rules are the server's (strata-decide may not import the
server, so each package holds them; this table holds both to the same answers)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from strata_decide import operations
from strata_decide.cli import build_parser as decide_parser
from strata_server import log_format
from strata_server.settings import API_KEY_ENV, api_keys
from strata_server.settings import build_parser as server_parser

CASES = [
    ([], None, None),
    (["a"], None, None),
    (["a", "b", "a"], "# comment\n\nb\nc\n", "d"),
    ([], "  spaced  \n#x\n", "a"),
    (["", "z"], "", " "),
]


@pytest.mark.parametrize(("flags", "file_text", "env"), CASES)
def test_both_collect_the_same_keys(flags, file_text, env, tmp_path: Path, monkeypatch) -> None:
    argv: list[str] = [arg for key in flags for arg in ("--api-key", key)]
    if file_text is not None:
        key_file = tmp_path / "keys"
        key_file.write_text(file_text)
        argv += ["--api-key-file", str(key_file)]
    for name in (API_KEY_ENV, operations.API_KEY_ENV):
        if env is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, env)
    server = api_keys(server_parser().parse_args(argv))
    gateway_args = decide_parser().parse_args(["serve", *argv])
    assert operations.api_keys(gateway_args.api_key, gateway_args.api_key_file) == server


def test_both_write_the_same_lines() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom %s", ("now",), None)
    record.created = 1764603600.999
    assert operations.TextFormatter().format(record) == log_format.TextFormatter().format(record)
    assert json.loads(operations.JsonFormatter().format(record)) == json.loads(
        log_format.JsonFormatter().format(record)
    )
    for argv in (["--log-level", "warning"], ["--log-format", "json"]):
        server, gateway = server_parser().parse_args(argv), decide_parser().parse_args(["serve", *argv])
        assert (server.log_level, server.log_format) == (gateway.log_level, gateway.log_format)
