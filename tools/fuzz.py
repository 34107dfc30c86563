"""Fuzz campaigns: no input a user or a model file supplies may end or hang the process.

    .venv/bin/python tools/fuzz.py --seconds 600 --seed 1                # every campaign, 10 min each
    .venv/bin/python tools/fuzz.py --campaign grammar --cases 10000 --seed 7
    .venv/bin/python tools/fuzz.py --replay build/fuzz-findings/*              # kept findings, each alone

Campaigns (structure-aware generators in tests/helpers/input_fuzz.py and tests/helpers/gguf_fuzz.py):

* ``template``: chat templates built from the Jinja constructs of the pinned tree's templates,
  nested and mutated, mutants of those templates, and hostile shapes (deep nesting, recursion,
  huge strings, long loops), each loaded as ``chat_template=`` and rendered;
* ``grammar``: GBNF grammars (nested groups, repetitions, classes, rule chains, mutants), each
  used for a 2-token generation;
* ``schema``: JSON schemas (each turned into a grammar and generated with) and tool lists (each
  rendered with a tiny model of one of ten pinned chat templates and generated with);
* ``history``: chat histories (odd roles and contents, tool calls with arguments nested up to
  30,000 deep) rendered with those templates, and model output fed to the turn's parser;
* ``gguf`` and ``gguf-meta``: GGUF mutants (any metadata value or tensor-info field, or
  well-typed hyperparameter edge values), each loaded, read, tokenized and generated with.

Cases run in child processes, ``--batch`` to a child (each case's outcome is reported before the
next starts; a child that dies is restarted after the case it died on, which is then run alone to
confirm). A case that gives no outcome within ``--hang`` seconds (10) is a hang: the child is
killed. Reported per campaign: executions, outcomes (ok, each MTPError class, any other
exception), deaths (a signal or an abort: unique by signal and first error line) and hangs; inputs
that killed or hung a child go to ``--keep``. Exit status 1 when a campaign had a death or a hang.
One script because every campaign shares the driver (batches, isolation, hang detection, report);
the GGUF campaigns are those of the former fuzz_gguf.py.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CAMPAIGNS = ["template", "grammar", "schema", "history", "gguf", "gguf-meta"]
CHAT_MODELS = ["Qwen-Qwen3-0.6B", "meta-llama-Llama-3.1-8B-Instruct", "Mistral-Small-3.2-24B-Instruct-2506",
               "openai-gpt-oss-120b", "google-gemma-4-31B-it", "Kimi-K2-Instruct", "GLM-4.6", "Qwen3-Coder",
               "deepseek-ai-DeepSeek-V3.1", "LFM2-8B-A1B"]
TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}


# ------------------------------------------------------------------- worker --


def worker() -> None:
    """Run the cases on stdin (a config line, then one case a line); one outcome line each."""
    import mtp_llm
    from mtp_llm import MTP, Model
    from mtp_llm.chat import ChatFormat, json_schema_grammar
    from tests.helpers.input_fuzz import build_deep

    config = json.loads(sys.stdin.readline())
    campaign = config["campaign"]
    hi = [{"role": "user", "content": "hi"}]
    model = session = None
    if campaign in ("template", "grammar", "schema"):
        model = Model.load(config["random"])
        session = MTP(model, n_draft=2, n_threads=1, n_ctx=256)
    chat_models: dict[int, Any] = {}

    def chat(index: int) -> Any:
        if index not in chat_models:
            m = Model.load(config["chat_models"][index])
            chat_models[index] = (m, ChatFormat(m), MTP(m, n_draft=0, n_threads=1, n_ctx=512))
        return chat_models[index]

    def run(case: dict[str, Any]) -> None:
        if campaign == "template":
            fmt = ChatFormat(model, case["template"])  # type: ignore[arg-type]
            fmt.render(build_deep(case["messages"]) if case.get("messages") else hi)
        elif campaign == "grammar":
            session.generate("Hi", max_tokens=2, temp=0, grammar=case["grammar"])  # type: ignore[union-attr]
        elif campaign == "schema" and "schema" in case:
            grammar = json_schema_grammar(build_deep(case["schema"]))
            session.generate("Hi", max_tokens=2, temp=0, grammar=grammar)  # type: ignore[union-attr]
        elif campaign == "schema":
            _, fmt, chat_session = chat(case["model"])
            turn = fmt.turn(hi, tools=build_deep(case["tools"]), tool_choice=case["tool_choice"])
            options = turn.options(mtp_llm.GenerationOptions(max_tokens=2, temp=0))
            chat_session.generate(turn.prompt, options=options)
        elif campaign == "history":
            _, fmt, _ = chat(case["model"])
            turn = fmt.turn(build_deep(case["messages"]), tools=[TOOL] if case["tools"] else ())
            turn.feed(case["output"])
            turn.finish("eog")
        else:  # gguf, gguf-meta
            m = Model.load(case["path"])
            (m.architecture, m.description, m.chat_template, m.has_mtp_graph)
            m.detokenize(m.tokenize("Hello world"))
            MTP(m, n_draft=2, n_threads=1, n_ctx=256).generate("Hello", max_tokens=4, temp=0)

    for line in sys.stdin:
        case = json.loads(line)
        try:
            run(case)
            outcome = "ok"
        except mtp_llm.MTPError as exc:
            outcome = type(exc).__name__
        except Exception as exc:  # noqa: BLE001 - reported: every bad input should be an MTPError
            outcome = "other:" + type(exc).__name__
        print(outcome, flush=True)


# ------------------------------------------------------------------- driver --


class Campaign:
    def __init__(self, name: str, args: argparse.Namespace, config: dict[str, Any], tmp: Path) -> None:
        self.name, self.args, self.config, self.tmp = name, args, config, tmp
        self.rng = random.Random(f"{args.seed}-{name}")
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.deaths: dict[str, tuple[int, str]] = {}  # signature -> (count, kept input)
        self.hangs: list[str] = []
        self.executions = 0
        self.real_templates: list[str] = []
        if name == "template":
            from tests.helpers.input_fuzz import template_sources
            from tests.helpers.templates import _llama_cpp_tree

            self.real_templates = template_sources(_llama_cpp_tree())
        self.batch_no = 0

    def cases(self, n: int) -> list[dict[str, Any]]:
        from tests.helpers import input_fuzz as gen

        if self.name in ("gguf", "gguf-meta"):
            from tests.helpers.gguf_fuzz import mutate_gguf, mutate_metadata

            mutate = mutate_metadata if self.name == "gguf-meta" else mutate_gguf
            self.batch_no += 1
            paths = mutate(self.args.model, self.tmp, n, self.rng.randrange(2**31))
            return [{"path": str(p)} for p in paths]
        out = []
        for _ in range(n):
            if self.name == "template":
                case = gen.template_case(self.rng, self.real_templates)
            elif self.name == "grammar":
                case = gen.grammar_case(self.rng)
            elif self.name == "schema":
                case = gen.schema_case(self.rng)
            else:
                case = gen.history_case(self.rng)
            case["model"] = self.rng.randrange(len(CHAT_MODELS))
            out.append(case)
        return out

    def run_batch(self, cases: list[dict[str, Any]], alone: bool = False) -> None:
        """Run cases in children until each has an outcome, a death or a hang."""
        while cases:
            done, death = self._child(cases)
            cases = cases[done:]
            if death is None:
                return
            kind, detail = death
            case, cases = cases[0], cases[1:]
            if kind == "death" and not alone:  # confirmed alone, else it needed the batch's earlier cases
                finished, alone_death = self._child([case])
                if finished:
                    detail = f"only after earlier cases: {detail}"
                else:
                    kind, detail = alone_death or (kind, detail)
            if not (kind == "death" and detail.startswith("only after")):
                self.executions += 1
            if kind == "hang":
                self.hangs.append(self._keep(case, "hang"))
            else:
                count, kept = self.deaths.get(detail, (0, ""))
                self.deaths[detail] = (count + 1, kept or self._keep(case, "death"))

    def _keep(self, case: dict[str, Any], kind: str) -> str:
        keep = Path(self.args.keep)
        keep.mkdir(parents=True, exist_ok=True)
        path = keep / f"{self.name}-{kind}-{self.args.seed}-{len(list(keep.iterdir()))}.json"
        if "path" in case:
            target = path.with_suffix(".gguf")
            target.write_bytes(Path(case["path"]).read_bytes())
            return str(target)
        from tests.helpers.input_fuzz import dumps

        path.write_text(dumps(case))
        return str(path)

    def _child(self, cases: list[dict[str, Any]]) -> tuple[int, tuple[str, str] | None]:
        """Run cases in one child: how many gave an outcome, and how it ended if it did not finish."""
        from tests.helpers.input_fuzz import dumps

        with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as inp:
            inp.write(json.dumps({"campaign": self.name, **self.config}) + "\n")
            for case in cases:
                inp.write(dumps(case) + "\n")
            inp.close()
            with open(inp.name) as stdin:
                proc = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=stdin, stdout=subprocess.PIPE,
                                        stderr=err, cwd=ROOT, start_new_session=True, text=True)
            os.unlink(inp.name)
            assert proc.stdout is not None
            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            done = 0
            started = True  # the first case also waits for the child's start and model loads
            while True:
                if not sel.select(timeout=self.args.hang + (30 if started else 0)):
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return done, ("hang", "")
                started = False
                line = proc.stdout.readline()
                if not line:
                    break
                self.outcomes[line.strip()] += 1
                self.executions += 1
                done += 1
            rc = proc.wait()
            if rc == 0 and done == len(cases):
                return done, None
            err.seek(0)
            text = err.read().decode(errors="replace")
            lines = [ln for ln in text.splitlines() if ln.strip()]
            first = next((ln for ln in lines if any(s in ln for s in ("ASSERT", "terminate", "Sanitizer", "Error",
                                                                         "error:", "fatal"))), lines[-1] if lines else "")
            name = signal.Signals(-rc).name if rc < 0 and -rc in signal.Signals._value2member_map_ else f"rc {rc}"
            return done, ("death", f"{name}: {first.strip()[:160]}")

    def run(self) -> None:
        deadline = time.monotonic() + self.args.seconds
        while time.monotonic() < deadline and self.executions < self.args.cases:
            n = min(self.args.batch, self.args.cases - self.executions)
            cases = self.cases(n)
            self.run_batch(cases)
            for case in cases:
                if "path" in case:
                    Path(case["path"]).unlink(missing_ok=True)

    def report(self, seconds: float) -> dict[str, Any]:
        return {
            "campaign": self.name, "executions": self.executions, "seconds": round(seconds, 1),
            "deaths": sum(c for c, _ in self.deaths.values()), "unique_deaths": len(self.deaths),
            "hangs": len(self.hangs), "outcomes": dict(self.outcomes.most_common()),
            "findings": {k: v[1] for k, v in self.deaths.items()} | {f"hang {i}": p for i, p in enumerate(self.hangs)},
        }


def replay(args: argparse.Namespace, config: dict[str, Any], tmp: Path) -> int:
    """Each finding run alone: ok or its MTPError (fixed), or still a death or a hang. Exit status 1 for the latter."""
    args.keep = str(tmp / "kept")  # a finding that still fails is not kept a second time
    failed = False
    for finding in map(Path, args.replay):
        name = max((c for c in CAMPAIGNS if finding.name.startswith(c + "-")), key=len, default=None)
        if name is None:
            print(f"{finding}: not a kept finding (its name starts with none of {', '.join(CAMPAIGNS)})")
            failed = True
            continue
        case = {"path": str(finding)} if finding.suffix == ".gguf" else json.loads(finding.read_text())
        campaign = Campaign(name, args, config, tmp)
        campaign.run_batch([case], alone=True)
        if campaign.hangs or campaign.deaths:
            verdict = "still a hang" if campaign.hangs else "still a death: " + next(iter(campaign.deaths))
            failed = True
        else:
            verdict = "fixed: " + next(iter(campaign.outcomes))
        print(f"{finding}: {verdict}", flush=True)
    return 1 if failed else 0


def main() -> int:
    if "--worker" in sys.argv:
        worker()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaign", action="append", choices=CAMPAIGNS, help="repeatable; default: all")
    parser.add_argument("--seconds", type=float, default=60.0, help="time budget per campaign")
    parser.add_argument("--cases", type=int, default=10**9, help="at most this many executions per campaign")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=50, help="cases per child process")
    parser.add_argument("--hang", type=float, default=10.0, help="seconds a case may run before it is a hang")
    parser.add_argument("--model", default=None, help="the GGUF the gguf campaigns mutate (default: the tiny hybrid)")
    parser.add_argument("--keep", default="build/fuzz-findings", help="where inputs that killed or hung a child go")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON lines")
    parser.add_argument("--replay", nargs="+", metavar="FINDING",
                        help="run kept findings again, each alone (its campaign is its file name's first word)")
    args = parser.parse_args()

    from mtp_llm.gguf.tiny_models import make_tiny_models
    from tests.helpers import MODELS_DIR
    from tests.helpers.templates import write_template_models

    tiny = make_tiny_models(MODELS_DIR)
    templates = write_template_models(MODELS_DIR / "templates")
    args.model = args.model or str(tiny["hybrid"])
    config = {"random": str(tiny["random"]), "chat_models": [str(templates[n]) for n in CHAT_MODELS]}
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        if args.replay:
            return replay(args, config, Path(tmp))
        for name in args.campaign or CAMPAIGNS:
            campaign = Campaign(name, args, config, Path(tmp))
            started = time.monotonic()
            campaign.run()
            report = campaign.report(time.monotonic() - started)
            failed = failed or bool(report["deaths"] or report["hangs"])
            if args.json:
                print(json.dumps(report), flush=True)
            else:
                print(f"{name}: {report['executions']} executions in {report['seconds']} s, {report['deaths']} deaths "
                      f"({report['unique_deaths']} unique), {report['hangs']} hangs; {report['outcomes']}", flush=True)
                for what, kept in report["findings"].items():
                    print(f"  {what}  ({kept})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
