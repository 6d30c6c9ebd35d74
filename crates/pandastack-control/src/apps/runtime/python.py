# PandaStack function runtime for Python (runs in the function's VM; Apache-2.0).
#
# Imports the handler named by PANDASTACK_HANDLER ("module.function", module relative to
# /app) before it listens, so the baked snapshot of this VM holds the handler imported: a new
# instance restored from it answers its first call without importing anything. A handler
# that cannot be imported ends the process with its traceback (the build fails naming it).
#
#   GET  /__pandastack/health   200 once the handler is imported
#   POST /__pandastack/invoke   body: the event (JSON); answer: the outcome (JSON)
#   anything else               an HTTP-style call (the public endpoint): the event is the
#                               request; a returned {"statusCode", "headers", "body"} is the
#                               response, any other value is sent as JSON
#
# What a call prints is captured per call (thread-local) and returned with its outcome.
# After the VM is restored from its snapshot, the guest agent writes a new value into
# /run/pandastack/restored: the first call after that reseeds `random` (and NumPy's global
# generator when NumPy is imported), so instances cloned from one snapshot do not share
# random sequences.

import asyncio
import base64
import importlib
import inspect
import io
import json
import os
import queue
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

HANDLER = os.environ.get("PANDASTACK_HANDLER", "main.handler")
PORT = int(os.environ.get("PORT", "8000"))
RESTORED = "/run/pandastack/restored"
MAX_OUTPUT = 64 * 1024

_local = threading.local()


class _Capture:
    """sys.stdout/sys.stderr: a call's own buffer while it runs, the process's otherwise."""

    def __init__(self, real, which):
        self._real = real
        self._which = which

    def write(self, s):
        buf = getattr(_local, self._which, None)
        if buf is not None:
            buf.write(s)
        return self._real.write(s)

    def flush(self):
        self._real.flush()

    def __getattr__(self, name):
        return getattr(self._real, name)


def _load():
    module, func = HANDLER.rsplit(".", 1)
    root = "/app"
    if "/" in module:
        sub, module = module.rsplit("/", 1)
        root = os.path.join(root, sub)
    sys.path.insert(0, root)
    mod = importlib.import_module(module)
    fn = getattr(mod, func, None)
    if fn is None:
        raise AttributeError(f"module {module!r} has no attribute {func!r} (handler {HANDLER})")
    if not callable(fn):
        raise TypeError(f"{HANDLER} is not callable")
    return fn


try:
    _fn = _load()
except BaseException:
    traceback.print_exc()
    print(f"pandastack: cannot import the handler {HANDLER}", file=sys.stderr, flush=True)
    sys.exit(1)

try:
    _takes_context = len(inspect.signature(_fn).parameters) >= 2
except (TypeError, ValueError):
    _takes_context = False


sys.stdout = _Capture(sys.stdout, "out")
sys.stderr = _Capture(sys.stderr, "err")

_seen_restore = None
_seed_lock = threading.Lock()


def _reseed_after_restore():
    global _seen_restore
    try:
        with open(RESTORED) as f:
            mark = f.read()
    except OSError:
        mark = None
    if mark == _seen_restore:
        return
    with _seed_lock:
        if mark == _seen_restore:
            return
        import random

        random.seed()
        np = sys.modules.get("numpy")
        if np is not None:
            try:
                np.random.seed()
            except Exception:
                pass
        _seen_restore = mark


def _call(event, context):
    """Runs the handler: (status, result, error, stdout, stderr, ms)."""
    _reseed_after_restore()
    _local.out, _local.err = io.StringIO(), io.StringIO()
    t = time.perf_counter()
    try:
        r = _fn(event, context) if _takes_context else _fn(event)
        if inspect.isawaitable(r):
            r = asyncio.run(_await(r))
        json.dumps(r, allow_nan=False)  # a value JSON cannot carry is the handler's error
        status, result, error = "ok", r, None
    except BaseException as e:  # noqa: BLE001 - the handler's failure is data
        status, result = "error", None
        error = {
            "type": type(e).__name__,
            "message": str(e),
            "traceback": traceback.format_exc(),
        }
    ms = (time.perf_counter() - t) * 1000
    out, err = _local.out.getvalue(), _local.err.getvalue()
    _local.out = _local.err = None
    return status, result, error, out[-MAX_OUTPUT:], err[-MAX_OUTPUT:], ms


