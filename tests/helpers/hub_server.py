"""A local stand-in for the Hugging Face Hub that the real huggingface_hub client talks to.

Serves repositories of files from memory the way the Hub does:

* ``GET /api/models/{repo}/revision/{rev}``: the model info JSON (``sha`` and ``siblings``
  with size, blob id and LFS sha256), ``X-Error-Code`` RepoNotFound / RevisionNotFound;
* ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``: ``X-Repo-Commit`` and ``ETag`` on every
  answer; GGUF (LFS) files answer 302 to a second server on another port (the "CDN", as the
  Hub's storage is another host) with ``X-Linked-Etag`` (the sha256) and ``X-Linked-Size``;
  other files are served directly; a missing file is 404 with ``X-Error-Code: EntryNotFound``.

Every request is counted; ``cut_off`` names files whose download stops halfway (and whose
retry then fails), ``corrupt`` names files served with other bytes than listed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


@dataclasses.dataclass
class Commit:
    sha: str
    files: dict[str, bytes]


@dataclasses.dataclass
class FakeHub:
    repos: dict[str, dict[str, Commit]] = dataclasses.field(default_factory=dict)
    """repo id -> revision name or commit sha -> commit."""
    requests: list[str] = dataclasses.field(default_factory=list)
    cut_off: set[str] = dataclasses.field(default_factory=set)
    gone: set[str] = dataclasses.field(default_factory=set)
    """Files cut off once: every later download of them fails (503)."""
    corrupt: set[str] = dataclasses.field(default_factory=set)
    url: str = ""
    cdn_url: str = ""

    def add_commit(self, repo_id: str, files: dict[str, bytes], *, branch: str = "main") -> str:
        """Add a commit holding ``files`` and point ``branch`` at it; returns its sha."""
        revisions = self.repos.setdefault(repo_id, {})
        sha = hashlib.sha1(f"{repo_id}:{len(revisions)}".encode()).hexdigest()
        commit = Commit(sha, dict(files))
        revisions[sha] = commit
        revisions[branch] = commit
        return sha

    def blob(self, sha256: str) -> tuple[str, bytes] | None:
        for revisions in self.repos.values():
            for commit in revisions.values():
                for name, data in commit.files.items():
                    if hashlib.sha256(data).hexdigest() == sha256:
                        return name, data
        return None


def _is_lfs(name: str) -> bool:
    return name.endswith(".gguf")


def _git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _send(self, status: int, headers: dict[str, str], data: bytes = b"", body: bool = True) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", headers.get("Content-Length", str(len(data))))
            self.end_headers()
            if body and data:
                self.wfile.write(data)

        def _error(self, status: int, code: str, extra: dict[str, str] | None = None) -> None:
            data = json.dumps({"error": code}).encode()
            self._send(status, {"X-Error-Code": code, "Content-Type": "application/json", **(extra or {})}, data)

        def _serve(self, body: bool) -> None:
            hub.requests.append(f"{self.command} {self.path}")
            path = unquote(urlsplit(self.path).path)
            if path.startswith("/cdn/"):
                return self._cdn(path.removeprefix("/cdn/"), body)
            if path.startswith("/api/models/"):
                return self._model_info(path.removeprefix("/api/models/"))
            parts = path.lstrip("/").split("/", 4)
            if len(parts) == 5 and parts[2] == "resolve":
                return self._resolve(f"{parts[0]}/{parts[1]}", parts[3], parts[4], body)
            self._error(404, "NotFound")

        def _commit(self, repo_id: str, revision: str) -> Commit | None:
            revisions = hub.repos.get(repo_id)
            if revisions is None:
                self._error(404, "RepoNotFound")
                return None
            commit = revisions.get(revision)
            if commit is None:
                self._error(404, "RevisionNotFound")
            return commit

        def _model_info(self, rest: str) -> None:
            repo_id, _, revision = rest.partition("/revision/")
            commit = self._commit(repo_id, revision or "main")
            if commit is None:
                return
            siblings = []
            for name, data in commit.files.items():
                sibling: dict[str, object] = {"rfilename": name, "size": len(data), "blobId": _git_oid(data)}
                if _is_lfs(name):
                    sibling["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
                siblings.append(sibling)
            info = {"id": repo_id, "modelId": repo_id, "sha": commit.sha, "private": False, "siblings": siblings}
            self._send(200, {"Content-Type": "application/json"}, json.dumps(info).encode())

        def _resolve(self, repo_id: str, revision: str, name: str, body: bool) -> None:
            commit = self._commit(repo_id, revision)
            if commit is None:
                return
            data = commit.files.get(name)
            if data is None:
                return self._error(404, "EntryNotFound", {"X-Repo-Commit": commit.sha})
            headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{_git_oid(data)}"'}
            if not _is_lfs(name):
                return self._send(200, headers, data, body)
            sha256 = hashlib.sha256(data).hexdigest()
            headers.update(
                {
                    "Location": f"{hub.cdn_url}/cdn/{sha256}",
                    "X-Linked-Etag": f'"{sha256}"',
                    "X-Linked-Size": str(len(data)),
                }
            )
            self._send(302, headers, b"", body)

        def _cdn(self, sha256: str, body: bool) -> None:
            found = hub.blob(sha256)
            if found is None:
                return self._send(404, {})
            name, data = found
            if self.headers.get("Range") or name in hub.gone:  # retried after a cut: the server is gone for good
                return self._send(503, {})
            headers = {"ETag": f'"{sha256}"', "Content-Type": "application/octet-stream"}
            if name in hub.corrupt:
                data = bytes(b ^ 0xFF for b in data[:64]) + data[64:]
            if name in hub.cut_off and body:
                hub.gone.add(name)
                self._send(200, {**headers, "Content-Length": str(len(data))}, data[: len(data) // 2], body)
                self.wfile.flush()
                self.close_connection = True
                return
            self._send(200, headers, data, body)

    return Handler


@contextmanager
def serve(hub: FakeHub) -> Iterator[FakeHub]:
    """Run the hub and its "CDN" on ephemeral ports of 127.0.0.1 while the context is open."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub)) for _ in range(2)]
    threads = [threading.Thread(target=s.serve_forever, args=(0.02,), daemon=True) for s in servers]
    hub.url, hub.cdn_url = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    for thread in threads:
        thread.start()
    try:
        yield hub
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
