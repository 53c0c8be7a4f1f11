"""Every `strata-server` flag, declared once, on the dataclass field its value lands in.

A flag used to live in three places (a settings field, a line in the CLI's parser, a line turning
the parsed value into the setting). Here each is one `option(...)` field (strata_server.flags):
its flag name(s), help text, default, type or choices, and how the parsed value becomes the
field's. `build_parser` generates the flags from the fields, and `engine_options` and
`server_settings` generate the engine's keywords and the app's settings from the parsed flags.
Both the CLI (strata_server.cli) and the Ray application (strata_server.ray) import this module;
it imports neither. Adding a flag: one field here (or on `RequestLimits`), and its docs row.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata_engine.cli_help import HelpFormatter
from strata_engine.paths import strata_home
from strata_server.flags import add_group, at_least, not_negative, option, problems, values_from_args
from strata_server.limits import LIMITS_GROUP, RequestLimits
from strata_server.limits import from_args as limits_from_args
from strata_server.log_format import LOG_FORMATS, LOG_LEVELS
from strata_server.provenance import version_line

DEFAULT_PORT = 8000
DEFAULT_MAX_QUEUE = 256
DEFAULT_MAX_N = 256  # sequences (prompts x n) in one request
DEFAULT_REQUEST_TIMEOUT_S = 600.0
DEFAULT_SHUTDOWN_GRACE_S = 30.0
API_KEY_ENV = "STRATA_API_KEY"
KV_CACHE_DTYPES = ("fp32", "bf16", "fp16", "q8_0")  # strata_engine.kernels.kv_types.KV_DTYPES
KERNELS = ("auto", "native", "native-fp32", "native-q8", "native-limb3", "native-limb2", "torch")


def _model_help() -> str:  # names STRATA_HOME as set when the parser is built
    return (
        "path to a .gguf file; a Hugging Face Hub reference, owner/repo:QUANT (e.g. :Q4_K_M) or "
        "owner/repo/FILE.gguf (fetched into the Hub cache, verified, offline once cached); or "
        f"'default' for SmolLM2-135M-Instruct (downloaded once into {strata_home() / 'models'})"
    )


@dataclass(frozen=True)
class ProcessFlags:
    """Flags the process itself reads (`args.<field>`): where to listen, keys, logging."""

    model: str = option("default", _model_help, flag="--model")
    host: str = option("127.0.0.1", "interface to listen on", flag="--host")
    port: int = option(DEFAULT_PORT, "TCP port to listen on", flag="--port")
    fd: int | None = option(
        None,
        "serve on this inherited, already bound socket instead of --host/--port "
        "(a launcher binds port 0 and hands the socket over, so no one can take the port first) "
        "(default: none: listen on --host/--port)",
        flag="--fd",
        type=int,
    )
    tensor_parallel: int = option(
        1,
        "split the model's heads and FFN columns over N ranks started as torchrun starts them "
        "(torchrun --nproc-per-node N -m strata_server --tensor-parallel N ...; gloo on CPUs, NCCL "
        "on GPUs); rank 0 serves HTTP",
        flag="--tensor-parallel",
        metavar="N",
        check=at_least(1),
    )
    api_key: tuple[str, ...] = option(
        (),
        "require 'Authorization: Bearer KEY' on /v1/* (repeat for several keys; "
        "also read from STRATA_API_KEY and --api-key-file) (default: none: /v1/* needs no key)",
        flag="--api-key",
        action="append",
    )
    api_key_file: str | None = option(
        None,
        "a file of accepted API keys, one per line (blank lines and # comments ignored)",
        flag="--api-key-file",
    )
    shutdown_grace: float = option(
        DEFAULT_SHUTDOWN_GRACE_S,
        "seconds in-flight requests get to finish after SIGTERM/Ctrl-C (a second signal exits at once)",
        flag="--shutdown-grace",
    )
    log_level: str = option("info", "server log level", flag="--log-level", choices=LOG_LEVELS)
    log_format: str = option(
        "text",
        "text: 'TIME LEVEL LOGGER: MESSAGE' lines; json: one JSON object per line; "
        "both with ISO 8601 UTC timestamps",
        flag="--log-format",
        choices=LOG_FORMATS,
    )


@dataclass(frozen=True)
class EngineOptions:
    """`AsyncEngine.from_path` keywords (the field names), the same for every way of serving."""

    parallel: int = option(
        4,
        "how many sequences the engine runs at once (further requests queue)",
        flag="--parallel",
        check=at_least(1),
    )
    ctx_size: int | None = option(
        None, "context length in tokens (default: the model's own)", flag="--ctx-size", type=int
    )
    kv_cache_mb: int = option(
        1024,
        "memory budget of the paged KV cache in MiB (never less than one full-context request)",
        flag="--kv-cache-mb",
    )
    kv_cache_dtype: str = option(
        "fp32",
        "what the KV cache stores each K/V value as: fp32 (exact); bf16 or fp16: half the memory "
        "(--kv-cache-mb holds twice the tokens); q8_0 (CPU only): 34 bytes a block of 32 values; "
        "each value rounded when written, still batch-invariant and the same bits on every CPU "
        "(named in system_fingerprint; accuracy: docs/engine.md)",
        flag="--kv-cache-dtype",
        choices=KV_CACHE_DTYPES,
    )
    num_threads: int | None = option(
        None,
        "CPU threads for the model (default: the CPUs this process may run on); "
        "bit-identical results are promised for a fixed thread count",
        flag="--threads",
        type=int,
    )
    kernels: str = option(
        "auto",
        "native: the C kernels, exact integer matmuls on activations held as three int8 limbs "
        "(batch-invariant, the same bits on every CPU); native-fp32: the same kernels with fp32 "
        "matmuls; native-q8, native-limb2: 8-bit or two-limb activations (opt-in: faster, less "
        "exact, still batch-invariant; see docs/performance.md); native-limb3: another name for "
        "native; torch: the fallback (not batch-invariant); auto: native, or torch with a WARNING "
        "when they cannot be built",
        flag="--kernels",
        choices=KERNELS,
    )
    device: str = option(
        "cpu",
        "where the model runs (cuda: the Triton kernels; needs the engine's [gpu] extra)",
        flag="--device",
        choices=("auto", "cpu", "cuda"),
    )
    prefix_cache: bool = option(
        True,
        "do not reuse KV blocks of shared prompt prefixes (results are identical either way)",
        flag="--no-prefix-cache",
        action="store_false",
    )
    chat_template: str | None = option(
        None,
        "a Jinja chat template (a file, or the template itself) replacing the model's; "
        "rendered in the same sandbox (default: the model's own)",
        flag="--chat-template",
        metavar="FILE_OR_TEMPLATE",
        convert=lambda value: chat_template_source(value),
    )


@dataclass(frozen=True)
class ServerSettings:
    """The app's settings (`create_app`): the server flags that are not engine flags, and what
    an embedder sets; fields that are not `option`s are derived from other flags."""

    served_model_name: str | None = option(  # None: the engine's model name
        None,
        "the model name clients send and see (default: the model file's stem)",
        flag="--served-model-name",
    )
    max_logprobs: int = option(
        20,
        "largest `logprobs`/`top_logprobs` a request may ask for "
        "(with allowed_token_ids: up to the number of allowed ids)",
        flag="--max-logprobs",
        check=not_negative,
    )
    api_key: str | None = None
    api_keys: tuple[str, ...] = ()  # more accepted keys (repeated --api-key, --api-key-file, env)
    slots: int = 4  # the engine's --parallel: requests beyond it wait in the queue
    key_on_every_route: bool = option(  # the key on the tokenizer routes, /version and /metrics too
        False,
        "require the API key on /tokenize, /detokenize, /tokenizer_info, /version and /metrics "
        "too (/health stays open)",
        flag="--key-on-every-route",
        action="store_true",
    )
    max_queue: int | None = option(  # engine requests waiting beyond `slots`; None: no bound
        DEFAULT_MAX_QUEUE,
        "engine requests that may wait for a slot beyond --parallel; more get 429 with "
        "Retry-After (-1: no bound)",
        flag="--max-queue",
        convert=lambda value: None if value < 0 else value,
    )
    request_timeout: float | None = option(  # seconds from arrival to the reply's end
        None,
        "seconds a request may take from arrival to its last token; then it is cancelled "
        "(KV blocks freed) and answered 504 (0: no timeout)",
        flag="--request-timeout",
        cli_default=DEFAULT_REQUEST_TIMEOUT_S,
        convert=lambda value: value or None,
    )
    max_n: int | None = option(  # choices per request (n x prompts)
        DEFAULT_MAX_N,
        "most sequences per request (prompts x n; each is an engine request counted against --max-queue)",
        flag="--max-n",
        check=at_least(1),
    )
    max_tokens_limit: int | None = option(  # the largest max_tokens (and the default when none is sent)
        None,
        "largest max_tokens a request may ask for, also used when a chat request sends none "
        "(default: none: up to the context)",
        flag="--max-tokens-limit",
        type=int,
        check=at_least(1),
    )
    max_prompt_tokens: int | None = option(  # the longest prompt, in tokens
        None,
        "longest prompt accepted, in tokens (default: none: up to the context)",
        flag="--max-prompt-tokens",
        type=int,
        check=at_least(1),
    )
    cors_origins: tuple[str, ...] = option(  # empty: no CORS headers at all
        (),
        "allow browser requests from these origins (several after one flag, or the flag "
        "repeated; '*' for any) (default: none: CORS off)",
        flag=("--cors-origins", "--cors-origin"),  # the older, singular spelling second
        action="extend",
        nargs="+",
        metavar="ORIGIN",
    )
    allowed_hosts: tuple[str, ...] = option(  # the Host names answered (empty: any; see browsers.py)
        (),
        "Host header names to answer ('*': any) (default: when bound to a loopback address, "
        "only localhost, 127.0.0.1 and ::1, against DNS rebinding; otherwise any)",
        flag="--allowed-hosts",
        action="extend",
        nargs="+",
        metavar="HOST",
    )
    trust_request_chat_template: bool = option(  # render a request's own `chat_template` (vLLM's flag)
        False,
        "render a request's own `chat_template` (a template is code the server runs; off: "
        "such requests get 400)",
        flag="--trust-request-chat-template",
        action="store_true",
    )
    limits: RequestLimits = field(default_factory=RequestLimits)  # request and connection bounds

    @property
    def keys(self) -> tuple[str, ...]:
        """Every accepted API key (empty: no key required)."""
        return tuple(dict.fromkeys(k for k in (self.api_key, *self.api_keys) if k))

    def needs_key(self, path: str) -> bool:
        """Whether a request to `path` must carry a key: /v1/* when keys are set, the other
        routes too with --key-on-every-route, /health never (the app and Ray's ingress ask here)."""
        if not self.keys or path == "/health":
            return False
        return path.startswith("/v1/") or self.key_on_every_route


@dataclass(frozen=True)
class RayFlags:
    """`--ray` and what it reads (`args.<field>`; strata_server.ray.options.RayOptions)."""

    ray: bool = option(
        False,
        "serve --replicas engine replicas behind one Ray Serve HTTP ingress on --host:--port",
        flag="--ray",
        action="store_true",
    )
    replicas: int = option(2, "engine replicas (with --ray)", flag="--replicas")
    ray_address: str | None = option(
        None,
        "a running Ray cluster to join, e.g. 'auto' or 'ray://head:10001' (default: start a local one)",
        flag="--ray-address",
    )
    router: str = option(
        "affinity",
        "affinity: requests sharing a prompt prefix go to the same replica while load is "
        "balanced; pow2: Ray Serve's default power-of-two choices",
        flag="--router",
        choices=("affinity", "pow2"),
    )


# Every flag's dataclass, in `--help` order, with its group's title (None: the main group).
FLAG_GROUPS: tuple[tuple[type, str | None], ...] = (
    (ProcessFlags, None),
    (EngineOptions, "the engine (strata-engine; the same for every replica)"),
    (ServerSettings, "the HTTP app (strata_server.ServerSettings)"),
    (RequestLimits, LIMITS_GROUP),
    (RayFlags, "replicas on Ray Serve (needs the [ray] extra; docs/scaling.md)"),
)


def build_parser() -> argparse.ArgumentParser:
    """`strata-server`'s parser, every flag generated from `FLAG_GROUPS`."""
    parser = argparse.ArgumentParser(
        prog="strata-server",
        description=(
            "Serve a local GGUF model with OpenAI/vLLM-compatible routes "
            "(/v1/completions and /v1/chat/completions with full logprobs)."
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_line())
    for cls, title in FLAG_GROUPS:
        add_group(parser, cls, title)
    return parser


def check_flags(args: argparse.Namespace) -> None:
    """Stop with one line at the first flag whose value its field's `check` refuses."""
    for cls, _ in FLAG_GROUPS:
        for problem in problems(cls, args):
            sys.exit(f"strata-server: {problem}")


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
    return values_from_args(EngineOptions, args)


def server_settings(args: argparse.Namespace, keys: tuple[str, ...]) -> ServerSettings:
    """The app's settings from the flags (one mapping for every way of serving): the option
    fields as parsed, and the fields derived from other flags."""
    from strata_server.browsers import allowed_hosts, bound_host

    if args.key_on_every_route and not keys:
        sys.exit(
            "strata-server: --key-on-every-route needs a key (--api-key, --api-key-file or STRATA_API_KEY)"
        )
    values = values_from_args(ServerSettings, args)
    values["allowed_hosts"] = allowed_hosts(bound_host(args.host, args.fd), args.allowed_hosts)
    return ServerSettings(**values, api_keys=keys, slots=args.parallel, limits=limits_from_args(args))
