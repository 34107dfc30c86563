"""The ``mtp-llm`` command line: generate with MTP and show the speculative stats."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .errors import MTPError

if TYPE_CHECKING:
    from .model import Model
    from .options import OptionSpec
    from .session import MTP


def path_arg(text: str) -> str:
    """A path flag's value with ``~`` expanded (the shell leaves ``--model=~/m.gguf`` as it is)."""
    return os.path.expanduser(text)


def plain_text(doc: str) -> str:
    """A docstring as plain text for ``--help``: ``literal`` and :role:`~module.name` lose their markup."""

    def role(match: re.Match[str]) -> str:
        target = match[2]
        label = re.fullmatch(r"(.*?)\s*<[^>]*>", target)
        if label:
            return label[1]
        return target.rsplit(".", 1)[-1] if match[1] else target

    doc = re.sub(r":[a-z]+(?::[a-z]+)?:`(~?)([^`]*)`", role, doc)
    return re.sub(r"``([^`]*)``", r"\1", doc)


def in_cli_terms(message: str, flags: Mapping[str, str]) -> str:
    """An error message of the Python API in the command line's terms: each option it names (``n_ctx=100``,
    ``draft_model=Model.load('x')``) as the flag that sets it (``--n-ctx 100``, ``--draft-model x``)."""
    text = re.sub(r"\s*\(mtp-llm: [^)]*\)", "", message)  # the message names the flag already
    text = text.replace("load its trunk model as the target and pass draft_model=",
                        "pass its trunk model as --model and draft_model=")
    text = re.sub(r"draft_model=Model\.load\('([^']*)'\)", r"--draft-model \1", text)
    text = text.replace("draft_model=Model.load(...)", "--draft-model FILE")
    text = text.replace("(Model.load_default())", "(leave out --model)")
    if "no_mtp" in flags:
        text = re.sub(r"\bn_draft=0\b", "--no-mtp", text)
    for dest, flag in flags.items():
        if "_" in dest:  # not the plain words (stop, seed, grammar)
            pattern = rf"(?<![\w/.'-]){dest}(?:=(\S+?))?(?![\w/-]|\.\w)"  # not inside a path or file name
            text = re.sub(pattern, functools.partial(_as_flag, flag), text)
    return text


def _as_flag(flag: str, match: re.Match[str]) -> str:
    return f"{flag} {match[1]}" if match[1] else flag


