"""Inputs from anyone (options, paths, prompts, servers) cannot end or hang the process: each bad one
raises an MTPError subclass within 10 s and the same process then serves a plain completion;
interpreter exit with a generation in flight ends with the interpreter's own status.

Anything that could crash runs in a child process (an abort fails the case, not the runner)."""

from __future__ import annotations

import json
import os
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from mtp_llm import MTP, Model, MTPError, _core
from mtp_llm.options import machine_threads
from tests.helpers import make_session

CHILD_ENV = {**os.environ, "GGML_NO_BACKTRACE": "1"}  # an abort is rc 134 at once, no gdb attach

# ------------------------------------------------------------ exit -------

EXIT_SCENARIOS: dict[str, tuple[str, int]] = {
    # name: (code run after `model` and `started` exist, expected exit status)
    "daemon thread, main returns": ("start_generating()", 0),
    "sys.exit in main": ("start_generating(); sys.exit(3)", 3),
    "LangChain invoke in a thread": (
        """
        from mtp_llm.langchain import MTPLLM
        llm = MTPLLM(model=model, n_threads=1, n_ctx=512, n_draft=2, max_tokens=400, temperature=0)
        session = llm._engine()
        def run():
            while True:
                llm.invoke("Hello")
        threading.Thread(target=run, daemon=True).start()
        while session._slots._free:
            time.sleep(0.001)
        sys.exit(0)
        """,
        0,
    ),
}


@pytest.mark.parametrize("name", sorted(EXIT_SCENARIOS))
def test_exit_with_a_generation_in_flight_keeps_the_interpreters_status(name: str, tiny_paths) -> None:
    """Found by hand: a thread that came back from a native step while the interpreter finalized was
    ended by CPython's pthread_exit, whose unwind crossed a noexcept frame: SIGABRT in 17 of 17 runs."""
    body, expected = EXIT_SCENARIOS[name]
    code = "import sys, threading, time\nfrom mtp_llm import MTP, Model\n"
    code += f"model = Model.load({str(tiny_paths['random'])!r})\n"
    code += textwrap.dedent(
        """
        def start_generating():
            s = MTP(model, n_threads=1, n_ctx=512, n_draft=2)
            started = threading.Event()
            def run():
                while True:
                    for _ in s.stream("Hello", max_tokens=400, temp=0):
                        started.set()
            threading.Thread(target=run, daemon=True).start()
            started.wait()
        """
    )
    code += textwrap.dedent(body)
    runs = 4
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(
            lambda _: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                                     env=CHILD_ENV),
            range(runs),
        ))
    for proc in procs:
        assert proc.returncode == expected, f"rc={proc.returncode}: {proc.stderr[-1500:]}"
        assert "terminate called" not in proc.stderr


# ------------------------------------------------------- bad inputs -------

