"""Self-distillation data: SmolLM2-135M-Instruct's own greedy answers to the train prompts.

Plain decoding through the engine (no head), ``--parallel`` generations batched in one session,
one engine thread. Appends one JSON line per prompt to ``WORK/gen.jsonl``:
``{"i": index, "tokens": prompt + answer token ids, "n_prompt": prompt length}``; a rerun skips the
indices already there (resumable: kill it at any time).

    nice -n 19 .venv/bin/python tools/train_smollm2_head/gen_data.py --limit 3000

``--first K`` answers the prompts from index K on first (then the earlier unanswered ones).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prompts import heldout_prompts, train_prompts  # noqa: E402

DEFAULT_WORK = Path(__file__).resolve().parents[2] / "build" / "smollm2_head"


def answers_path(work: Path, which: str = "train") -> Path:
    """The answers of the train prompts (``gen.jsonl``) or of the held-out ones (``gen-heldout.jsonl``)."""
    return work / ("gen.jsonl" if which == "train" else "gen-heldout.jsonl")


def hidden_dir(work: Path, which: str = "train") -> Path:
    """Where hidden.py writes the shards of those answers (``hidden/`` or ``hidden-heldout/``)."""
    return work / ("hidden" if which == "train" else "hidden-heldout")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--limit", type=int, default=3000, help="prompts to answer (the first N of the shuffled list)")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--set", choices=("train", "heldout"), default="train",
                    help="heldout: held-out prompts 20.. (evaluate.py uses the first 20) into gen-heldout.jsonl, "
                         "train.py's validation")
    ap.add_argument("--model", type=Path, default=None,
                    help="generate with this GGUF instead of the Q4_1 source (requant.py's Q8_0 copy: batched "
                         "decoding 1.5-3x faster here; train.py then takes the Q4_1 trunk's own argmax as target)")
    ap.add_argument("--part", type=str, default="0/1",
                    help="K/N: answer only prompts i with i %% N == K (N processes of 1 thread each share the "
                         "file: on a shared machine, ggml's threads of one process stall each other less)")
    ap.add_argument("--first", type=int, default=0,
                    help="answer the prompts from index FIRST on before the earlier ones (e.g. 9480: the third "
                         "prompt block before the rest of TEMPLATES_TRAIN_2)")
    args = ap.parse_args(argv)
    part, parts = (int(v) for v in args.part.split("/"))

    from mtp_llm import MTP, Model
    from mtp_llm.smollm2 import source_path

    args.work_dir.mkdir(parents=True, exist_ok=True)
    out = answers_path(args.work_dir, args.set)
    done: set[int] = set()
    if out.exists():
        for line in out.read_text().splitlines():
            try:
                done.add(int(json.loads(line)["i"]))
            except (ValueError, KeyError):
                pass  # a line cut by a kill: its prompt is answered again
    prompts = train_prompts()[: args.limit] if args.set == "train" else heldout_prompts(20 + args.limit)[20:]
    todo = [i for i in range(len(prompts)) if i not in done and i % parts == part]
    todo = [i for i in todo if i >= args.first] + [i for i in todo if i < args.first]
    print(f"{len(done)} done, {len(todo)} to go", flush=True)

    model = Model.load(args.model or source_path(), load_mtp=False)
    session = MTP(model, draft_model=None, n_draft=0, n_parallel=args.parallel, n_threads=args.threads,
                  n_ctx=args.parallel * 512)
    lock = threading.Lock()
    t0 = time.time()
    n_tok = 0

    def answer(i: int) -> None:
        nonlocal n_tok
        text = model.apply_chat_template([("user", prompts[i])])
        ptoks = session.tokenize_prompt(text)
        ids = [e.id for e in session.stream_events(ptoks, max_tokens=args.max_tokens, temp=0)
               if type(e).__name__ == "TokenEvent"]
        with lock, out.open("a") as fh:
            fh.write(json.dumps({"i": i, "tokens": ptoks + ids, "n_prompt": len(ptoks)}) + "\n")
            n_tok += len(ids)
            k = len(done) + 1
            done.add(i)
            if k % 20 == 0:
                dt = time.time() - t0
                print(f"{k} answered, {n_tok} tokens this run, {n_tok / dt:.1f} tok/s", flush=True)

    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(answer, todo))
    session.close()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
