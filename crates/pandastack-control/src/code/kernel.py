# PandaStack code interpreter, guest side. The host runs
# `python3 -c BOOT <this file> CMD ARGS...` (BOOT below: it takes the source from argv, so a
# kernel can start more of itself without any file in the guest):
#
#   run CTX TIMEOUT   code on stdin; JSON-lines events on stdout (see below)
#   start CTX         make sure context CTX has a kernel; prints {"type": "ready"}
#   stop CTX          end context CTX's kernel and forget the context (an error event named
#                     ContextNotFound if CTX was never created or is gone; `default` always is)
#
# Each context is one long-lived Python process (the kernel) listening on a Unix socket under
# /run/pandastack-kernel; variables live in it between runs. `run` connects to it (starting
# it first for the `default` context, or for a context created earlier whose kernel died),
# sends the code and copies the kernel's events to stdout until the kernel closes the
# connection. Kernels are ordinary guest processes: they survive hibernate/wake and every
# fork child gets a copy with the same variables.
#
# Events, one JSON object per line:
#   {"type": "stdout"|"stderr", "text": ...}   output as it happens (fd-level, so
#                                               subprocesses and C extensions are captured)
#   {"type": "result", "data": {"text": ..., "html"?: ..., "png"?: <base64>, ...}}
#   {"type": "error", "name": ..., "value": ..., "traceback": ...}
#   {"type": "done"}
# Only the standard library is used; matplotlib, if installed, runs with the Agg backend and
# every open figure is returned as a PNG after each run.

import base64
import json
import os
import socket
import subprocess
import sys
import time

BOOT = "import sys;SOURCE=sys.argv.pop(1);exec(compile(SOURCE,'<pandastack-kernel>','exec'))"
DIR = os.environ.get("PANDASTACK_KERNEL_DIR", "/run/pandastack-kernel")
START_TIMEOUT = 30.0


def emit(obj, out=None):
    line = (json.dumps(obj) + "\n").encode()
    (out or sys.stdout.buffer).write(line)
    (out or sys.stdout.buffer).flush()


def paths(ctx):
    return os.path.join(DIR, ctx + ".sock"), os.path.join(DIR, ctx + ".ctx")


def connect(ctx):
    sock_path, _ = paths(ctx)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock_path)
        return s
    except OSError:
        s.close()
        return None