CASES: dict[str, tuple[str, str, str]] = {
    # name: (code using `m`, `session()`, `paths`, `tmp`, expected class, message fragment)
    "max_tokens 2**31": ("session().generate('Hi', max_tokens=2**31)", "InvalidOptionError", "max_tokens"),
    "n_ctx 2**31": ("MTP(m, n_ctx=2**31, n_threads=1)", "InvalidOptionError", "n_ctx"),
    "n_batch 2**40": ("MTP(m, n_batch=2**40, n_threads=1)", "InvalidOptionError", "n_batch"),
    "n_parallel 2**31": ("MTP(m, n_parallel=2**31, n_threads=1)", "InvalidOptionError", "n_parallel"),
    "top_k 2**31": ("session().generate('Hi', top_k=2**31)", "InvalidOptionError", "top_k"),
    "reasoning_budget 2**31": ("session().generate('Hi', reasoning_budget=2**31)", "InvalidOptionError",
                               "reasoning_budget"),
    "token id 2**31": ("session().generate([1, 2**31])", "InvalidPromptError", "vocabulary"),
    "token id 2**64 to detokenize": ("m.detokenize([2**64])", "InvalidPromptError", "vocabulary"),
    "token id 2**31 to is_eog": ("m.is_eog(2**31)", "InvalidPromptError", "vocabulary"),
    "score n_batch 2**31": ("session().score('hello world', n_batch=2**31)", "InvalidOptionError", "n_batch"),
    "n_gpu_layers 2**31": ("Model.load(paths['random'], n_gpu_layers=2**31)", "InvalidOptionError",
                           "n_gpu_layers"),
    "surrogate in prompt": ("session().generate('Hi \\ud800')", "InvalidPromptError", "surrogate"),
    "surrogate in stop": ("session().generate('Hi', stop=['\\udcff'])", "InvalidOptionError", "surrogate"),
    "surrogate in grammar": ("session().generate('Hi', grammar='root ::= \"\\ud800\"')", "InvalidOptionError",
                             "surrogate"),
    "surrogate in message": (
        "m.apply_chat_template([{'role': 'user', 'content': '\\ud800'}], chat_template='{{ messages[0].content }}')",
        "InvalidOptionError", "surrogate"),
    "surrogate in path": ("Model.load(tmp / 'x\\udcff.gguf')", "ModelLoadError", "surrogate"),
    "surrogate to embed": ("m.embed(['\\ud800'])", "InvalidPromptError", "surrogate"),
    "logprobs='yes'": ("session().generate('Hi', logprobs='yes')", "InvalidOptionError", "logprobs"),
    "use_mmap='no'": ("Model.load(paths['random'], use_mmap='no')", "InvalidOptionError", "use_mmap"),
    "rpc_timeout='x'": ("Model.load(paths['random'], rpc_timeout='x')", "InvalidOptionError", "rpc_timeout"),
    "path 5": ("Model.load(5)", "InvalidOptionError", "path"),
    "grammar no token can start": ("session().generate('Hi', grammar='root ::= [z-a]', max_tokens=4)",
                                   "GrammarError", "no text can start"),
    "NUL in model path": ("Model.load(paths['random'] + '\\0.bak')", "ModelLoadError", "NUL"),
    "named pipe": ("os.mkfifo(tmp / 'pipe.gguf'); Model.load(tmp / 'pipe.gguf')", "ModelLoadError", "named pipe"),
    "symlink loop": ("os.symlink(tmp / 'loop.gguf', tmp / 'loop.gguf'); Model.load(tmp / 'loop.gguf')",
                     "ModelLoadError", "symlink loop"),
    "tool 5": ("chat_turn([5])", "ToolSchemaError", "tool"),
    "tool a string": ("chat_turn(['get_weather'])", "ToolSchemaError", "tool"),
    "tool without function": ("chat_turn([{'type': 'function'}])", "ToolSchemaError", "name"),
    "tool parameters not a dict": (
        "chat_turn([{'type': 'function', 'function': {'name': 'f', 'parameters': 'x'}}])",
        "ToolSchemaError", "parameters"),
    "LlamaIndex MTPLLM(n_draft=99)": (
        "from mtp_llm.llamaindex import MTPLLM; MTPLLM(model_path=paths['random'], n_draft=99)",
        "InvalidOptionError", "n_draft"),
    "closed: stats()": ("closed().stats()", "MTPError", "closed"),
    "closed: last_stats": ("closed().last_stats", "MTPError", "closed"),
    "closed: cancel()": ("closed().cancel()", "MTPError", "closed"),
    "closed: score()": ("closed().score('hello world')", "MTPError", "closed"),
    "closed: n_ctx": ("closed().n_ctx", "MTPError", "closed"),
    "closed: generate()": ("closed().generate('Hi')", "MTPError", "closed"),
    "closed: reset_stats()": ("closed().reset_stats()", "MTPError", "closed"),
}

RUNNER = textwrap.dedent(
    """
    import json, os, sys, tempfile, time
    from pathlib import Path
    import mtp_llm
    from mtp_llm import MTP, Model
    from mtp_llm.chat import ChatFormat
    paths = json.loads(sys.argv[1])
    cases = json.loads(sys.argv[2])
    tmp = Path(tempfile.mkdtemp())
    m = Model.load(paths['random'])
    def session(**kw):
        kw.setdefault('n_threads', 1); kw.setdefault('n_ctx', 512); kw.setdefault('n_draft', 2)
        return MTP(m, **kw)
    def closed():
        s = session(); s.close(); return s
    def chat_turn(tools):
        return ChatFormat(m).turn([{'role': 'user', 'content': 'hi'}], tools=tools)
    for name, code in cases.items():
        print(json.dumps({'start': name}), flush=True)
        start = time.monotonic()
        try:
            exec(code)
        except mtp_llm.MTPError as exc:
            result = {'class': type(exc).__name__, 'message': str(exc)}
        except BaseException as exc:
            result = {'class': 'not an MTPError: ' + type(exc).__name__, 'message': str(exc)[:500]}
        else:
            result = {'class': None, 'message': ''}
        result.update(name=name, seconds=time.monotonic() - start)
        print(json.dumps(result), flush=True)
    print(json.dumps({'completion': session().generate('Hello', max_tokens=4, temp=0)}), flush=True)
    """
)


