"""Scale-out on ggml's RPC backend: real `mtp-llm rpc-server` processes on 127.0.0.1.

Models spread over local memory and two servers must decode exactly like local ones; bad
endpoints and lost servers must raise MTPError subclasses in bounded time, never abort.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mtp_llm import MTP, Model, _core
from mtp_llm.errors import InvalidOptionError, ModelLoadError
from mtp_llm.options import GenerationOptions

from tests.helpers import THREADS, make_session
from tests.helpers.shakespeare import shakespeare_model_path


START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RpcServer:
    """One `mtp-llm rpc-server` subprocess on 127.0.0.1; stop() kills it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "mtp_llm", "rpc-server", "--port", str(self.port), "--threads", str(THREADS)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rpc-server exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")
            try:
                _core.rpc_probe(self.endpoint, 1.0)
                return
            except ModelLoadError:
                time.sleep(0.1)
        raise RuntimeError(f"rpc-server on {self.endpoint} not ready within {START_TIMEOUT} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def start_servers(n: int) -> list[RpcServer]:
    servers = [RpcServer() for _ in range(n)]
    try:
        for s in servers:
            s.wait_ready()
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers


@pytest.fixture(scope="module")
def rpc_pair() -> Iterator[list[str]]:
    servers = start_servers(2)
    try:
        yield [s.endpoint for s in servers]
    finally:
        for s in servers:
            s.stop()


def greedy(model: Model, prompt: str, max_tokens: int = 24) -> tuple[str, int, int, int]:
    session = make_session(model, n_draft=3)
    text = session.generate(prompt, options=GenerationOptions(max_tokens=max_tokens, temp=0.0))
    stats = session.last_stats
    return text, stats.drafts_generated, stats.drafts_accepted, stats.tokens_emitted


# ---------------------------------------------------------------- identical output


@pytest.mark.parametrize("name", ["random", "accept100", "accept33", "hybrid"])
def test_tiny_model_over_two_servers_matches_local(
    name: str, tiny_paths: dict[str, Path], rpc_pair: list[str]
) -> None:
    local = Model.load(tiny_paths[name])
    remote = Model.load(tiny_paths[name], rpc_servers=rpc_pair, n_gpu_layers=-1, tensor_split=[1, 1])
    assert remote.rpc_servers == rpc_pair
    assert len(remote.devices) == 2 and all("127.0.0.1" in d for d in remote.devices)
    want = greedy(local, "The quick brown fox")
    got = greedy(remote, "The quick brown fox")
    assert got == want
    assert want[1] > 0  # it drafted: the MTP path ran over RPC


def test_builtin_model_over_two_servers_matches_local(rpc_pair: list[str]) -> None:
    local = Model.load(shakespeare_model_path())
    remote = Model.load(shakespeare_model_path(), rpc_servers=rpc_pair, n_gpu_layers=-1, tensor_split=[1, 1])
    for prompt in ("The capital of France is", "def fibonacci(n):"):
        want = greedy(local, prompt, 32)
        got = greedy(remote, prompt, 32)
        assert got == want
        assert want[1] > 0


def test_head_placed_with_the_layers_matches_local(tiny_paths: dict[str, Path], rpc_pair: list[str]) -> None:
    local = Model.load(tiny_paths["accept33"])
    remote = Model.load(tiny_paths["accept33"], rpc_servers=rpc_pair, n_gpu_layers=-1, mtp_placement="layers")
    assert greedy(remote, "hello") == greedy(local, "hello")


def test_sidecar_head_stays_local(tiny_paths: dict[str, Path], rpc_pair: list[str]) -> None:
    trunk = Model.load(tiny_paths["random-trunk"], rpc_servers=rpc_pair)
    head = Model.load(tiny_paths["mtp-random-trunk"], rpc_servers=rpc_pair)
    assert trunk.rpc_servers == rpc_pair and head.rpc_servers == []
    local = make_session(Model.load(tiny_paths["random-trunk"]), draft_model=Model.load(tiny_paths["mtp-random-trunk"]))
    remote = make_session(trunk, draft_model=head)
    options = GenerationOptions(max_tokens=16, temp=0.0)
    assert remote.generate("abc", options=options) == local.generate("abc", options=options)
    assert remote.last_stats.drafts_accepted == local.last_stats.drafts_accepted


# ---------------------------------------------------------------- bad endpoints


class FakeServer:
    """A TCP peer that is not a compatible RPC server: `reply` is sent after the HELLO
    request arrives (None: it never answers)."""

    def __init__(self, reply: bytes | None) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.reply = reply
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply is not None:
                conn.recv(1 + 8 + 24)
                conn.sendall(self.reply)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def hello_reply(major: int, minor: int) -> bytes:
    return (28).to_bytes(8, "little") + bytes([major, minor, 0, 0]) + bytes(24)


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("localhost", "not host:port"),
        ("127.0.0.1:", "not host:port"),
        ("127.0.0.1:99999", "valid port"),
        ("127.0.0.1:http", "valid port"),
        ("[::1]:50052", "IPv4"),
        ("no-such-host.invalid:50052", "cannot resolve"),
    ],
)
def test_malformed_endpoint(endpoint: str, message: str, tiny_paths: dict[str, Path]) -> None:
    start = time.monotonic()
    with pytest.raises(ModelLoadError, match=message):
        Model.load(tiny_paths["random"], rpc_servers=[endpoint])
    assert time.monotonic() - start < 10


