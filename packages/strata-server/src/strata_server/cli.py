"""`strata-server`: load a GGUF model into the engine and serve it over HTTP with uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata_engine.cli_help import HelpFormatter
from strata_engine.paths import strata_home
from strata_server.limits import add_flags as add_limit_flags
from strata_server.limits import from_args as limits_from_args
from strata_server.limits import not_on_ray
from strata_server.log_format import LOG_FORMATS, LOG_LEVELS, configure_logging
from strata_server.provenance import version_line

if TYPE_CHECKING:
    from strata_server.context import ServerSettings

DEFAULT_PORT = 8000
DEFAULT_MAX_QUEUE = 256
DEFAULT_MAX_N = 256
DEFAULT_REQUEST_TIMEOUT_S = 600.0
DEFAULT_SHUTDOWN_GRACE_S = 30.0
API_KEY_ENV = "STRATA_API_KEY"


def api_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """Keys from --api-key (repeated), --api-key-file and STRATA_API_KEY, in that order."""
    keys = [k for k in args.api_key if k]
    if args.api_key_file:
        with open(args.api_key_file, encoding="utf-8") as handle:
            for line in handle:
                key = line.strip()
                if key and not key.startswith("#"):
                    keys.append(key)
    if env_key := os.environ.get(API_KEY_ENV, "").strip():
        keys.append(env_key)
    return tuple(dict.fromkeys(keys))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strata-server",
        description=(
            "Serve a local GGUF model with OpenAI/vLLM-compatible routes "
            "(/v1/completions and /v1/chat/completions with full logprobs)."
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_line())
    parser.add_argument(
        "--model",
        default="default",
        help="path to a .gguf file; a Hugging Face Hub reference, owner/repo:QUANT (e.g. :Q4_K_M) or "
        "owner/repo/FILE.gguf (fetched into the Hub cache, verified, offline once cached); or "
        f"'default' for SmolLM2-135M-Instruct (downloaded once into {strata_home() / 'models'})",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port to listen on")
    parser.add_argument(
        "--fd",
        type=int,
        default=None,
        help="serve on this inherited, already bound socket instead of --host/--port "
        "(a launcher binds port 0 and hands the socket over, so no one can take the port first) "
        "(default: none: listen on --host/--port)",
    )
    parser.add_argument(
        "--parallel",
        type=int,
        default=4,
        help="how many sequences the engine runs at once (further requests queue)",
    )
    parser.add_argument(
        "--max-logprobs",
        type=int,
        default=20,
        help="largest `logprobs`/`top_logprobs` a request may ask for "
        "(with allowed_token_ids: up to the number of allowed ids)",
    )
    parser.add_argument(
        "--ctx-size",
        type=int,
        default=None,
        help="context length in tokens (default: the model's own)",
    )
    parser.add_argument(
        "--kv-cache-mb",
        type=int,
        default=1024,
        help="memory budget of the paged KV cache in MiB (never less than one full-context request)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for the model (default: the CPUs this process may run on); "
        "bit-identical results are promised for a fixed thread count",
    )
    parser.add_argument(
        "--kernels",
        default="auto",
        choices=["auto", "native", "native-fp32", "native-q8", "native-limb3", "native-limb2", "torch"],
        help="native: the C kernels, exact integer matmuls on activations held as three int8 limbs "
        "(batch-invariant, the same bits on every CPU); native-fp32: the same kernels with fp32 "
        "matmuls; native-q8, native-limb2: 8-bit or two-limb activations (opt-in: faster, less "
        "exact, still batch-invariant; see docs/performance.md); native-limb3: another name for "
        "native; torch: the fallback (not batch-invariant); auto: native, or torch with a WARNING "
        "when they cannot be built",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        choices=["auto", "cpu", "cuda"],
        help="where the model runs (cuda: the Triton kernels; needs the engine's [gpu] extra)",
    )
    parser.add_argument(
        "--tensor-parallel",
        type=int,
        default=1,
        metavar="N",
        help="split the model's heads and FFN columns over N ranks started as torchrun starts them "
        "(torchrun --nproc-per-node N -m strata_server --tensor-parallel N ...; gloo on CPUs, NCCL "
        "on GPUs); rank 0 serves HTTP",
    )
    parser.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="do not reuse KV blocks of shared prompt prefixes (results are identical either way)",
    )
    parser.add_argument(
        "--api-key",
        action="append",
        default=[],
        help="require 'Authorization: Bearer KEY' on /v1/* (repeat for several keys; "
        "also read from STRATA_API_KEY and --api-key-file) (default: none: /v1/* needs no key)",
    )
    parser.add_argument(
        "--api-key-file",
        default=None,
        help="a file of accepted API keys, one per line (blank lines and # comments ignored)",
    )
    parser.add_argument(
        "--key-on-every-route",
        action="store_true",
        help="require the API key on /tokenize, /detokenize, /tokenizer_info, /version and /metrics "
        "too (/health stays open)",
    )
    parser.add_argument(
        "--max-queue",
        type=int,
        default=DEFAULT_MAX_QUEUE,
        help="engine requests that may wait for a slot beyond --parallel; more get 429 with "
        "Retry-After (-1: no bound)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="seconds a request may take from arrival to its last token; then it is cancelled "
        "(KV blocks freed) and answered 504 (0: no timeout)",
    )
    parser.add_argument(
        "--max-n",
        type=int,
        default=DEFAULT_MAX_N,
        help="most sequences per request (prompts x n; each is an engine request counted against --max-queue)",
    )
    parser.add_argument(
        "--max-tokens-limit",
        type=int,
        default=None,
        help="largest max_tokens a request may ask for, also used when a chat request sends none "
        "(default: none: up to the context)",
    )
    parser.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=None,
        help="longest prompt accepted, in tokens (default: none: up to the context)",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=DEFAULT_SHUTDOWN_GRACE_S,
        help="seconds in-flight requests get to finish after SIGTERM/Ctrl-C (a second signal exits at once)",
    )
    parser.add_argument(
        "--cors-origins",
        "--cors-origin",  # the older, singular spelling
        dest="cors_origins",
        action="extend",
        nargs="+",
        default=[],
        metavar="ORIGIN",
        help="allow browser requests from these origins (several after one flag, or the flag "
        "repeated; '*' for any) (default: none: CORS off)",
    )
    parser.add_argument(
        "--chat-template",
        default=None,
        metavar="FILE_OR_TEMPLATE",
        help="a Jinja chat template (a file, or the template itself) replacing the model's; "
        "rendered in the same sandbox (default: the model's own)",
    )
    parser.add_argument(
        "--allowed-hosts",
        action="extend",
        nargs="+",
        default=[],
        metavar="HOST",
        help="Host header names to answer ('*': any) (default: when bound to a loopback address, "
        "only localhost, 127.0.0.1 and ::1, against DNS rebinding; otherwise any)",
    )
    parser.add_argument(
        "--trust-request-chat-template",
        action="store_true",
        help="render a request's own `chat_template` (a template is code the server runs; off: "
        "such requests get 400)",
    )
    parser.add_argument(
        "--served-model-name",
        default=None,
        help="the model name clients send and see (default: the model file's stem)",
    )
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="server log level")
    parser.add_argument(
        "--log-format",
        default="text",
        choices=LOG_FORMATS,
        help="text: 'TIME LEVEL LOGGER: MESSAGE' lines; json: one JSON object per line; "
        "both with ISO 8601 UTC timestamps",
    )
    add_limit_flags(parser)
    ray = parser.add_argument_group("replicas on Ray Serve (needs the [ray] extra; docs/scaling.md)")
    ray.add_argument(
        "--ray",
        action="store_true",
        help="serve --replicas engine replicas behind one Ray Serve HTTP ingress on --host:--port",
    )
    ray.add_argument("--replicas", type=int, default=2, help="engine replicas (with --ray)")
    ray.add_argument(
        "--ray-address",
        default=None,
        help="a running Ray cluster to join, e.g. 'auto' or 'ray://head:10001' (default: start a local one)",
    )
    ray.add_argument(
        "--router",
        default="affinity",
        choices=["affinity", "pow2"],
        help="affinity: requests sharing a prompt prefix go to the same replica while load is "
        "balanced; pow2: Ray Serve's default power-of-two choices",
    )
    return parser


def chat_template_source(value: str | None) -> str | None:
    """`--chat-template`: a file's text, or the template itself (vLLM's and llama.cpp's rule);
    one that does not compile stops the server here, not at the first chat request."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if path.is_file():
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            sys.exit(f"strata-server: cannot read --chat-template {value}: {exc}")
    elif "{{" in value or "{%" in value:
        source = value
    else:
        sys.exit(f"strata-server: --chat-template {value!r} is neither a file nor a Jinja template")
    from strata_engine.text.chat_template import ChatTemplate

    if (error := ChatTemplate(source).compile_error) is not None:
        sys.exit(f"strata-server: --chat-template: {error.replace('the model', 'this')}")
    return source


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """`AsyncEngine.from_path` keywords from the flags (one mapping for every way of serving)."""
    return dict(
        chat_template=chat_template_source(args.chat_template),
        parallel=args.parallel,
        ctx_size=args.ctx_size,
        kv_cache_mb=args.kv_cache_mb,
        num_threads=args.threads,
        prefix_cache=not args.no_prefix_cache,
        kernels=args.kernels,
        device=args.device,
    )