def ensure_kernel(ctx, create):
    """A connection to CTX's kernel, starting the kernel if needed (and allowed)."""
    s = connect(ctx)
    if s is not None:
        return s
    _, marker = paths(ctx)
    if not create and not os.path.exists(marker):
        return None
    os.makedirs(DIR, mode=0o700, exist_ok=True)
    with open(marker, "a"):
        pass
    subprocess.Popen(
        [sys.executable, "-c", BOOT, SOURCE, "serve", ctx],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        s = connect(ctx)
        if s is not None:
            return s
        time.sleep(0.02)
    raise RuntimeError("the kernel did not start within %ds" % START_TIMEOUT)


def client_run(ctx, timeout):
    code = sys.stdin.buffer.read().decode("utf-8", "replace")
    try:
        s = ensure_kernel(ctx, create=(ctx == "default"))
    except Exception as e:
        emit({"type": "error", "name": "KernelError", "value": str(e), "traceback": ""})
        emit({"type": "done"})
        return 0
    if s is None:
        emit({"type": "error", "name": "ContextNotFound", "value": ctx, "traceback": ""})
        emit({"type": "done"})
        return 0
    s.sendall((json.dumps({"code": code, "timeout": timeout}) + "\n").encode())
    out = sys.stdout.buffer
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out.write(chunk)
        out.flush()
    return 0


def client_start(ctx):
    s = ensure_kernel(ctx, create=True)
    s.close()
    emit({"type": "ready"})
    return 0


def client_stop(ctx):
    sock_path, marker = paths(ctx)
    s = connect(ctx)
    if s is None and ctx != "default" and not os.path.exists(marker):
        emit({"type": "error", "name": "ContextNotFound", "value": ctx, "traceback": ""})
        emit({"type": "done"})
        return 0
    if s is not None:
        s.sendall(b'{"stop": true}\n')
        s.recv(1)
        s.close()
    for p in (sock_path, marker):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    emit({"type": "done"})
    return 0


# ---- the kernel -------------------------------------------------------------------------------


def serve(ctx):
    import _thread
    import ast
    import fcntl
    import linecache
    import signal
    import threading
    import traceback

    os.environ.setdefault("MPLBACKEND", "Agg")
    sock_path, _ = paths(ctx)
    lock = open(os.path.join(DIR, ctx + ".lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another kernel serves this context
    try:
        os.unlink(sock_path)
    except FileNotFoundError:
        pass

    # fd 1 and 2 become pipes read by a pump thread, which forwards to the current client.
    state = {"conn": None}
    send_lock = threading.Lock()

    def send(obj):
        conn = state["conn"]
        if conn is None:
            return
        data = (json.dumps(obj) + "\n").encode()
        with send_lock:
            try:
                conn.sendall(data)
            except OSError:
                # The client is gone (cancelled, timed out on the host, output over the
                # limit): stop the running code rather than let it run unobserved.
                state["conn"] = None
                if state.get("running"):
                    _thread.interrupt_main()

    pipes = {}
    for fd, name in ((1, "stdout"), (2, "stderr")):
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        os.set_blocking(r, False)
        pipes[r] = name
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)
    wake_r, wake_w = os.pipe()
    drained = threading.Event()
    drain_req = threading.Event()

    def pump():
        import select

        while True:
            ready, _, _ = select.select(list(pipes) + [wake_r], [], [], None)
            for fd in ready:
                if fd == wake_r:
                    os.read(wake_r, 64)
                    continue
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if data:
                    send({"type": pipes[fd], "text": data.decode("utf-8", "replace")})
            if drain_req.is_set():
                # Read what is left until both pipes are empty, then report.
                for fd in pipes:
                    while True:
                        try:
                            data = os.read(fd, 65536)
                        except BlockingIOError:
                            break
                        if not data:
                            break
                        send({"type": pipes[fd], "text": data.decode("utf-8", "replace")})
                drain_req.clear()
                drained.set()

    threading.Thread(target=pump, daemon=True).start()

    def flush_output():
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        drained.clear()
        drain_req.set()
        os.write(wake_w, b"x")
        drained.wait(5)

    class Timeout(KeyboardInterrupt):
        pass

    def on_alarm(signum, frame):
        raise Timeout()

    signal.signal(signal.SIGALRM, on_alarm)

    def bundle(value):
        data = {}
        mb = getattr(value, "_repr_mimebundle_", None)
        if callable(mb):
            try:
                got = mb()
                if isinstance(got, tuple):
                    got = got[0]
                for mime, key in (
                    ("text/plain", "text"),
                    ("text/html", "html"),
                    ("image/png", "png"),
                    ("image/svg+xml", "svg"),
                    ("text/markdown", "markdown"),
                    ("application/json", "json"),
                ):
                    if mime in got:
                        data[key] = got[mime]
            except Exception:
                pass
        for meth, key in (
            ("_repr_html_", "html"),
            ("_repr_png_", "png"),
            ("_repr_svg_", "svg"),
            ("_repr_markdown_", "markdown"),
            ("_repr_json_", "json"),
        ):
            if key in data:
                continue
            f = getattr(value, meth, None)
            if callable(f):
                try:
                    v = f()
                except Exception:
                    continue
                if v is not None:
                    data[key] = v
        if isinstance(data.get("png"), (bytes, bytearray)):
            data["png"] = base64.b64encode(data["png"]).decode()
        if "text" not in data:
            try:
                data["text"] = repr(value)
            except Exception as e:
                data["text"] = "<repr failed: %s>" % e
        return data

    def display(*values):
        for v in values:
            flush_output()
            send({"type": "result", "data": bundle(v)})

    def figures():
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        import io

        for num in plt.get_fignums():
            fig = plt.figure(num)
            buf = io.BytesIO()
            try:
                fig.savefig(buf, format="png", bbox_inches="tight")
            except Exception as e:
                send({"type": "stderr", "text": "figure %s: %s\n" % (num, e)})
                continue
            send(
                {
                    "type": "result",
                    "data": {"text": repr(fig), "png": base64.b64encode(buf.getvalue()).decode()},
                }
            )
        plt.close("all")

    namespace = {"__name__": "__main__", "__builtins__": __builtins__, "display": display}
    counter = [0]

    def run(code, timeout):
        counter[0] += 1
        filename = "<cell-%d>" % counter[0]
        # Tracebacks show the cell's source lines.
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            tree = ast.parse(code, filename, "exec")
        except SyntaxError as e:
            send(
                {
                    "type": "error",
                    "name": type(e).__name__,
                    "value": str(e),
                    "traceback": "".join(traceback.format_exception_only(type(e), e)),
                }
            )
            return
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        if timeout > 0:
            signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            exec(compile(tree, filename, "exec"), namespace)
            if last is not None:
                value = eval(compile(last, filename, "eval"), namespace)
                if value is not None:
                    namespace["_"] = value
                    flush_output()
                    send({"type": "result", "data": bundle(value)})
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if isinstance(e, Timeout):
                name, value = "TimeoutError", "execution timed out after %gs" % timeout
            elif isinstance(e, SystemExit):
                name, value = "SystemExit", str(e.code)
            else:
                name, value = type(e).__name__, str(e)
            # The user's frames only: none of the kernel's own (exec, the alarm handler).
            frames = [
                f for f in traceback.extract_tb(e.__traceback__) if f.filename != "<pandastack-kernel>"
            ]
            text = "%s: %s\n" % (name, value)
            if frames:
                text = (
                    "Traceback (most recent call last):\n"
                    + "".join(traceback.format_list(frames))
                    + text
                )
            flush_output()
            send({"type": "error", "name": name, "value": value, "traceback": text})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            figures()
        except Exception as e:
            send({"type": "stderr", "text": "figures: %s\n" % e})

    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    os.chmod(sock_path, 0o600)
    srv.listen(64)
    home = os.environ.get("HOME") or "/"
    try:
        os.chdir(home)
    except OSError:
        os.chdir("/")
    sys.path.insert(0, "")
    while True:
        conn = None
        try:
            conn, _ = srv.accept()
            line = b""
            while not line.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                line += chunk
            req = json.loads(line or b"{}")
            if "code" not in req and not req.get("stop"):
                continue  # a connection check
            if req.get("stop"):
                conn.sendall(b"x")
                conn.close()
                srv.close()
                os._exit(0)
            state["conn"] = conn
            state["running"] = True
            try:
                run(req.get("code", ""), float(req.get("timeout") or 0))
            finally:
                state["running"] = False
            flush_output()
            send({"type": "done"})
        except KeyboardInterrupt:
            pass  # a late interrupt for a client that already left
        except Exception as e:
            send({"type": "error", "name": "KernelError", "value": str(e), "traceback": ""})
        finally:
            state["conn"] = None
            if conn is not None:
                try:
                    conn.close()
                except OSError:
                    pass


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "run" and len(argv) == 4:
        return client_run(argv[2], float(argv[3]))
    if cmd == "start" and len(argv) == 3:
        return client_start(argv[2])
    if cmd == "stop" and len(argv) == 3:
        return client_stop(argv[2])
    if cmd == "serve" and len(argv) == 3:
        return serve(argv[2])
    sys.stderr.write("usage: kernel run CTX TIMEOUT | start CTX | stop CTX\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
