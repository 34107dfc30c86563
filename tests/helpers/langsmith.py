"""A stand-in LangSmith server: records what the SDK posts, and reads the runs back out."""

from __future__ import annotations

import email.parser
import email.policy
import http.server
import json
from typing import Any, ClassVar


class Recorded(http.server.BaseHTTPRequestHandler):
    """Records every request; subclass it per server (``type("Handler", (Recorded,), {"requests": []})``)."""

    requests: ClassVar[list[tuple[str, str, dict[str, str], bytes]]] = []

    def _reply(self, body: bytes = b"{}") -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        type(self).requests.append(("GET", self.path, dict(self.headers), b""))
        self._reply()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).requests.append(("POST", self.path, dict(self.headers), body))
        self._reply()

    do_PATCH = do_POST

    def log_message(self, *args: Any) -> None:
        pass


def posted_runs(requests: list[tuple[str, str, dict[str, str], bytes]]) -> dict[str, dict[str, Any]]:
    """Run id -> merged fields, from /runs/multipart parts and /runs/batch bodies."""
    runs: dict[str, dict[str, Any]] = {}
    for method, path, headers, body in requests:
        if method != "POST":
            continue
        if headers.get("Content-Encoding") == "zstd" or headers.get("content-encoding") == "zstd":
            import zstandard

            body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
        if path.startswith("/runs/multipart"):
            ctype = headers.get("Content-Type") or headers.get("content-type")
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body
            )
            for part in msg.iter_parts():
                name = part.get_param("name", header="content-disposition")
                _, run_id, *field = name.split(".")
                data = json.loads(part.get_payload(decode=True))
                run = runs.setdefault(run_id, {})
                if field:
                    run[field[0]] = data
                else:
                    run.update(data)
        elif path.startswith("/runs/batch"):
            data = json.loads(body)
            for item in data.get("post", []) + data.get("patch", []):
                runs.setdefault(str(item["id"]), {}).update(item)
    return runs