def server_settings(args: argparse.Namespace, keys: tuple[str, ...]) -> ServerSettings:
    """The app's settings from the flags (one mapping for every way of serving)."""
    from strata_server.browsers import allowed_hosts, bound_host
    from strata_server.context import ServerSettings

    if args.key_on_every_route and not keys:
        sys.exit(
            "strata-server: --key-on-every-route needs a key (--api-key, --api-key-file or STRATA_API_KEY)"
        )
    return ServerSettings(
        served_model_name=args.served_model_name,
        max_logprobs=args.max_logprobs,
        api_keys=keys,
        slots=args.parallel,
        max_queue=None if args.max_queue < 0 else args.max_queue,
        request_timeout=args.request_timeout or None,
        max_n=args.max_n,
        max_tokens_limit=args.max_tokens_limit,
        max_prompt_tokens=args.max_prompt_tokens,
        cors_origins=tuple(args.cors_origins),
        trust_request_chat_template=args.trust_request_chat_template,
        key_on_every_route=args.key_on_every_route,
        allowed_hosts=allowed_hosts(bound_host(args.host, args.fd), args.allowed_hosts),
        limits=limits_from_args(args),
    )


def serve_on_ray(args: argparse.Namespace, keys: tuple[str, ...]) -> None:
    """`--ray`: the same app on --replicas engine replicas (strata_server.ray_serve)."""
    if args.replicas < 1:
        sys.exit("strata-server: --replicas must be at least 1")
    if args.tensor_parallel != 1:
        sys.exit(
            "strata-server: --ray runs one engine per replica; --tensor-parallel is not supported with it"
        )
    if unsupported := not_on_ray(args):  # refused, not silently left unapplied
        sys.exit(
            f"strata-server: --ray: Ray Serve's HTTP proxy has no setting for {', '.join(unsupported)}; "
            "bound them in a reverse proxy in front of it (docs/scaling.md), or leave them out"
        )
    try:
        from strata_server.ray_serve import RayOptions, serve_replicas
    except ImportError as exc:
        sys.exit(
            "strata-server: --ray needs Ray Serve: from the Strata repository, "
            f"pip install './packages/strata-server[ray]' ({exc})"
        )
    from strata_engine.api import EngineError
    from strata_engine.model_store import resolve_model

    try:
        resolve_model(args.model)  # fail here, not in every replica (each resolves it again)
    except EngineError as exc:
        sys.exit(f"strata-server: cannot load model: {exc}")
    serve_replicas(RayOptions.from_args(args, keys), args.host, args.port, args.ray_address)