@pytest.fixture(scope="module")
def case_results(tiny_paths) -> dict[str, Any]:
    """Every case in one child process, in order, then a plain completion in that process."""
    paths = {"random": str(tiny_paths["random"])}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(paths), json.dumps({k: v[0] for k, v in CASES.items()})],
        capture_output=True, text=True, timeout=240, env=CHILD_ENV,
    )
    results: dict[str, Any] = {"rc": proc.returncode, "stderr": proc.stderr[-1500:]}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if "start" in entry:
                results["last started"] = entry["start"]
            elif "name" in entry:
                results[entry["name"]] = entry
            else:
                results.update(entry)
    return results


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_raises_an_mtp_error_within_10_s(name: str, case_results: dict[str, Any]) -> None:
    _, expected, fragment = CASES[name]
    result = case_results.get(name)
    assert result is not None, (
        f"the process died at {case_results.get('last started')!r} (rc={case_results['rc']}): {case_results['stderr']}"
    )
    assert result["class"] == expected, result
    assert fragment.lower() in result["message"].lower(), result["message"]
    assert result["seconds"] < 10, result


def test_the_process_then_serves_a_plain_completion(case_results: dict[str, Any]) -> None:
    assert case_results["rc"] == 0, case_results["stderr"]
    assert case_results.get("completion"), case_results


# -------------------------------------------------- closing races ---------


def test_close_racing_calls_gives_them_an_mtp_error(random_model: Model) -> None:
    """Callers racing close() got AttributeError ('NoneType' object has no attribute 'end_call') in 5-6
    of 180 calls: each now finishes, or raises an MTPError (closed, or busy for close itself)."""
    others: list[BaseException] = []
    for _ in range(12):
        session = make_session(random_model, n_draft=2)
        go = threading.Event()

        def call(session: MTP = session) -> None:
            go.wait()
            for _ in range(5):
                try:
                    session.generate("Hello", max_tokens=4, temp=0)
                    session.stats()
                    session.last_stats
                except MTPError:
                    pass
                except BaseException as exc:  # noqa: BLE001 - what the test looks for
                    others.append(exc)

        threads = [threading.Thread(target=call) for _ in range(3)]
        for t in threads:
            t.start()
        go.set()
        while True:
            try:
                session.close()
                break
            except MTPError:
                time.sleep(0.0005)
        for t in threads:
            t.join(30)
        with pytest.raises(MTPError, match="closed"):
            session.generate("Hello", max_tokens=2)
    assert not others, others[:3]


# ------------------------------------------------------ resources --------

RESOURCE_RUNNER = textwrap.dedent(
    """
    import json, sys, time, warnings
    from mtp_llm import MTP, Model
    m = Model.load(sys.argv[1])
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.monotonic()
        s = MTP(m, n_threads=2**31 - 1, n_threads_batch=2**31 - 1, n_ctx=512, n_draft=2)
        out["session_s"] = time.monotonic() - start
        out["n_threads"] = s.n_threads
        start = time.monotonic()
        out["text"] = s.generate("Hello", max_tokens=8, temp=0)
        out["generate_s"] = time.monotonic() - start
        start = time.monotonic()
        m.embed(["hello world"], n_threads=10**6)
        out["embed_s"] = time.monotonic() - start
    out["warnings"] = [str(w.message) for w in caught]
    start = time.monotonic()
    MTP(m, n_threads=1, n_ctx=512, n_draft=2).generate("Hello", max_tokens=8, temp=0, penalty_last_n=2**31 - 1,
                                                       repeat_penalty=1.1)
    out["penalty_s"] = time.monotonic() - start
    print(json.dumps(out))
    """
)


