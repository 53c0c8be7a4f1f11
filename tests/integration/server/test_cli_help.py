"""Every command's `--help`: each flag has help text, each flag that takes a value says its
default (or that it is required), and the docs' flag tables name only flags that exist;
docs/server.md's tables name every flag `strata-server --help` shows."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata_decide.cli import build_parser as decide_parser
from strata_engine import cli as engine_cli
from strata_server.cli import build_parser as server_parser

DOCS = Path(__file__).resolve().parents[3] / "docs"


def engine_parser() -> argparse.ArgumentParser:
    """strata-engine builds its parser inside main(): take it from there without running."""
    parsers: list[argparse.ArgumentParser] = []

    class Stop(Exception):
        pass

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        parsers.append(self)
        raise Stop

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", capture)
        with pytest.raises(Stop):
            engine_cli.main([])
    return parsers[0]


def commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command and subcommand: its name as typed, and its parser."""
    yield "strata-server", server_parser()
    yield "strata-engine", engine_parser()
    decide = decide_parser()
    yield "strata-decide", decide
    for action in decide._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"strata-decide {name}", sub


COMMANDS = dict(commands())


def shown_flags(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    return (a for a in parser._actions if a.option_strings and a.help is not argparse.SUPPRESS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_has_help_and_says_its_default(name: str) -> None:
    parser = COMMANDS[name]
    formatter = parser._get_formatter()
    for action in shown_flags(parser):
        flag = action.option_strings[-1]
        assert action.help and action.help.strip(), f"{name} {flag} has no help text"
        shown = formatter._expand_help(action)
        assert "(default: None)" not in shown and "(default: [])" not in shown, f"{name} {flag}: {shown}"
        if action.nargs != 0:  # a flag that takes a value
            said = shown.count("(default") + shown.count("(required)")
            assert said == 1, f"{name} {flag} must say its default once: {shown!r}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_prints(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        COMMANDS[name].parse_args(["--help"] if " " not in name else [name.split()[1], "--help"])
    text = capsys.readouterr().out
    assert exit_.value.code == 0 and "usage:" in text
    assert "``" not in text  # reStructuredText quoting from a docstring


def test_every_top_level_command_prints_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("strata-server", "strata-decide"):
        with pytest.raises(SystemExit):
            COMMANDS[name].parse_args(["--version"])
        assert re.search(r"\d+\.\d+", capsys.readouterr().out), name


def every_option(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in shown_flags(parser) for flag in action.option_strings if flag.startswith("--")}


ALL_FLAGS = set().union(*(every_option(p) for p in COMMANDS.values())) | {"--help"}


def table_flags(text: str) -> set[str]:
    """Flags named in the first cell of a Markdown table's rows."""
    return {
        flag
        for line in text.splitlines()
        if line.startswith("| `--")
        for flag in re.findall(r"`(--[a-z0-9-]+)", line.split("|")[1])
    }


@pytest.mark.parametrize("doc", sorted(p.name for p in DOCS.glob("*.md")))
def test_every_flag_in_a_docs_table_exists(doc: str) -> None:
    missing = table_flags((DOCS / doc).read_text()) - ALL_FLAGS
    assert not missing, f"docs/{doc} lists flags no command has: {sorted(missing)}"


def test_server_md_lists_every_server_flag() -> None:
    documented = table_flags((DOCS / "server.md").read_text())
    missing = [
        action.option_strings[-1]
        for action in shown_flags(COMMANDS["strata-server"])
        if action.option_strings != ["-h", "--help"] and not documented & set(action.option_strings)
    ]
    assert not missing, f"docs/server.md's tables lack {missing}"
