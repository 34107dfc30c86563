"""``mtp-llm bench``: MTP against plain decoding on the same model, prompts and threads.

Configurations run interleaved (plain, n_draft=1, 2, ..., auto, then again) after a
warm-up, so machine noise hits every configuration alike. Each repetition
generates ``--tokens`` tokens greedily for every prompt; a repetition's decode
speed is its tokens over its decode time. The report gives medians and min-max
over repetitions, the ratio to plain decoding, and the efficiency
``speedup / (1 + acceptance_rate * n_draft)``: the share of the ideal speedup
that verify, draft and checkpoint overheads leave (for ``auto``, n_draft is the
mean draft length it chose).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..options import DraftLength
from .common import DEFAULT_PROMPTS, draft_lengths, load_prompts

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]


@dataclasses.dataclass
class ConfigResult:
    """Measurements of one configuration (n_draft = 0 is plain decoding)."""

    n_draft: DraftLength
    decode_tps: list[float] = dataclasses.field(default_factory=list)
    prompt_tps: list[float] = dataclasses.field(default_factory=list)
    ttft_ms: list[float] = dataclasses.field(default_factory=list)
    python_us_per_token: list[float] = dataclasses.field(default_factory=list)
    acceptance_rate: float = 0.0
    mean_accepted_length: float = 0.0
    per_position: list[float] = dataclasses.field(default_factory=list)
    mean_draft: float = 0.0
    """Draft tokens per iteration (the fixed length, or what ``auto`` chose on average)."""
    timing_share: dict[str, float] = dataclasses.field(default_factory=dict)
    peak_rss_mb: float = 0.0

    def median(self, name: str) -> float:
        values = getattr(self, name)
        return statistics.median(values) if values else 0.0

    def span(self, name: str) -> tuple[float, float]:
        values = getattr(self, name)
        return (min(values), max(values)) if values else (0.0, 0.0)


def _peak_rss_mb() -> float:
    """This process's peak resident memory in MiB; 0 where the OS does not say (Windows has no ``resource``)."""
    if resource is None:
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (1024.0 * 1024.0) if sys.platform == "darwin" else peak / 1024.0


