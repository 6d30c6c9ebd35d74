"""A tiny scripted HTTP server on localhost for retry and error-mapping tests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple

Reply = Tuple[int, Dict[str, str], bytes]


def reply(status: int, body: Any = None, headers: Optional[Dict[str, str]] = None) -> Reply:
    h = dict(headers or {})
    if isinstance(body, (bytes, bytearray)):
        data = bytes(body)
    elif body is None:
        data = b""
    else:
        data = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    return status, h, data


def error(status: int, code: str, message: str, headers: Optional[Dict[str, str]] = None) -> Reply:
    return reply(
        status,
        {"error": {"code": code, "message": message, "request_id": f"req_fake_{status}"}},
        {"X-Request-Id": f"req_fake_{status}", **(headers or {})},
    )


SANDBOX = {
    "id": "sb-fake",
    "template": "minimal",
    "state": "running",
    "cpu": 1,
    "memory_mb": 512,
    "metadata": {},
    "created_at": "2026-01-01T00:00:00Z",
    "expires_at": None,
    "ttl_seconds": None,
    "idle_timeout_seconds": None,
    "on_timeout": "kill",
    "boot_ms": 5,
    "boot_mode": "restore",
    "snapshot_id": None,
    "host": "fake",
}


class FakeServer:
    """``script[(method, path)]`` is a list of replies served in order (the last one repeats),
    or a callable taking the request record. Every request is recorded in ``requests``."""

    def __init__(self) -> None:
        self.script: Dict[Tuple[str, str], Any] = {}
        self.requests: List[Dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def handle(self) -> None:
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _handle(self) -> None:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    body = self._read_chunked()
                else:
                    n = int(self.headers.get("Content-Length") or 0)
                    body = self.rfile.read(n) if n else b""
                path = self.path.split("?", 1)[0]
                rec = {
                    "method": self.command,
                    "path": path,
                    "query": self.path.partition("?")[2],
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body,
                }
                outer.requests.append(rec)
                entry = outer.script.get((self.command, path))
                if entry is None:
                    status, headers, data = error(404, "not_found", "no such route")
                elif callable(entry):
                    status, headers, data = entry(rec)
                else:
                    status, headers, data = entry[0] if len(entry) == 1 else entry.pop(0)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away first (e.g. it stopped reading a stream)

            def _read_chunked(self) -> bytes:
                out = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def on(self, method: str, path: str, *replies: Reply) -> None:
        self.script[(method, path)] = list(replies)

    def on_call(self, method: str, path: str, fn: Callable[[Dict[str, Any]], Reply]) -> None:
        self.script[(method, path)] = fn

    def calls(self, method: str, path: str) -> List[Dict[str, Any]]:
        return [r for r in self.requests if r["method"] == method and r["path"] == path]

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