def test_thread_counts_beyond_the_machine_are_clamped_with_a_warning(tiny_paths) -> None:
    """n_threads 2**31 - 1 crashed MTP() (SIGSEGV), 16 on 2 cores took 7.7 s to start, and
    embed(n_threads=10**6) over 90 s; penalty_last_n 2**31 - 1 took 31.6 s for 8 tokens."""
    proc = subprocess.run([sys.executable, "-c", RESOURCE_RUNNER, str(tiny_paths["random"])],
                          capture_output=True, text=True, timeout=120, env=CHILD_ENV)
    assert proc.returncode == 0, proc.stderr[-1500:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    cores = machine_threads()
    assert out["n_threads"] <= cores
    assert out["session_s"] < 10 and out["generate_s"] < 10 and out["embed_s"] < 10, out
    assert out["penalty_s"] < 10, out
    assert any(f"the {cores} CPUs" in w for w in out["warnings"]), out["warnings"]


def test_tokenize_of_long_text_releases_the_gil(random_model: Model) -> None:
    """tokenize of a 1.2 MB prompt held the GIL 0.5 s: other threads now run meanwhile."""
    text = "hello world, the quick brown fox. " * 72_000
    gaps: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            time.sleep(0.001)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.02)
    start = time.monotonic()
    random_model.tokenize(text)
    took = time.monotonic() - start
    done.set()
    ticker.join()
    assert max(gaps) < max(0.05, took / 3), (max(gaps), took)


def test_use_mmap_false_survives_the_file_changing_underneath(tiny_paths, tmp_path: Path) -> None:
    """With the default use_mmap=True, truncating the file after the load is SIGBUS on the next
    generate (docs/reliability.md); use_mmap=False reads the weights into memory and keeps working."""
    copy = tmp_path / "model.gguf"
    copy.write_bytes(tiny_paths["random"].read_bytes())
    code = textwrap.dedent(
        """
        import os, sys
        from mtp_llm import MTP, Model
        m = Model.load(sys.argv[1], use_mmap=False)
        os.truncate(sys.argv[1], 0)
        print(MTP(m, n_threads=1, n_ctx=512, n_draft=2).generate("Hello", max_tokens=8, temp=0) != "")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True, text=True, timeout=60,
                          env=CHILD_ENV)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr[-1500:]


class _SilentHandler(socketserver.BaseRequestHandler):
    """Answers the RPC handshake, then reads and never answers."""

    def handle(self) -> None:
        major, minor, _ = (int(x) for x in _core.rpc_protocol_version().split("."))
        try:
            self.request.recv(1 + 8 + 24)
            self.request.sendall((28).to_bytes(8, "little") + bytes([major, minor, 0, 0]) + bytes(24))
            while self.request.recv(65536):
                pass
        except OSError:
            pass


def test_rpc_timeout_bounds_a_load_on_a_server_gone_silent_after_the_handshake(tiny_paths) -> None:
    """Model.load(rpc_servers=..., rpc_timeout=2) hung over 60 s on such a server."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _SilentHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"127.0.0.1:{server.server_address[1]}"
    code = textwrap.dedent(
        """
        import sys, time, mtp_llm
        start = time.monotonic()
        try:
            mtp_llm.Model.load(sys.argv[1], rpc_servers=[sys.argv[2]], rpc_timeout=1)
        except mtp_llm.MTPError as exc:
            print(type(exc).__name__, round(time.monotonic() - start, 1), exc)
        m = mtp_llm.Model.load(sys.argv[1])
        print(mtp_llm.MTP(m, n_threads=1, n_ctx=512, n_draft=2).generate("Hello", max_tokens=4, temp=0) != "")
        """
    )
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(tiny_paths["random"]), endpoint],
                              capture_output=True, text=True, timeout=40, env=CHILD_ENV)
    finally:
        server.shutdown()
        server.server_close()
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines and lines[0].startswith("ModelLoadError"), (proc.stdout, proc.stderr[-1500:])
    assert float(lines[0].split()[1]) < 10, lines[0]
    assert lines[-1] == "True"


def test_use_mmap_false_loads_a_sparse_padded_file_quickly(tiny_paths, tmp_path: Path) -> None:
    """A GGUF padded with a 2 GiB hole: memory-mapped, the load touches the padding (docs/reliability.md);
    use_mmap=False reads the tensors only and loads within seconds."""
    padded = tmp_path / "padded.gguf"
    padded.write_bytes(tiny_paths["random"].read_bytes())
    os.truncate(padded, 2 * 1024**3)  # a sparse file: the hole takes no disk
    code = textwrap.dedent(
        """
        import sys, time
        from mtp_llm import MTP, Model
        start = time.monotonic()
        m = Model.load(sys.argv[1], use_mmap=False)
        took = time.monotonic() - start
        print(took < 10.0, MTP(m, n_threads=1, n_ctx=512, n_draft=2).generate("Hello", max_tokens=8, temp=0) != "")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code, str(padded)], capture_output=True, text=True, timeout=60,
                          env=CHILD_ENV)
    assert proc.returncode == 0 and proc.stdout.strip() == "True True", (proc.stdout, proc.stderr[-1500:])