async def _await(r):
    return await r


# What the first call would import besides the handler — the generators reseeded after a
# restore: stdlib `random`, and `numpy.random`, which NumPy 2 imports only when first used —
# is imported now, so it is in the baked snapshot instead of in every instance's first call
# (importing numpy.random under emulation took ~0.5 s of a cold call).
_reseed_after_restore()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pandastack-fn"
    # Headers and body are two writes: without TCP_NODELAY the body waits for the delayed
    # ACK of the headers (40 ms a call on Linux).
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass

    def _send(self, code, body, ctype="application/json", headers=None):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(body)))
        # end_headers() by hand, with the body in the same write: one segment per answer, so
        # the answer crosses the guest agent's port forwarding as one message, not two.
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(body)
        self.flush_headers()

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _context(self):
        return {
            "function": os.environ.get("PANDASTACK_FUNCTION", ""),
            "version": os.environ.get("PANDASTACK_FUNCTION_VERSION", ""),
            "invocation_id": self.headers.get("X-Pandastack-Invocation", ""),
        }

    def _invoke(self):
        raw = self._body()
        try:
            event = json.loads(raw) if raw else None
        except ValueError as e:
            return self._send(400, json.dumps({"error": f"the event is not JSON: {e}"}))
        status, result, error, out, err, ms = _call(event, self._context())
        self._send(
            200,
            json.dumps(
                {
                    "status": status,
                    "result": result,
                    "error": error,
                    "stdout": out,
                    "stderr": err,
                    "duration_ms": ms,
                }
            ),
        )

    def _http(self):
        raw = self._body()
        url = urlsplit(self.path)
        try:
            body, b64 = raw.decode(), False
        except UnicodeDecodeError:
            body, b64 = base64.b64encode(raw).decode(), True
        event = {
            "method": self.command,
            "path": url.path,
            "query": dict(parse_qsl(url.query)),
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
            "isBase64Encoded": b64,
        }
        status, result, error, out, err, _ = _call(event, self._context())
        sys.__stdout__.write(out)
        sys.__stderr__.write(err)
        if status != "ok":
            sys.__stderr__.write(error["traceback"])
            sys.__stderr__.flush()
            return self._send(500, json.dumps({"error": error["type"], "message": error["message"]}))
        if isinstance(result, dict) and ("statusCode" in result or "body" in result):
            code = int(result.get("statusCode", 200))
            headers = result.get("headers") or {}
            rbody = result.get("body", "")
            if result.get("isBase64Encoded"):
                rbody = base64.b64decode(rbody)
            elif not isinstance(rbody, (str, bytes)):
                rbody = json.dumps(rbody)
            ctype = next((v for k, v in headers.items() if k.lower() == "content-type"), "text/plain; charset=utf-8")
            return self._send(code, rbody, ctype, {k: v for k, v in headers.items() if k.lower() != "content-type"})
        return self._send(200, json.dumps(result))

    def do_GET(self):
        if self.path == "/__pandastack/health":
            return self._send(200, b"ok", "text/plain")
        self._http()

    def do_POST(self):
        if self.path == "/__pandastack/invoke":
            return self._invoke()
        self._http()

    do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _http


class _Server(ThreadingHTTPServer):
    """A thread per connection, as ThreadingHTTPServer; but connections go first to spare
    threads started before the snapshot, so the first call of a restored instance does not
    create a thread (slow under emulation) — a new one is started only when none is free."""

    daemon_threads = True
    allow_reuse_address = True
    spares = 2

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._handoff = queue.SimpleQueue()
        self._free = 0
        self._free_lock = threading.Lock()
        for _ in range(self.spares):
            threading.Thread(target=self._spare, daemon=True).start()

    def _spare(self):
        while True:
            with self._free_lock:
                self._free += 1
            request, client_address = self._handoff.get()
            self.process_request_thread(request, client_address)

    def process_request(self, request, client_address):
        with self._free_lock:
            if self._free > 0:
                self._free -= 1
                self._handoff.put((request, client_address))
                return
        super().process_request(request, client_address)


if __name__ == "__main__":
    print(f"pandastack: handler {HANDLER} imported; listening on {PORT}", file=sys.__stderr__, flush=True)
    _Server(("0.0.0.0", PORT), _Handler).serve_forever()
