"""What the automatic draft length did, round by round: record a run with the engine's controller
trace (``MTP_LLM_CONTROLLER_TRACE=path``), then show it.

    python benchmarks/controller_trace.py record --model M.gguf --streams 4 --calls 5 --out /tmp/t.txt
    python benchmarks/controller_trace.py show /tmp/t.txt

``show`` prints the steady round times per (streams, length) and the choices in order, one line per
call: ``[k<why>/<streams>]`` then each stream's outcome (``+`` all drafts accepted, ``-`` not, ``.`` plain);
why: ``n`` no room to draft (context, max_tokens), ``u`` plain time not measured yet, ``t`` a try of one
draft more, ``b`` the rest of a burst, ``p`` a probe from plain decoding, ``e`` a try of a neighbouring
length, ``z`` plain near the calls' ends (too few tokens left to repay the head's catch-up), ``j`` plain while
a caller waits to join the next round, nothing: the best measured.
The trace's lines: ``choose STREAMS THREADS LIMIT CHOICE WHY REMAINING QUEUED``, ``accept DRAFTED ACCEPTED``,
``cost DRAFTED STREAMS THREADS US STEADY`` (US: the round's period, from its start to the next round's; 0: no sample),
``compute US`` (the compute part of the round of the ``cost`` line after it), ``relative K J STREAMS PERMILLE`` (K's
cost against J's, per mille, from rounds taken one after the other), ``interrupt`` (a new call), ``skip`` (a thread probe round).
Every session made while the variable is set appends to the file, so record one session per file (a
session on a fixed length writes choices without a reason).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
from pathlib import Path

WHY = {
    "no-room": "n",
    "unmeasured": "u",
    "burst": "b",
    "try": "t",
    "best": "",
    "probe": "p",
    "explore": "e",
    "ending": "z",
    "joining": "j",
}


def record(model_path: str, streams: int, threads: int | None, calls: int, tokens: int, out: Path) -> None:
    """`calls` calls of `streams` concurrent greedy streams on one n_draft="auto" session, traced to `out`."""
    out.unlink(missing_ok=True)
    os.environ["MTP_LLM_CONTROLLER_TRACE"] = str(out)  # read when the session's controller is made
    from mtp_llm import MTP, Model
    from mtp_llm.bench.parallel import _streams

    session = MTP(Model.load(model_path), n_draft="auto", n_parallel=streams,
                  n_ctx=streams * (tokens + 256), n_threads=threads)
    prompts = [f"Once upon a time ({i})" for i in range(streams)]
    for call in range(calls):
        wall, _ = _streams(session, prompts, tokens)
        print(f"call {call}: {streams * tokens / wall:.1f} tokens/s")


def show(path: Path) -> None:
    steady: dict[tuple[int, int, int], list[int]] = collections.defaultdict(list)
    computes: dict[tuple[int, int, int], list[int]] = collections.defaultdict(list)
    calls: list[list[str]] = [[]]
    compute = 0
    for line in path.read_text().splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] == "compute":
            compute = int(f[1])
            continue
        if f[0] == "choose":
            why = f[5] if len(f) > 5 else ""  # a session on a fixed length writes no reason
            calls[-1].append(f" [{f[4]}{WHY.get(why, '?')}/{f[1]}]")
        elif f[0] == "accept":
            drafted, accepted = int(f[1]), int(f[2])
            calls[-1].append("." if drafted == 0 else "+" if accepted >= drafted else "-")
        elif f[0] == "cost":
            if f[5] == "1":
                steady[(int(f[2]), int(f[3]), int(f[1]))].append(int(f[4]))
                if compute:
                    computes[(int(f[2]), int(f[3]), int(f[1]))].append(compute)
            compute = 0
        elif f[0] == "interrupt" and calls[-1]:
            calls.append([])
    print("streams threads length: steady rounds, median us (min-max) [median compute us: the rest is between rounds]")
    for (s, t, k), v in sorted(steady.items()):
        c = computes.get((s, t, k))
        extra = f" [{statistics.median(c):.0f}]" if c else ""
        print(f"  {s} {t} {k}: {len(v)}, {statistics.median(v):.0f} ({min(v)}-{max(v)}){extra}")
    for i, c in enumerate(calls):
        print(f"call {i}:{''.join(c)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--model", required=True)
    r.add_argument("--streams", type=int, default=2)
    r.add_argument("--threads", type=int, default=None)
    r.add_argument("--calls", type=int, default=5)
    r.add_argument("--tokens", type=int, default=96)
    r.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("show")
    s.add_argument("trace", type=Path)
    args = ap.parse_args()
    if args.cmd == "record":
        record(args.model, args.streams, args.threads, args.calls, args.tokens, args.out)
    else:
        show(args.trace)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
