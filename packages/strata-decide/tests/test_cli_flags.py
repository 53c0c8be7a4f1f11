"""One vocabulary across `strata-decide`'s subcommands (`--server` names the Strata server
everywhere; the older `--upstream*` spellings are hidden aliases) and the gateway's access and
logging flags (several keys, a key file, an environment variable, level and format)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from strata_decide import operations
from strata_decide.cli import build_parser

SUBCOMMANDS = {
    "decide": ["--state", "s"],
    "parity": [],
    "calibrate": ["--data", "d.jsonl"],
    "serve": [],
    "bench": [],
}


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_subcommand_names_the_server_with_server(command: str) -> None:
    args = build_parser().parse_args([command, *SUBCOMMANDS[command], "--server", "http://s:1"])
    assert args.server == "http://s:1"
    if command != "bench":  # bench passes no key or timeout upstream
        args = build_parser().parse_args(
            [command, *SUBCOMMANDS[command], "--server-api-key", "k", "--timeout", "5"]
        )
        assert (args.server_api_key, args.timeout) == ("k", 5.0)


@pytest.mark.parametrize("command", ["serve", "bench", "decide"])
def test_the_old_spellings_still_work_and_are_hidden(command: str, capsys) -> None:
    args = build_parser().parse_args([command, *SUBCOMMANDS[command], "--upstream", "http://u:2"])
    assert args.server == "http://u:2"
    if command == "serve":
        old = build_parser().parse_args(["serve", "--upstream-api-key", "k", "--upstream-timeout", "7"])
        assert (old.server_api_key, old.timeout) == ("k", 7.0)
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    help_text = capsys.readouterr().out
    assert "--server" in help_text and "--upstream" not in help_text


def test_serve_takes_several_keys_a_file_and_the_environment(tmp_path: Path, monkeypatch) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("# team\nfile-key\n\nflag-a\n")
    monkeypatch.setenv(operations.API_KEY_ENV, "env-key")
    args = build_parser().parse_args(
        ["serve", "--api-key", "flag-a", "--api-key", "flag-b", "--api-key-file", str(key_file)]
    )
    assert operations.api_keys(args.api_key, args.api_key_file) == ("flag-a", "flag-b", "file-key", "env-key")
    monkeypatch.delenv(operations.API_KEY_ENV)
    assert operations.api_keys([], None) == ()


def test_serve_log_flags_and_lines() -> None:
    args = build_parser().parse_args(["serve", "--log-level", "debug", "--log-format", "json"])
    assert (args.log_level, args.log_format) == ("debug", "json")
    record = logging.LogRecord("strata_decide", logging.INFO, __file__, 1, "up on %d", (8100,), None)
    record.created = 1764603600.5
    assert (
        operations.TextFormatter().format(record) == "2025-12-01T15:40:00.500Z INFO strata_decide: up on 8100"
    )
    assert json.loads(operations.JsonFormatter().format(record)) == {
        "time": "2025-12-01T15:40:00.500Z",
        "level": "INFO",
        "logger": "strata_decide",
        "message": "up on 8100",
    }