def test_nobody_listening(tiny_paths: dict[str, Path]) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(ModelLoadError, match="unreachable.*Connection refused"):
        Model.load(tiny_paths["random"], rpc_servers=[endpoint])
    assert time.monotonic() - start < 2


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (None, "did not answer the RPC handshake within 2 s"),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "malformed response"),
        (hello_reply(6, 0), "speaks RPC protocol 6.0.0, this build 7.0.0"),
        (hello_reply(7, 9), "speaks RPC protocol 7.9.0"),
    ],
)
def test_incompatible_server(reply: bytes | None, message: str, tiny_paths: dict[str, Path]) -> None:
    fake = FakeServer(reply)
    try:
        start = time.monotonic()
        with pytest.raises(ModelLoadError, match=message):
            Model.load(tiny_paths["random"], rpc_servers=[fake.endpoint], rpc_timeout=2.0)
        assert time.monotonic() - start < 10
    finally:
        fake.close()


def test_bad_rpc_options(tiny_paths: dict[str, Path], rpc_pair: list[str]) -> None:
    with pytest.raises(InvalidOptionError, match="tensor_split has 3 entries for 2 devices"):
        Model.load(tiny_paths["random"], rpc_servers=rpc_pair, tensor_split=[1, 1, 1])
    with pytest.raises(InvalidOptionError, match="mtp_placement"):
        Model.load(tiny_paths["random"], rpc_servers=rpc_pair, mtp_placement="remote")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="rpc_timeout"):
        Model.load(tiny_paths["random"], rpc_servers=rpc_pair, rpc_timeout=0)


# ---------------------------------------------------------------- lost servers

# Run in a child process: an abort inside ggml then fails the test instead of killing pytest.
CHILD = textwrap.dedent(
    """
    import json, sys, threading, time
    from mtp_llm import MTP, Model
    from mtp_llm.errors import MTPError
    from mtp_llm.options import GenerationOptions

    endpoint, model_path, when = sys.argv[1], sys.argv[2], sys.argv[3]
    # "stopped": the server is stopped (SIGSTOP), not killed: only the call's timeout can end it
    stopped = when == "stopped"
    opts = GenerationOptions(max_tokens=64, temp=0.0, timeout=5.0 if stopped else None)
    model = Model.load(model_path, rpc_servers=[endpoint], n_gpu_layers=-1, rpc_timeout=5.0)
    session = MTP(model, n_draft=3, n_threads=1, n_ctx=512)
    session.generate("warm up", options=opts)
    result = {}
    if when in ("during", "stopped"):
        print("generating", flush=True)
        start = time.monotonic()
        try:
            while time.monotonic() - start < (60 if stopped else 20):
                session.generate("x y z", options=opts)
            result["error"] = None
        except MTPError as exc:
            result["error"] = type(exc).__name__
            result["message"] = str(exc)
        result["failed_at"] = time.monotonic()
    else:
        print("loaded", flush=True)
        sys.stdin.readline()  # the parent killed the server
        start = time.monotonic()
        try:
            session.generate("x y z", options=opts)
            result["error"] = None
        except MTPError as exc:
            result["error"] = type(exc).__name__
            result["message"] = str(exc)
    result["seconds"] = time.monotonic() - start
    second = time.monotonic()
    try:
        session.generate("again", options=opts)
        result["second_call"] = None
    except MTPError as exc:
        result["second_call"] = type(exc).__name__
    result["second_call_seconds"] = time.monotonic() - second
    local = MTP(Model.load(model_path), n_draft=3, n_threads=1, n_ctx=512)
    result["local"] = len(local.generate("still works", options=opts)) > 0
    del session, model  # frees the lost server's buffers: must not abort either
    print("RESULT " + json.dumps(result), flush=True)
    """
)


