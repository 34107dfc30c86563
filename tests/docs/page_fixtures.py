"""What a documentation page needs around its snippets beyond the shared working directory.

``PAGE_FIXTURES`` maps a page (its path relative to the repository root, e.g. ``docs/hub.md``) to a
context manager that takes the page's working directory and sets up what its snippets use (a local
Hub, an RPC server on 127.0.0.1, environment variables), undoing it on exit.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path

PageFixture = Callable[[Path], AbstractContextManager[None]]


@contextmanager
def _nothing(workdir: Path) -> Iterator[None]:
    yield


@contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """Set (a str) or unset (None) environment variables, restoring them on exit."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


HUB_REPO = "owner/Model-GGUF"
"""The repository docs/hub.md loads from: two quantisations of a trunk-only model, each with the head
llama.cpp's converter names for it (``mtp-<name without size label>.gguf``), and a README."""


@contextmanager
def _local_hub(workdir: Path) -> Iterator[None]:
    """docs/hub.md: a local stand-in for the Hub (tests/helpers/hub_server.py) on 127.0.0.1 serving
    :data:`HUB_REPO` from the page's tiny files, with huggingface_hub's cache in the working directory."""
    import huggingface_hub.constants

    from tests.helpers.hub_server import FakeHub, serve

    trunk, head = (workdir / "trunk.gguf").read_bytes(), (workdir / "mtp-trunk.gguf").read_bytes()
    hub = FakeHub()
    hub.add_commit(
        HUB_REPO,
        {
            "README.md": b"# Model-GGUF\n",
            "Model-7B-Q4_K_M.gguf": trunk,
            "mtp-Model-Q4_K_M.gguf": head,
            "Model-7B-Q8_0.gguf": trunk,
            "mtp-Model-Q8_0.gguf": head,
        },
    )
    # Read by huggingface_hub at import: without it, its user agent asks the real Hub for a registry.
    telemetry = huggingface_hub.constants.HF_HUB_DISABLE_TELEMETRY
    huggingface_hub.constants.HF_HUB_DISABLE_TELEMETRY = True
    try:
        with serve(hub), _environment(
            HF_ENDPOINT=hub.url,
            HF_HUB_CACHE=str(workdir / "hf-cache"),
            HF_HUB_OFFLINE=None,
            HF_HUB_DISABLE_PROGRESS_BARS="1",
        ):
            yield
    finally:
        huggingface_hub.constants.HF_HUB_DISABLE_TELEMETRY = telemetry


RPC_PORTS = (50052, 50053)
"""The ports docs/scale-out.md's snippets name: two `mtp-llm rpc-server` processes on 127.0.0.1."""
RPC_UNUSED_PORT = 50054
"""The port docs/scale-out.md shows a failed connection to: nothing may listen there."""


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a connection in TIME_WAIT does not count
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@contextmanager
def _rpc_servers(workdir: Path) -> Iterator[None]:
    """docs/scale-out.md: `mtp-llm rpc-server --port P --threads 1` on 127.0.0.1 for each of :data:`RPC_PORTS`,
    ready (they answer the RPC handshake) before the page runs, killed after it."""
    from mtp_llm import _core
    from mtp_llm.errors import ModelLoadError

    busy = [port for port in (*RPC_PORTS, RPC_UNUSED_PORT) if not _port_is_free(port)]
    if busy:
        raise RuntimeError(f"docs/scale-out.md needs 127.0.0.1 ports {RPC_PORTS} and {RPC_UNUSED_PORT}; in use: {busy}")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mtp_llm", "rpc-server", "--port", str(port), "--threads", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in RPC_PORTS
    ]
    try:
        for port, proc in zip(RPC_PORTS, procs):
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"mtp-llm rpc-server --port {port} exited with {proc.returncode}")
                try:
                    _core.rpc_probe(f"127.0.0.1:{port}", 1.0)
                    break
                except ModelLoadError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        yield
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


PAGE_FIXTURES: dict[str, PageFixture] = {
    "docs/hub.md": _local_hub,
    "docs/scale-out.md": _rpc_servers,
}
"""Page path -> fixture; pages not listed get only the shared working directory."""


def fixture_for(page: str) -> PageFixture:
    return PAGE_FIXTURES.get(page, _nothing)