def follow_rank(path: Path, engine_args: dict[str, Any]) -> int:
    """A tensor-parallel rank other than 0 serves no HTTP: it loads its shard and runs rank 0's
    steps until rank 0 stops (exit 0) or the group breaks (exit 1, loudly)."""
    from strata_engine.api import EngineUnavailable
    from strata_engine.engine import LLMEngine

    # torchrun (and Ctrl-C) signal every rank at once: a worker keeps running rank 0's steps while
    # rank 0 drains, and exits when rank 0 releases it (or is gone: its collectives fail)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    engine = LLMEngine(path, **engine_args)
    try:
        engine.follow()
    except EngineUnavailable as exc:
        logging.getLogger("strata_server").error("strata-server rank %d: %s", engine.tp.rank, exc)
        return 1
    finally:
        engine.close()
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.parallel < 1:
        sys.exit("strata-server: --parallel must be at least 1")
    if args.tensor_parallel < 1:
        sys.exit("strata-server: --tensor-parallel must be at least 1")
    if args.max_logprobs < 0:
        sys.exit("strata-server: --max-logprobs must be >= 0")
    for flag in ("max_n", "max_tokens_limit", "max_prompt_tokens"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            sys.exit(f"strata-server: --{flag.replace('_', '-')} must be at least 1")
    try:
        limits_from_args(args)
    except ValueError as exc:
        sys.exit(f"strata-server: {exc}")
    try:
        keys = api_keys(args)
    except OSError as exc:
        sys.exit(f"strata-server: cannot read --api-key-file: {exc}")
    configure_logging(args.log_level, args.log_format)
    if args.ray:
        serve_on_ray(args, keys)
        return

    import uvicorn  # imported here so `--help` stays instant

    from strata_engine import AsyncEngine
    from strata_engine.api import EngineError
    from strata_engine.kernels.choice import describe
    from strata_engine.kernels.native import NativeUnavailable
    from strata_engine.model_store import resolve_model
    from strata_engine.provenance import model_sha256
    from strata_engine.tensor_parallel import init_from_env
    from strata_server.app import create_app
    from strata_server.provenance import Provenance
    from strata_server.shutdown import GracefulServer
    from strata_server.slow_clients import connection_options

    try:
        path = resolve_model(args.model)
        tp = init_from_env(args.tensor_parallel, args.device)
        engine_args = {**engine_options(args), "tensor_parallel": tp}
        if tp.rank != 0:
            sys.exit(follow_rank(path, engine_args))
        with ThreadPoolExecutor(1, thread_name_prefix="strata-hash") as pool:
            sha256 = pool.submit(model_sha256, path)  # beside the load (hashlib releases the GIL)
            engine = AsyncEngine.from_path(path, **engine_args)
            provenance = Provenance.of(
                engine.kernels,
                engine.invariant,
                path,
                tp.world,
                engine_args.get("chat_template"),
                sha256.result(),
            )
    except (EngineError, NativeUnavailable) as exc:
        sys.exit(f"strata-server: cannot load model: {exc}")
    except OSError as exc:
        sys.exit(f"strata-server: cannot read the model file: {exc}")
    logging.getLogger("strata_server").info(
        "%s; model %s loaded in %.2f s",
        describe(engine.kernels, engine.invariant),
        path.name,
        engine.load_seconds,
    )
    settings = server_settings(args, keys)
    try:
        app = create_app(engine, settings, provenance)
        config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            access_log=False,  # one JSON line per request instead (strata_server.access)
            log_config=None,  # uvicorn's loggers go through configure_logging's handler
            timeout_graceful_shutdown=1,  # after --shutdown-grace, close what is left quickly
            **connection_options(settings.limits),
        )
        server = GracefulServer(config, app.state.ctx.drain, args.shutdown_grace)
        server.run(sockets=None if args.fd is None else [socket.socket(fileno=args.fd)])
        if not server.started:
            sys.exit(3)  # uvicorn's own status for a failed start (port taken, ...)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