@pytest.mark.parametrize("when", ["between", "during"])
def test_killed_server_raises(when: str, tiny_paths: dict[str, Path]) -> None:
    (server,) = start_servers(1)
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, server.endpoint, str(tiny_paths["random"]), when],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )
        assert child.stdout is not None and child.stdin is not None
        first = child.stdout.readline().strip()
        assert first in ("loaded", "generating"), child.stderr.read() if child.stderr else ""
        if when == "during":
            time.sleep(0.5)
        server.stop()
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=40)
    finally:
        server.stop()
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err[-2000:]
    (line,) = [x for x in out.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line[len("RESULT ") :])
    assert result["error"] == "RPCConnectionError"
    assert f"RPC server {server.endpoint} was lost" in result["message"]
    assert result["seconds"] < 10
    assert result["second_call"] == "RPCConnectionError"
    assert result["local"] is True


@pytest.mark.skipif(sys.platform == "win32", reason="Windows has no SIGSTOP to stop a process while it holds its socket")
def test_a_stopped_server_fails_the_call_within_its_timeout(tiny_paths: dict[str, Path]) -> None:
    """A server that stops answering (SIGSTOP: alive, its kernel still ACKs) must not hold a call
    past its timeout: with timeout=5 and rpc_timeout=5 the call raises within 15 s of the stop,
    the model reports the server lost, a local model still generates, and the process exits cleanly."""
    import signal

    (server,) = start_servers(1)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, server.endpoint, str(tiny_paths["random"]), "stopped"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "generating", child.stderr.read() if child.stderr else ""
        time.sleep(0.5)
        os.kill(server.proc.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        out, err = child.communicate(timeout=60)
    finally:
        server.stop()  # SIGKILL ends a stopped process too
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err[-2000:]
    (line,) = [x for x in out.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line[len("RESULT ") :])
    assert result["error"] in ("RPCConnectionError", "GenerationTimeoutError"), result
    assert result["failed_at"] - stopped_at < 15, result
    assert result["second_call"] == "RPCConnectionError" and result["second_call_seconds"] < 1, result
    assert result["local"] is True


def test_rpc_server_refuses_busy_port() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "mtp_llm", "rpc-server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 2
    assert f"could not listen on 127.0.0.1:{port}" in done.stderr


def test_rpc_server_warns_off_loopback() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mtp_llm", "rpc-server", "--host", "0.0.0.0", "--port", str(free_port())],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()
    assert "WARNING: listening on 0.0.0.0" in line
    assert "no authentication" in line


def test_integrations_take_rpc_servers(tiny_paths: dict[str, Path], rpc_pair: list[str]) -> None:
    from mtp_llm._integration import EngineSpec, get_session
    from mtp_llm.options import SessionOptions

    spec = EngineSpec(
        model_path=str(tiny_paths["accept100"]),
        rpc_servers=tuple(rpc_pair),
        session_options=SessionOptions(n_draft=3, n_threads=THREADS, n_ctx=512),
    )
    session: MTP = get_session(spec)
    assert session.model.rpc_servers == rpc_pair
    assert get_session(spec) is session
    local = make_session(Model.load(tiny_paths["accept100"]))
    options = GenerationOptions(max_tokens=16, temp=0.0)
    assert session.generate("hi", options=options) == local.generate("hi", options=options)


def test_langchain_and_llamaindex_take_rpc_servers(tiny_paths: dict[str, Path], rpc_pair: list[str]) -> None:
    from mtp_llm.langchain import MTPLLM as LangChainLLM
    from mtp_llm.llamaindex import MTPLLM as LlamaIndexLLM

    path = str(tiny_paths["accept33"])
    local = make_session(Model.load(path)).generate("hi", options=GenerationOptions(max_tokens=16, temp=0.0))
    common: dict[str, object] = dict(model_path=path, n_draft=3, n_threads=THREADS, n_ctx=512, max_tokens=16)
    lc = LangChainLLM(rpc_servers=rpc_pair, temperature=0.0, **common)
    assert lc.invoke("hi") == local
    li = LlamaIndexLLM(rpc_servers=rpc_pair, temperature=0.0, **common)
    assert li.complete("hi").text == local