def _add_model_args(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group()
    source.add_argument("--model", type=path_arg, help="target GGUF (default: the built-in model)")
    source.add_argument(
        "--hf",
        metavar="REPO[:FILE]",
        help="target from a Hugging Face Hub repository; FILE may be a glob such as '*Q4_K_M.gguf' "
        "(default '*.gguf': the repository's one model); needs mtp-llm[hub]",
    )
    p.add_argument(
        "--rpc",
        metavar="HOST:PORT[,...]",
        help="spread the model over these `mtp-llm rpc-server` processes (see docs/scale-out.md)",
    )
    p.add_argument(
        "--n-gpu-layers", type=int, default=None, help="layers offloaded, from the last (-1 = all; default: all with --rpc)"
    )


def _load_model(args: argparse.Namespace) -> Model:
    from .model import Model

    load = dict(rpc_servers=args.rpc.split(",") if args.rpc else None, n_gpu_layers=args.n_gpu_layers)
    if args.hf:
        repo, _, pattern = args.hf.partition(":")
        return Model.from_pretrained(repo, pattern or "*.gguf", **load)
    return Model.load(args.model, **load) if args.model else Model.load_default(**load)


SESSION_FLAG_ALIASES = {"n_threads": ("--threads",)}
"""Older spellings kept for session flags."""
GENERATE_FLAGS = ("max_tokens", "temp", "top_k", "top_p", "min_p", "seed", "repeat_penalty", "frequency_penalty",
                  "presence_penalty", "penalty_last_n", "stop", "grammar", "timeout", "reasoning_budget")
"""The generation options ``generate`` has flags for (a call's ``n_draft`` / ``cache_prompt`` are the
session's flags; ``emit_stats_every`` has no use on the command line)."""


def option_flags(
    p: argparse.ArgumentParser,
    specs: Sequence[OptionSpec],
    *,
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """One flag per option (``n_draft_max`` -> ``--n-draft-max``), derived from its declaration: type,
    default, choices and help (the doc's first paragraph, as plain text)."""
    for spec in specs:
        default = spec.default
        doc = plain_text(spec.doc.split("\n\n")[0].replace("\n", " ")).replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": spec.name, "default": default, "help": f"{doc} (default: {default!r})"}
        if spec.name == "n_draft":
            kwargs["type"] = _draft_length
        elif spec.name == "stop":
            kwargs.update(action="append", default=None, help=f"{doc} (repeatable)")
        elif spec.scalar is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif spec.choices is not None:
            kwargs["choices"] = spec.choices
        elif spec.scalar is not None:
            kwargs["type"] = spec.scalar
        else:
            kwargs["type"] = str  # grammar: a GBNF string
        p.add_argument(spec.flag, *(aliases or {}).get(spec.name, ()), **kwargs)


def _add_session_args(p: argparse.ArgumentParser) -> None:
    from .options import SessionOptions, option_specs

    _add_model_args(p)
    p.add_argument(
        "--draft-model",
        type=path_arg,
        help="MTP sidecar GGUF (mtp-*.gguf); default: the one beside a trunk-only target or in its --hf repository",
    )
    p.add_argument("--no-mtp", action="store_true", help="plain decoding (--n-draft 0)")
    option_flags(p, option_specs(SessionOptions), aliases=SESSION_FLAG_ALIASES)


def _draft_length(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number of tokens, got {text!r}") from None


def _open_session(args: argparse.Namespace) -> MTP:
    from .model import Model
    from .options import SessionOptions
    from .session import MTP

    model = _load_model(args)
    options = {f.name: getattr(args, f.name) for f in dataclasses.fields(SessionOptions)}
    if args.no_mtp:
        options["n_draft"] = 0
    draft: Model | Literal["auto"] = Model.load(args.draft_model) if args.draft_model else "auto"
    return MTP(model, draft_model=draft, **options)


def cmd_generate(args: argparse.Namespace) -> int:
    from .events import DoneEvent, TokenEvent

    session = _open_session(args)
    options = {name: getattr(args, name) for name in GENERATE_FLAGS}
    done = None
    out = sys.stdout
    text: list[str] = []  # --json: the text goes into the JSON
    prompt = session.model.apply_chat_template([("user", args.prompt)]) if args.chat else args.prompt
    for event in session.stream_events(prompt, **options):
        if type(event) is TokenEvent and event.text:
            if args.json:
                text.append(event.text)
            else:
                out.write(event.text)
                out.flush()
        elif isinstance(event, DoneEvent):
            done = event
    assert done is not None
    if args.json:
        report = {"text": "".join(text), "finish_reason": done.finish_reason, "stats": done.stats.to_dict()}
        print(json.dumps(report, indent=2))
    else:
        out.write("\n")
        print(f"\n[{done.finish_reason}] {done.stats.summary()}", file=sys.stderr if args.quiet_stats else sys.stdout)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from .devices import cpu_backend, list_backends, list_devices

    model = _load_model(args)
    sidecar = model.sidecar_path
    info = {
        "path": str(model.path),
        "architecture": model.architecture,
        "description": model.description,
        "n_params": model.n_params,
        "n_vocab": model.n_vocab,
        "n_embd": model.n_embd,
        "n_layer": model.n_layer,
        "n_ctx_train": model.n_ctx_train,
        "n_mtp_heads": model.n_mtp_heads,
        "has_mtp_head": model.has_mtp_head,
        "has_mtp_graph": model.has_mtp_graph,
        "draft_vocab_size": model.draft_vocab_size,
        "chat_template": model.chat_template is not None,
        "draft_model": str(sidecar) if sidecar is not None else None,
        "tool_calls": _tool_path(model),
        "backends": list_backends(),
        "devices": [asdict(d) for d in list_devices()],
        "cpu_backend": asdict(cpu_backend()),
    }
    print(json.dumps(info, indent=2))
    return 0


def _tool_path(model: object) -> str:
    """How chat calls with tools run on this model (see mtp_llm.chat)."""
    from .chat import chat_format
    from .errors import MTPError
    from .model import Model

    assert isinstance(model, Model)
    try:
        fmt = chat_format(model)
    except MTPError as exc:
        return f"unavailable ({exc})"
    if fmt.tool_path == "native":
        return "native (the model's own format, through llama.cpp's chat layer)"
    return "json (the template has no tool-call format: tools in the system prompt, JSON calls)"


def cmd_make_test_models(args: argparse.Namespace) -> int:
    from .gguf.tiny_models import make_tiny_models

    for name, path in make_tiny_models(args.out_dir).items():
        print(f"{name}: {path}")
    return 0


def cmd_split(args: argparse.Namespace) -> int:
    from .gguf.hyv3 import split_mtp

    trunk, sidecar = split_mtp(args.model, args.out_dir)
    print(f"trunk: {trunk}\nsidecar: {sidecar}")
    return 0


def cmd_draft_head(args: argparse.Namespace) -> int:
    from .gguf.draft_head import write_draft_head

    if args.draft_vocab is None:
        if args.corpus:
            raise SystemExit("mtp-llm draft-head: --corpus needs --draft-vocab N")
        path = write_draft_head(args.model, args.out, args.type)
        print(f"draft head ({args.type}): {path}")
        return 0
    import time

    from .draft_vocab import choose_draft_vocab, write_trimmed_head

    start = time.perf_counter()
    source = args.corpus or "the model's own generations"
    ids = choose_draft_vocab(args.model, args.draft_vocab, args.corpus)
    path = write_trimmed_head(args.model, ids, args.out, args.type)
    print(f"draft head ({args.type}, {args.draft_vocab} tokens from {source}, "
          f"{time.perf_counter() - start:.1f} s): {path}")
    return 0


def cmd_rpc_server(args: argparse.Namespace) -> int:
    """Serve this machine's devices with ggml's RPC server until interrupted."""
    import ipaddress
    import os
    import signal
    import socket

    from . import _core

    try:
        host = socket.gethostbyname(args.host)
    except OSError as exc:
        print(f"mtp-llm rpc-server: cannot resolve --host {args.host!r}: {exc}", file=sys.stderr)
        return 2
    if not ipaddress.ip_address(host).is_loopback:
        print(
            f"mtp-llm rpc-server: WARNING: listening on {host}, reachable from other machines. The RPC protocol "
            "has no authentication or encryption: anyone who can connect can read and write this process's "
            "memory buffers and run computations. Only use it on a trusted private network.",
            file=sys.stderr,
        )
    if args.cache_dir:
        os.makedirs(args.cache_dir, exist_ok=True)
    # The server loop runs in native code: let Ctrl-C and SIGTERM end the process at once.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    print(f"mtp-llm rpc-server: serving on {host}:{args.port} (protocol {_core.rpc_protocol_version()})", flush=True)
    _core.rpc_serve(f"{host}:{args.port}", args.cache_dir or "", args.threads or 0)
    return 1  # rpc_serve returns only by raising


def build_parser() -> argparse.ArgumentParser:
    from .options import GenerationOptions, option_specs

    parser = argparse.ArgumentParser(prog="mtp-llm", description=plain_text(__doc__ or ""))
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser(
        "generate",
        help="stream a completion, then print the MTP stats",
        description="Stream a completion, then print the MTP stats. The sampling defaults are the Python API's "
        "(GenerationOptions): --temp 0 samples greedily, which gives the same text on every run.",
    )
    _add_session_args(gen)
    generation = {spec.name: spec for spec in option_specs(GenerationOptions)}
    option_flags(gen, [generation[name] for name in GENERATE_FLAGS])
    gen.add_argument("--chat", action="store_true",
                     help="send the prompt as one user message through the model's chat template")
    gen.add_argument("--json", action="store_true",
                     help="print only JSON: the text, the finish reason and the stats")
    gen.add_argument("--quiet-stats", action="store_true", help="print the stats line to stderr")
    gen.add_argument("prompt")
    gen.set_defaults(func=cmd_generate)

    info = sub.add_parser("info", help="print a model's metadata, the sidecar head MTP would use, and ggml's backends and devices (with memory)")
    _add_model_args(info)
    info.set_defaults(func=cmd_info)

    mk = sub.add_parser("make-test-models", help="write the tiny test models into a directory")
    mk.add_argument("out_dir", type=path_arg)
    mk.set_defaults(func=cmd_make_test_models)

    split = sub.add_parser("split", help="split an embedded hy_v3 model into trunk + mtp- sidecar")
    split.add_argument("model", type=path_arg)
    split.add_argument("out_dir", type=path_arg)
    split.set_defaults(func=cmd_split)

    head = sub.add_parser("draft-head", help="write a model's MTP head as a quantized mtp- sidecar (draft_model)")
    head.add_argument("model", type=path_arg, help="GGUF with an embedded MTP head (or an mtp-*.gguf sidecar)")
    head.add_argument("--type", default="q8_0", choices=["f16", "q8_0", "q4_0"], help="matrix type (default q8_0)")
    head.add_argument("--out", type=path_arg, help="output file or directory (default: mtp-<stem>-<type>.gguf beside the model, "
                      "mtp-<stem>-<type>-v<N>.gguf with --draft-vocab)")
    head.add_argument("--draft-vocab", type=int, metavar="N",
                      help="trim the head to the N most frequent tokens plus every control token (docs/draft-vocab.md)")
    head.add_argument("--corpus", type=path_arg, help="with --draft-vocab: count tokens in this text file "
                      "(default: the model's greedy answers to a built-in prompt set)")
    head.set_defaults(func=cmd_draft_head)

    rpc = sub.add_parser(
        "rpc-server",
        help="serve this machine's devices to other machines' models (ggml RPC; trusted networks only)",
    )
    rpc.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    rpc.add_argument("--port", type=int, default=50052, help="TCP port (default 50052)")
    rpc.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    rpc.add_argument("--cache-dir", type=path_arg, default=None, help="cache large tensors here, so a reload skips sending them")
    rpc.set_defaults(func=cmd_rpc_server)

    try:
        from .bench.cli import add_bench_parser
    except ImportError:
        pass
    else:
        add_bench_parser(sub)
    for command in sub.choices.values():  # what in_cli_terms words an error with
        command.set_defaults(cli_flags={a.dest: a.option_strings[0] for a in command._actions
                                        if a.option_strings and a.dest != "help"})
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except MTPError as exc:
        print(f"mtp-llm: error: {in_cli_terms(str(exc).rstrip(), args.cli_flags)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
