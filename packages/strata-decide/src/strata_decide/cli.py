"""`strata-decide`: decide | parity | calibrate | serve | bench."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tqdm import tqdm

from strata_client import AsyncStrataClient

from . import operations, questions
from .answers import answer_json
from .calibrate import LOG_T_RANGE, Calibration, calibrate, load_examples, read_examples
from .decider import DecideOptions, Decider, Decision
from .errors import DecideError
from .parity import DEFAULT_TOLERANCE, run_parity
from .samples import QUESTIONS, STATES
from .slots import DEFAULT_MAX_READS

LOCAL_SERVER = "http://127.0.0.1:8000"
DEFAULT_SERVER = os.environ.get("STRATA_BASE_URL", LOCAL_SERVER)
SERVER_DEFAULT = f"(default: $STRATA_BASE_URL, else {LOCAL_SERVER})"
DESCRIPTION = (
    "Label decisions on a Strata server: decide one question, check parity, fit a calibration, "
    "serve the typed-decision gateway (POST /v1/systemone and its playground page), or time it."
)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's default after its help ("none" for no value, "required" for a flag that must be
    given); a help that says its default in its own words keeps them, and a switch (a flag
    without a value) shows none."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if not action.option_strings or "(default" in (action.help or "") or action.nargs == 0:
            return action.help
        if action.required:
            return f"{action.help} (required)"
        if action.default is None or action.default == []:
            return f"{action.help} (default: none)"
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strata-decide", description=DESCRIPTION, formatter_class=HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"strata-decide {version('strata-decide')}")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, description=help, formatter_class=HelpFormatter)

    def upstream_args(sub: argparse.ArgumentParser) -> None:
        """How every subcommand names the Strata server (the older --upstream* spellings hidden)."""
        sub.add_argument(
            "--server",
            default=DEFAULT_SERVER,
            help=f"the Strata server's URL {SERVER_DEFAULT}",
        )
        sub.add_argument("--upstream", dest="server", help=argparse.SUPPRESS)
        sub.add_argument("--server-api-key", default=None, help="the Strata server's API key")
        sub.add_argument(
            "--server-api-key-file",
            default=None,
            help="a file holding the Strata server's API key (its first line; kept out of `ps`; "
            "else STRATA_API_KEY)",
        )
        sub.add_argument("--upstream-api-key", dest="server_api_key", help=argparse.SUPPRESS)
        sub.add_argument("--timeout", type=float, default=120.0, help="seconds per call to the Strata server")
        sub.add_argument("--upstream-timeout", dest="timeout", type=float, help=argparse.SUPPRESS)

    def server_args(sub: argparse.ArgumentParser) -> None:
        upstream_args(sub)
        sub.add_argument("--model", default=None, help="served model (default: the first the server lists)")

    def mode_args(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--rotations", action="store_true", help="read every cyclic option order")
        sub.add_argument(
            "--calibration",
            default=None,
            help="calibration JSON from `calibrate` (default: none, temperature 1)",
        )
        sub.add_argument(
            "--answers",
            choices=["labels", "text"],
            default="labels",
            help="a choice is answered by one-token labels (one read) or by its options' names, each scored whole",
        )

    decide = command("decide", "one state, one question: the answer and its probabilities")
    server_args(decide)
    mode_args(decide)
    decide.add_argument("--state", required=True, help="the state text; @FILE reads a file")
    decide.add_argument(
        "--type",
        choices=["choice", "score", "noul"],
        default="choice",
        help="choice: one of the options; score: a level, lowest first; noul: yes or no",
    )
    decide.add_argument("--instructions", default=None, help="the question")
    decide.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME[=DESCRIPTION]",
        help="a choice option (repeat); a score level description (repeat, lowest first)",
    )
    decide.add_argument("--true", dest="true_text", default=None, help="noul: what counts as yes")
    decide.add_argument("--false", dest="false_text", default=None, help="noul: what counts as no")
    decide.add_argument("--json", action="store_true", help="print JSON")

    parity = command("parity", "named-id read vs the server's own top-20")
    server_args(parity)
    parity.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="largest difference between the two reads that passes (exit 1 above it)",
    )
    parity.add_argument("--json", action="store_true", help="print the full report as JSON")

    calib = command("calibrate", "fit a temperature on labelled JSONL examples")
    server_args(calib)
    calib.add_argument("--data", required=True, help='JSONL of {"state", "question", "answer"}')
    calib.add_argument("--out", default="calibration.json", help="where the fitted calibration is written")
    calib.add_argument("--rotations", action="store_true", help="read every cyclic option order")

    serve = command("serve", "the typed-decision gateway (POST /v1/systemone) and its playground page at /")
    upstream_args(serve)
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    serve.add_argument("--port", type=int, default=8100, help="TCP port to listen on")
    serve.add_argument(
        "--allowed-hosts",
        nargs="+",
        default=[],
        metavar="HOST",
        help="Host header names to answer ('*': any) (default: when bound to a loopback address, "
        "only localhost, 127.0.0.1 and ::1, against DNS rebinding; otherwise any)",
    )
    serve.add_argument(
        "--max-reads",
        type=int,
        default=DEFAULT_MAX_READS,
        help="upstream reads one request may ask for: a question is one, or one per option with "
        "rotations; more is a 400 before any read",
    )
    operations.add_flags(serve)
    mode_args(serve)

    bench = command("bench", "5 states x 3 questions through the gateway")
    target = bench.add_mutually_exclusive_group()
    target.add_argument("--gateway", default=None, help="measure a running gateway at this URL instead")
    target.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        help=f"start a gateway on this Strata server {SERVER_DEFAULT}",
    )
    target.add_argument("--upstream", dest="server", help=argparse.SUPPRESS)
    bench.add_argument("--api-key", default=None, help="the gateway's API key")
    bench.add_argument(
        "--rotations", action="store_true", help="the started gateway reads every option order"
    )
    bench.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except DecideError as error:
        print(f"strata-decide {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:  # serve/bench without the gateway extra
        print(
            f"strata-decide {args.command}: {error}; install the gateway from the Strata repository: "
            "pip install './packages/strata-decide[gateway]'",
            file=sys.stderr,
        )
        return 2
    except (OSError, ValueError) as error:
        print(f"strata-decide {args.command}: {error}", file=sys.stderr)
        return 2


def decide_options(args: argparse.Namespace) -> DecideOptions:
    temperature = Calibration.load(args.calibration).temperature if args.calibration else 1.0
    return DecideOptions(rotations=args.rotations, temperature=temperature, answers=args.answers)


def upstream(args: argparse.Namespace) -> AsyncStrataClient:
    key = operations.upstream_key(args.server_api_key, args.server_api_key_file)
    return AsyncStrataClient(base_url=args.server, api_key=key, timeout=args.timeout)


def question_from_args(args: argparse.Namespace) -> questions.Question:
    if args.type == "noul":
        return questions.noul(args.instructions, {"true": args.true_text, "false": args.false_text})
    if args.type == "score":
        return questions.score(args.instructions, args.option)
    criteria = dict(option.split("=", 1) if "=" in option else (option, None) for option in args.option)
    return questions.choice(args.instructions, criteria)


def run_decide(args: argparse.Namespace) -> int:
    state = Path(args.state[1:]).read_text() if args.state.startswith("@") else args.state
    question = question_from_args(args)
    if len(question.options) < 2:
        raise ValueError("give at least two --option")

    async def run() -> tuple[str, Decision]:
        async with upstream(args) as client:
            model = args.model or (await client.models.list()).data[0].id
            return model, await Decider(client, model, decide_options(args)).decide(state, question)

    model, decision = asyncio.run(run())
    answer = answer_json(decision)
    if args.json:
        print(
            json.dumps(
                {
                    "model": model,
                    "answer": answer,
                    "reads": decision.reads,
                    "prompt_tokens": decision.prompt_tokens,
                },
                ensure_ascii=False,
                indent=2,
            )
        )
        return 0
    print(f"answer: {decision.answer}")
    for key in ("confidence", "score", "noul"):
        if key in answer:
            print(f"{key}: {answer[key]:.4f}")
    print(f"label mass: {decision.distribution.mass:.4f}   reads: {decision.reads}")
    width = max(len(name) for name in question.names)
    for name, p in decision.probabilities.items():
        print(f"  {name:<{width}}  {p:.4f}  {'#' * round(40 * p)}")
    return 0


def run_parity_command(args: argparse.Namespace) -> int:
    async def run() -> Any:
        async with upstream(args) as client:
            with tqdm(total=len(STATES) * len(QUESTIONS), desc="parity", disable=None) as bar:
                return await run_parity(client, args.model, STATES, QUESTIONS, args.tolerance, bar.update)

    report = asyncio.run(run())
    summary = report.summary()
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for key in (
            "cases",
            "labels_compared",
            "max_abs_diff",
            "mean_abs_diff",
            "mean_diff",
            "argmax_agreement",
        ):
            print(f"{key}: {summary[key]}")
        print("PASS" if report.passed else f"FAIL (tolerance {args.tolerance})")
    return 0 if report.passed else 1


def run_calibrate(args: argparse.Namespace) -> int:
    examples = load_examples(args.data)

    async def run() -> Calibration:
        async with upstream(args) as client:
            decider = Decider(client, args.model, DecideOptions(rotations=args.rotations))
            with tqdm(total=len(examples), desc="calibrate", disable=None) as bar:
                distributions = await read_examples(decider, examples, bar.update)
        return calibrate(distributions, [example.answer for example in examples])

    result = asyncio.run(run())
    result.save(args.out)
    print(f"temperature: {result.temperature:.4f}  ({result.examples} examples) -> {args.out}")
    if not LOG_T_RANGE[0] + 1e-6 < math.log(result.temperature) < LOG_T_RANGE[1] - 1e-6:
        print(
            f"warning: the temperature is at the end of its search range "
            f"[{math.exp(LOG_T_RANGE[0]):g}, {math.exp(LOG_T_RANGE[1]):g}]: the best fit lies beyond it, "
            "so these examples do not calibrate the reads (too few, or answers the model does not "
            "predict at all); check them before using this file",
            file=sys.stderr,
        )
    print(f"ECE:   {result.ece_before:.4f} -> {result.ece_after:.4f}")
    print(f"Brier: {result.brier_before:.4f} -> {result.brier_after:.4f}")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from .gateway import GatewayConfig
    from .gateway.serve import serve

    config = GatewayConfig(
        upstream=args.server,
        api_keys=operations.api_keys(args.api_key, args.api_key_file),
        upstream_api_key=operations.upstream_key(args.server_api_key, args.server_api_key_file),
        upstream_timeout=args.timeout,
        decide=decide_options(args),
        max_reads=args.max_reads,
    )
    serve(config, args.host, args.port, args.log_level, args.log_format, args.allowed_hosts)
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from .bench import bench_gateway
    from .gateway import GatewayConfig
    from .gateway.serve import background

    config = GatewayConfig(upstream=args.server, decide=DecideOptions(rotations=args.rotations))
    started = nullcontext(args.gateway) if args.gateway else background(config)
    with (
        started as url,
        tqdm(total=len(STATES) * len(QUESTIONS), desc="bench", disable=None) as bar,
    ):
        result = bench_gateway(url, STATES, QUESTIONS, api_key=args.api_key, on_decision=bar.update)
    summary = result.summary()
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"{summary['decisions']} decisions in {summary['wall_s']:.3f} s: "
            f"{summary['decisions_per_s']:.2f}/s, p50 {summary['p50_ms']:.1f} ms, "
            f"p95 {summary['p95_ms']:.1f} ms"
        )
    return 0


COMMANDS = {
    "decide": run_decide,
    "parity": run_parity_command,
    "calibrate": run_calibrate,
    "serve": run_serve,
    "bench": run_bench,
}