class _TimedNative:
    """Wraps a native session to add up the time spent inside begin() and step()."""

    def __init__(self, native: Any) -> None:
        self._native = native
        self.seconds = 0.0

    def begin(self, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._native.begin(*args)
        finally:
            self.seconds += time.perf_counter() - start

    def step(self, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._native.step(*args)
        finally:
            self.seconds += time.perf_counter() - start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._native, name)


def _run_once(
    session: Any, prompts: list[str], tokens: int, temp: float = 0.0, seed: int | None = None
) -> tuple[float, float, float, float, Any]:
    """Generate for every prompt; return decode t/s, prompt t/s, mean TTFT (ms), Python us/token, stats.

    Python time per token is the wall time of consuming ``stream_events`` minus the time
    spent inside the native begin()/step() calls, divided by the tokens.
    """
    from ..events import DoneEvent

    session.reset_stats()
    timed = _TimedNative(session._native)
    session._native = timed
    wall = 0.0
    try:
        for i, prompt in enumerate(prompts):
            start = time.perf_counter()
            sampling = {"temp": temp} if seed is None else {"temp": temp, "seed": seed + i}
            for event in session.stream_events(prompt, max_tokens=tokens, **sampling):
                if type(event) is DoneEvent:
                    break
            wall += time.perf_counter() - start
    finally:
        session._native = timed._native
    s = session.stats()
    python_us = max(0.0, wall - timed.seconds) * 1e6 / max(1, s.tokens_emitted)
    ttft_ms = s.time_to_first_token_us / 1000.0
    return s.tokens_per_sec, s.prompt_tokens_per_sec, ttft_ms, python_us, s


def run_bench(
    model_path: str | None,
    n_drafts: Sequence[DraftLength],
    prompts: list[str],
    tokens: int,
    threads: int | None,
    reps: int,
    warmup: int,
    progress: bool = True,
    rollback: str = "auto",
    flash_attn: bool | None = None,
    draft_head: str | None = None,
    n_gpu_layers: int = 0,
    temp: float = 0.0,
    seed: int | None = None,
) -> tuple[list[ConfigResult], dict[str, Any]]:
    from ..model import Model
    from ..session import MTP

    model = Model.load(model_path, n_gpu_layers=n_gpu_layers) if model_path else Model.load_default(
        n_gpu_layers=n_gpu_layers
    )
    draft = None
    if draft_head:  # the MTP rows draft with the model's head written as a sidecar of this type
        from ..default_model import cache_dir
        from ..gguf.draft_head import write_draft_head

        (cache_dir() / "draft-heads").mkdir(parents=True, exist_ok=True)
        draft = Model.load(write_draft_head(model.path, cache_dir() / "draft-heads", draft_head))
    n_ctx = max(512, tokens + 256)
    configs: list[DraftLength] = [0, *[k for k in n_drafts if k != 0]]
    sessions = {
        k: MTP(model, draft_model=draft, n_draft=k, n_ctx=n_ctx, n_threads=threads, rollback=rollback,
               flash_attn=flash_attn)
        for k in configs
    }
    results = {k: ConfigResult(n_draft=k) for k in configs}

    total = (warmup + reps) * len(configs)
    bar = _progress(total, progress)
    for rep in range(warmup + reps):
        for k in configs:
            decode, prompt_tps, ttft, py_us, stats = _run_once(sessions[k], prompts, tokens, temp, seed)
            bar.update(1)
            if rep < warmup:
                continue
            r = results[k]
            r.decode_tps.append(decode)
            r.prompt_tps.append(prompt_tps)
            r.ttft_ms.append(ttft)
            r.python_us_per_token.append(py_us)
            r.acceptance_rate = stats.acceptance_rate
            r.mean_accepted_length = stats.mean_accepted_length
            r.per_position = list(stats.acceptance_rate_per_position)
            r.mean_draft = stats.drafts_generated / max(1, stats.iters)
            t = stats.timing_us
            total_us = max(1, t.total)
            r.timing_share = {
                name: getattr(t, name) / total_us for name in ("draft", "verify", "sample", "ckpt", "other")
            }
            r.peak_rss_mb = _peak_rss_mb()
    bar.close()
    meta = {
        "model": str(model.path),
        "architecture": model.architecture,
        "n_params": model.n_params,
        "tokens": tokens,
        "prompts": len(prompts),
        "threads": sessions[configs[-1]].n_threads,  # what the engine ran on (all cores when unset)
        "reps": reps,
        "warmup": warmup,
        "rollback": sessions[configs[-1]].rollback_mode,
        "mtp_driver": sessions[configs[-1]].mtp_driver,
        "flash_attn": {None: "default", True: "on", False: "off"}[flash_attn],
        "draft_head": str(draft.path) if draft else "embedded",
        "temp": temp,
        "seed": seed,
    }
    return [results[k] for k in configs], meta


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm  # type: ignore[import-untyped]
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc="bench", unit="run")


def conditional_rates(per_position: Sequence[float]) -> list[float]:
    """Acceptance at each draft position given the earlier drafts were accepted.

    The engine's per-position rate divides the acceptances at position i by every drafted
    position i, so it reads P(drafts 1..i all accepted); the conditional rate is the ratio
    of neighbours (what a calibrated synthetic model is built to, per position).
    """
    out, before = [], 1.0
    for p in per_position:
        out.append(p / before if before > 0 else 0.0)
        before = p
    return out


