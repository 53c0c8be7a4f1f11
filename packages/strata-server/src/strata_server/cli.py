"""`strata-server`: load a GGUF model into the engine and serve it over HTTP with uvicorn."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

DEFAULT_PORT = 8000


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strata-server",
        description=(
            "Serve a local GGUF model with OpenAI/vLLM-compatible routes "
            "(/v1/completions and /v1/chat/completions with full logprobs)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--model",
        default="default",
        help="path to a .gguf file, or 'default' for SmolLM2-135M-Instruct "
        "(downloaded once into ~/.cache/strata/models)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="TCP port to listen on")
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
        help="CPU threads for the model (default: torch's default, usually the core count); "
        "bit-identical results are promised for a fixed thread count",
    )
    parser.add_argument(
        "--kernels",
        default="auto",
        choices=["auto", "native", "torch"],
        help="native: the C kernels (exact, batch-invariant, the same bits on every CPU); torch: the "
        "fallback (not batch-invariant); auto: native, or torch with a WARNING when they cannot be built",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        choices=["auto", "cpu", "cuda"],
        help="where the model runs (cuda: the Triton kernels; needs the engine's [gpu] extra)",
    )
    parser.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="do not reuse KV blocks of shared prompt prefixes (results are identical either way)",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help="if set, /v1/* routes require the header 'Authorization: Bearer KEY'",
    )
    parser.add_argument(
        "--served-model-name",
        default=None,
        help="the model name clients send and see (default: the model file's stem)",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="server log level",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.parallel < 1:
        sys.exit("strata-server: --parallel must be at least 1")
    if args.max_logprobs < 0:
        sys.exit("strata-server: --max-logprobs must be >= 0")
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")

    import uvicorn  # imported here so `--help` stays instant

    from strata_engine import AsyncEngine
    from strata_engine.api import ModelLoadError
    from strata_engine.model_store import resolve_model
    from strata_engine.native import NativeUnavailable
    from strata_engine.ops import describe
    from strata_server.app import create_app
    from strata_server.context import ServerSettings

    try:
        path = resolve_model(args.model)
        engine = AsyncEngine.from_path(
            path,
            parallel=args.parallel,
            ctx_size=args.ctx_size,
            kv_cache_mb=args.kv_cache_mb,
            num_threads=args.threads,
            prefix_cache=not args.no_prefix_cache,
            kernels=args.kernels,
            device=args.device,
        )
    except (ModelLoadError, NativeUnavailable) as exc:
        sys.exit(f"strata-server: cannot load model: {exc}")
    logging.getLogger("strata_server").info(
        "%s; model %s loaded in %.2f s",
        describe(engine.kernels, engine.invariant),
        path.name,
        engine.load_seconds,
    )
    settings = ServerSettings(
        served_model_name=args.served_model_name,
        max_logprobs=args.max_logprobs,
        api_key=args.api_key,
    )
    try:
        app = create_app(engine, settings)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
