"""`strata-server` flag parsing: --chat-template (file or inline), --cors-origins (plural, the
singular kept), and what each becomes in the engine's and the app's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata_server.settings import build_parser, chat_template_source, engine_options, server_settings

TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def test_a_chat_template_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text(TEMPLATE + "\n", encoding="utf-8")
    assert chat_template_source(str(path)) == TEMPLATE + "\n"
    args = build_parser().parse_args(["--chat-template", str(path)])
    assert engine_options(args)["chat_template"] == TEMPLATE + "\n"


def test_an_inline_chat_template_is_used_as_given() -> None:
    assert chat_template_source(TEMPLATE) == TEMPLATE
    assert chat_template_source(None) is None


@pytest.mark.parametrize("value", ["no-such-file.jinja", "{% for %}"])
def test_a_missing_file_or_a_broken_template_stops_the_server(value: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        chat_template_source(value)
    assert "--chat-template" in str(exit_.value.code)


def test_cors_origins_plural_and_singular() -> None:
    args = build_parser().parse_args(
        ["--cors-origins", "https://a.example", "https://b.example", "--cors-origin", "https://c.example"]
    )
    assert server_settings(args, ()).cors_origins == (
        "https://a.example",
        "https://b.example",
        "https://c.example",
    )
    assert server_settings(build_parser().parse_args([]), ()).cors_origins == ()


def test_request_templates_are_untrusted_unless_asked() -> None:
    assert not server_settings(build_parser().parse_args([]), ()).trust_request_chat_template
    trusted = build_parser().parse_args(["--trust-request-chat-template"])
    assert server_settings(trusted, ()).trust_request_chat_template


def test_log_lines_carry_an_iso_utc_time_in_both_formats() -> None:
    import json
    import logging

    from strata_server.log_format import JsonFormatter, TextFormatter

    record = logging.LogRecord("strata_server", logging.WARNING, __file__, 1, "slow %s", ("step",), None)
    record.created = 1764603600.25  # 2025-12-01T15:40:00.250Z
    assert TextFormatter().format(record) == "2025-12-01T15:40:00.250Z WARNING strata_server: slow step"
    assert json.loads(JsonFormatter().format(record)) == {
        "time": "2025-12-01T15:40:00.250Z",
        "level": "WARNING",
        "logger": "strata_server",
        "message": "slow step",
    }
    access = logging.LogRecord("strata_server.access", logging.INFO, __file__, 1, "{}", (), None)
    access.created = record.created
    access.fields = {"event": "request", "status": 200}
    assert json.loads(JsonFormatter().format(access)) == {
        "time": "2025-12-01T15:40:00.250Z",
        "level": "INFO",
        "logger": "strata_server.access",
        "event": "request",
        "status": 200,
    }
    assert build_parser().parse_args(["--log-format", "json"]).log_format == "json"
    assert build_parser().parse_args([]).log_format == "text"