def to_rows(results: list[ConfigResult]) -> list[dict[str, Any]]:
    plain = results[0].median("decode_tps") or 1.0
    rows = []
    for r in results:
        speedup = r.median("decode_tps") / plain
        ideal = 1.0 + r.acceptance_rate * (r.mean_draft if r.n_draft == "auto" else float(r.n_draft))
        lo, hi = r.span("decode_tps")
        rows.append(
            {
                "config": "plain" if r.n_draft == 0 else f"mtp n_draft={r.n_draft}",
                "n_draft": r.n_draft,
                "decode_tps_median": round(r.median("decode_tps"), 1),
                "decode_tps_min": round(lo, 1),
                "decode_tps_max": round(hi, 1),
                "speedup": round(speedup, 3),
                "acceptance_rate": round(r.acceptance_rate, 3),
                "mean_accepted_length": round(r.mean_accepted_length, 3),
                "efficiency": round(speedup / ideal, 3) if r.n_draft else None,
                "prompt_tps_median": round(r.median("prompt_tps"), 1),
                "ttft_ms_median": round(r.median("ttft_ms"), 2),
                "python_us_per_token": round(r.median("python_us_per_token"), 2),
                "acceptance_per_position": [round(p, 3) for p in r.per_position],
                "acceptance_per_position_conditional": [round(p, 3) for p in conditional_rates(r.per_position)],
                "timing_share": {k: round(v, 3) for k, v in r.timing_share.items()},
                "peak_rss_mb": round(r.peak_rss_mb, 1),
            }
        )
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| config | decode t/s (median, min-max) | x plain | acceptance | per position, given the previous "
        "| mean acc. len | efficiency "
        "| prompt t/s | TTFT ms | Python us/token | time: draft/verify/sample/ckpt/other | peak RSS MB |"
    )
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        share = r["timing_share"]
        shares = "/".join(f"{share.get(k, 0):.2f}" for k in ("draft", "verify", "sample", "ckpt", "other"))
        eff = "-" if r["efficiency"] is None else f"{r['efficiency']:.2f}"
        lines.append(
            f"| {r['config']} | {r['decode_tps_median']:.1f} ({r['decode_tps_min']:.1f}-{r['decode_tps_max']:.1f}) "
            f"| {r['speedup']:.2f} | {r['acceptance_rate']:.3f} "
            f"| {'/'.join(f'{p:.2f}' for p in r['acceptance_per_position_conditional']) or '-'} "
            f"| {r['mean_accepted_length']:.2f} | {eff} "
            f"| {r['prompt_tps_median']:.1f} | {r['ttft_ms_median']:.2f} | {r['python_us_per_token']:.2f} "
            f"| {shares} | {r['peak_rss_mb']:.0f} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    plain = rows[0]["decode_tps_median"]
    mtp = [r for r in rows if r["n_draft"] and r["n_draft"] != "auto"]
    xs = [r["n_draft"] for r in mtp]
    ax1.errorbar(
        xs,
        [r["decode_tps_median"] for r in mtp],
        yerr=[
            [r["decode_tps_median"] - r["decode_tps_min"] for r in mtp],
            [r["decode_tps_max"] - r["decode_tps_median"] for r in mtp],
        ],
        marker="o",
        capsize=4,
        label="MTP",
    )
    ax1.axhline(plain, color="grey", linestyle="--", label=f"plain ({plain:.0f} t/s)")
    for r in rows:
        if r["n_draft"] == "auto":
            ax1.axhline(r["decode_tps_median"], color="green", linestyle=":",
                        label=f"auto ({r['decode_tps_median']:.0f} t/s)")
    ax1.set_xlabel("n_draft")
    ax1.set_ylabel("decode tokens/s")
    ax1.set_xticks(xs)
    ax1.legend()
    ax1.set_title("decode throughput")
    for r in [r for r in rows if r["n_draft"]]:
        conditional = r["acceptance_per_position_conditional"]
        cumulative = r["acceptance_per_position"]
        line = ax2.plot(range(1, len(conditional) + 1), conditional, marker="o", label=f"n_draft={r['n_draft']}")
        ax2.plot(range(1, len(cumulative) + 1), cumulative, marker=".", linestyle=":", color=line[0].get_color())
    ax2.set_xlabel("draft position")
    ax2.set_xticks(range(1, max((len(r["acceptance_per_position"]) for r in rows), default=1) + 1))
    ax2.set_ylabel("acceptance rate")
    ax2.set_ylim(0, 1.05)
    ax2.plot([], [], color="grey", label="given the drafts before it")
    ax2.plot([], [], color="grey", linestyle=":", label="with the drafts before it (cumulative)")
    ax2.legend(fontsize="small")
    ax2.set_title("acceptance per draft position")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_wrappers(
    model_path: str | None, n_draft: int, prompts: list[str], tokens: int, threads: int | None, reps: int
) -> list[dict[str, Any]]:
    """End-to-end tokens/s through each integration's streaming path against the raw engine stream.

    All paths run on one shared session, interleaved, greedy, ``tokens`` tokens per prompt.
    """
    from .._integration import EngineSpec, chat_prompt, get_session, resolve_chat_template
    from ..default_model import default_model_path
    from ..langchain import MTPLLM as LangChainLLM
    from ..langchain import ChatMTP
    from ..llamaindex import MTPLLM as LlamaIndexLLM
    from ..options import SessionOptions

    path = model_path or str(default_model_path())
    options = SessionOptions(n_draft=n_draft, n_ctx=2048, n_threads=threads)
    session = get_session(EngineSpec(model_path=path, session_options=options))
    lc_llm = LangChainLLM(session=session, max_tokens=tokens, temperature=0)
    lc_chat = ChatMTP(session=session, max_tokens=tokens, temperature=0)
    li_llm = LlamaIndexLLM(model_path=path, n_draft=n_draft, n_ctx=2048, n_threads=threads, max_tokens=tokens,
                           temperature=0)
    li_session = li_llm.session

    def raw(prompt: str) -> None:
        for _ in session.stream_events(prompt, max_tokens=tokens, temp=0):
            pass

    def raw_chat(prompt: str) -> None:
        # The prompt ChatMTP renders, so both generate the same continuation.
        rendered = chat_prompt(session.model, [("user", prompt)], resolve_chat_template(session.model, None))
        raw(rendered)

    paths: dict[str, tuple[Any, Any]] = {
        "raw engine stream_events": (raw, session),
        "LangChain MTPLLM.stream": (lambda p: [c for c in lc_llm.stream(p)], session),
        "raw engine, chat-rendered prompt": (raw_chat, session),
        "LangChain ChatMTP.stream": (lambda p: [c for c in lc_chat.stream(p)], session),
        "LlamaIndex stream_complete": (lambda p: [c for c in li_llm.stream_complete(p)], li_session),
    }
    speeds: dict[str, list[float]] = {name: [] for name in paths}
    for rep in range(reps + 1):
        for name, (run, owner) in paths.items():
            emitted, wall = 0, 0.0
            for prompt in prompts:
                start = time.perf_counter()
                run(prompt)
                wall += time.perf_counter() - start
                emitted += owner.last_stats.tokens_emitted
            if rep:  # the first round is warm-up
                speeds[name].append(emitted / wall)
    base = statistics.median(speeds["raw engine stream_events"])
    chat_base = statistics.median(speeds["raw engine, chat-rendered prompt"])
    return [
        {
            "path": name,
            "tokens_per_sec_median": round(statistics.median(v), 1),
            "ratio_to_raw": round(statistics.median(v) / (chat_base if "chat" in name.lower() else base), 3),
        }
        for name, v in speeds.items()
    ]


def cmd_costs(args: argparse.Namespace, model_path: str | None) -> int:
    from ..costs import markdown, measure_costs, weight_bytes
    from ..model import Model

    from ..options import SessionOptions

    # the longest draft to time: "auto" drafts up to the session default's n_draft_max
    longest = max(k if k != "auto" else SessionOptions().n_draft_max for k in draft_lengths(args.n_draft))
    model = Model.load(model_path) if model_path else Model.load_default()
    if getattr(args, "draft_vocab", None):
        return cmd_costs_draft_vocab(args, model, longest or 4)
    curve = measure_costs(
        model, n_draft=longest or 4, n_threads=args.threads,
        flash_attn={"default": None, "on": True, "off": False}[args.flash_attn],
        fill=args.fill, reps=args.cost_reps, warmup=args.warmup + 2,
    )
    weights = weight_bytes(model.path)
    mark = None
    measured = None
    if getattr(args, "synthetic", None):
        mark = 1.0 if args.acceptance is None else args.acceptance
    elif curve.n_draft:
        # The model's own acceptance on the prompts, for its row of the table.
        from ..session import MTP

        session = MTP(model, n_draft=curve.n_draft, n_ctx=args.tokens + 512, n_threads=args.threads)
        for prompt in load_prompts(args.prompts) if args.prompts else DEFAULT_PROMPTS:
            session.generate(prompt, max_tokens=args.tokens, temp=0)
        measured = conditional_rates(session.stats().acceptance_rate_per_position)
        session.close()
    table = markdown(curve, weights, mark=mark, measured=measured)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "costs.md").write_text(table + "\n")
    (out / "costs.json").write_text(
        json.dumps({**curve.to_dict(), "weights": weights, "measured_acceptance": measured}, indent=2)
    )
    print(f"\nwrote {out / 'costs.md'}, {out / 'costs.json'}")
    return 0




def cmd_costs_draft_vocab(args: argparse.Namespace, model: Any, n_draft: int) -> int:
    """``--costs --draft-vocab N``: the head's passes with the full and a trimmed LM head (both sidecars
    of one type, measured alternately), and the expected speedups of each."""
    from .. import draft_vocab as dv
    from ..costs import markdown, measure_costs, median_curve
    from ..gguf.draft_head import write_draft_head
    from ..model import Model
    from .common import SYNTHETIC_PROMPTS

    htype = args.draft_head or "q8_0"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    # Which tokens to keep: the model's greedy output on the bench's prompts (a synthetic model's
    # token cycle spans its whole vocabulary, so its "frequent" tokens are the ones it walks).
    prompts = load_prompts(args.prompts) if args.prompts else (
        SYNTHETIC_PROMPTS[:8] if getattr(args, "synthetic", None) else list(dv.PROMPTS))
    counts = dv.token_frequencies(model, prompts=prompts, max_tokens=args.tokens + n_draft, n_threads=args.threads)
    ids = dv.draft_vocab_ids(counts, args.draft_vocab, dv.special_token_ids(model.path))
    heads = {
        "full": Model.load(write_draft_head(model.path, out, htype)),
        "trimmed": Model.load(dv.write_trimmed_head(model.path, ids, out, htype)),
    }
    print(f"heads written in {time.perf_counter() - start:.1f} s (token counts from {len(prompts)} prompts)")
    curves: dict[str, list[Any]] = {name: [] for name in heads}
    for _ in range(3):  # alternated, so the machine's load hits both alike
        for name, head in heads.items():
            curves[name].append(measure_costs(
                model, draft_model=head, n_draft=n_draft, n_threads=args.threads,
                flash_attn={"default": None, "on": True, "off": False}[args.flash_attn],
                fill=args.fill, reps=max(3, args.cost_reps // 3), warmup=args.warmup + 1,
            ))
    med = {name: median_curve(c) for name, c in curves.items()}
    mark = (1.0 if args.acceptance is None else args.acceptance) if getattr(args, "synthetic", None) else 0.8
    lines = [
        f"Head passes, full vs trimmed LM head ({htype} sidecars; median of 3 alternated measurements):",
        "",
        ("| head | vocabulary | one head pass ms | x one-row target pass | draft 1 / fused draft "
         f"{n_draft} ms | best speedup at acceptance {mark:.2f} |"),
        "|---|---|---|---|---|---|",
    ]
    for name, c in med.items():
        k, best = c.best(mark)
        fused = f"{c.fused_ms[-1][0]:.3f}" if c.fused_ms else "-"
        lines.append(
            f"| {name} | {heads[name].draft_vocab_size} | {c.head_pass_ms():.3f} | {c.head_pass_ms() / c.one_row_ms:.2f} "
            f"| {c.draft_ms[0]:.3f} / {fused} | n_draft={k}: {best:.2f}x |"
        )
    ratio = med["trimmed"].head_pass_ms() / med["full"].head_pass_ms()
    lines += ["", f"Trimmed / full head pass: {ratio:.2f}x.", "", markdown(med["trimmed"], mark=mark)]
    table = "\n".join(lines)
    print(table)
    (out / "costs-draft-vocab.md").write_text(table + "\n")
    (out / "costs-draft-vocab.json").write_text(json.dumps(
        {name: {**c.to_dict(), "draft_vocab_size": heads[name].draft_vocab_size} for name, c in med.items()}, indent=2))
    print(f"\nwrote {out / 'costs-draft-vocab.md'}, {out / 'costs-draft-vocab.json'}")
    return 0
