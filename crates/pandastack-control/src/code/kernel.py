# PandaStack code interpreter, guest side. The host runs
# `python3 -c BOOT <this file> <kernel.mjs> CMD ARGS...` (BOOT below: it takes this source from
# argv, and this script takes kernel.mjs's, so a kernel can start more of itself without any
# file in the guest):
#
#   run CTX TIMEOUT [LANGUAGE]  code on stdin; JSON-lines events on stdout (see below)
#   start CTX LANGUAGE          make sure context CTX has a kernel; prints {"type": "ready"}
#   stop CTX                    end context CTX's kernel and forget the context (an error event
#                               named ContextNotFound if CTX was never created or is gone; the
#                               default contexts always are)
#
# Each context is one long-lived kernel process listening on a Unix socket under
# /run/pandastack-kernel; variables live in it between runs. The kernel is this script for
# Python (`serve`) and Bash (`serve-bash`: one bash process whose state, cwd, variables and
# functions, lives on), and kernel.mjs under Node.js for JavaScript and TypeScript. A context's
# marker file holds its language. `run` connects to the context's kernel (starting it first for
# a default context, `default` for Python and `default-<language>` for the others, or for a
# context created earlier whose kernel died), sends the code and copies the kernel's events to
# stdout until the kernel closes the connection. Kernels are ordinary guest processes: they
# survive hibernate/wake and every fork child gets a copy with the same variables.
#
# Events, one JSON object per line:
#   {"type": "stdout"|"stderr", "text": ...}   output as it happens (for Python and Bash
#                                               fd-level, so subprocesses are captured)
#   {"type": "result", "data": {"text": ..., "html"?: ..., "png"?: <base64>, ...}}
#   {"type": "error", "name": ..., "value": ..., "traceback": ...}
#   {"type": "done"}
# Only the standard library is used; matplotlib, if installed, runs with the Agg backend and
# every open figure is returned as a PNG after each run.

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time

BOOT = "import sys;SOURCE=sys.argv.pop(1);exec(compile(SOURCE,'<pandastack-kernel>','exec'))"
JS_SOURCE = sys.argv.pop(1) if len(sys.argv) > 1 else ""
DIR = os.environ.get("PANDASTACK_KERNEL_DIR", "/run/pandastack-kernel")
START_TIMEOUT = 30.0
LANGUAGES = ("python", "javascript", "typescript", "bash")
# Contexts every sandbox has without creating one, by language.
DEFAULTS = {"default": "python"}
DEFAULTS.update(("default-" + lang, lang) for lang in LANGUAGES if lang != "python")


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


def context_language(ctx):
    """CTX's language: a default context's own, else its marker's (None: no such context).
    Markers written before contexts had languages are empty: Python."""
    if ctx in DEFAULTS:
        return DEFAULTS[ctx]
    try:
        with open(paths(ctx)[1]) as f:
            return f.read().strip() or "python"
    except FileNotFoundError:
        return None


def ensure_kernel(ctx, lang):
    """A connection to CTX's kernel of language LANG, starting the kernel if needed."""
    s = connect(ctx)
    if s is not None:
        return s
    _, marker = paths(ctx)
    os.makedirs(DIR, mode=0o700, exist_ok=True)
    with open(marker, "w") as f:
        f.write(lang)
    if lang in ("javascript", "typescript") and not shutil.which("node"):
        raise RuntimeError(
            "node was not found in this sandbox: %s contexts need Node.js 20.12 or later "
            "(the code-interpreter and app templates have it)" % lang
        )
    if lang == "bash" and not shutil.which("bash"):
        raise RuntimeError("bash was not found in this sandbox")
    log_path = os.path.join(DIR, ctx + ".log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, SOURCE, JS_SOURCE, "serve", ctx, lang],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        s = connect(ctx)
        if s is not None:
            return s
        if proc.poll() not in (None, 0):
            with open(log_path, "rb") as f:
                said = f.read()[-2000:].decode("utf-8", "replace").strip()
            raise RuntimeError("the %s kernel exited at start: %s" % (lang, said or "no output"))
        time.sleep(0.02)
    raise RuntimeError("the kernel did not start within %ds" % START_TIMEOUT)


def fail(name, value):
    emit({"type": "error", "name": name, "value": value, "traceback": ""})
    emit({"type": "done"})
    return 0


def client_run(ctx, timeout, asked):
    code = sys.stdin.buffer.read().decode("utf-8", "replace")
    lang = context_language(ctx)
    if lang is None:
        return fail("ContextNotFound", ctx)
    if asked and asked != lang:
        return fail("WrongLanguage", "context %s runs %s, not %s" % (ctx, lang, asked))
    try:
        s = ensure_kernel(ctx, lang)
    except Exception as e:
        return fail("KernelError", str(e))
    s.sendall((json.dumps({"code": code, "timeout": timeout}) + "\n").encode())
    out = sys.stdout.buffer
    tail = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out.write(chunk)
        out.flush()
        tail = (tail + chunk)[-64:]
    if not tail.rstrip().endswith(b"}") or b'"done"' not in tail.rstrip().rsplit(b"\n", 1)[-1]:
        return fail(
            "KernelError",
            "the kernel of context %s ended during the run: its state is gone, and the next run "
            "starts a new one" % ctx,
        )
    return 0


def read_request(conn):
    """A kernel's request: one JSON line from the client ({} for a connection check)."""
    line = b""
    while not line.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        line += chunk
    return json.loads(line or b"{}")


def client_start(ctx, lang):
    s = ensure_kernel(ctx, lang)
    s.close()
    emit({"type": "ready"})
    return 0


def client_stop(ctx):
    sock_path, marker = paths(ctx)
    s = connect(ctx)
    if s is None and ctx not in DEFAULTS and not os.path.exists(marker):
        emit({"type": "error", "name": "ContextNotFound", "value": ctx, "traceback": ""})
        emit({"type": "done"})
        return 0
    if s is not None:
        s.sendall(b'{"stop": true}\n')
        s.recv(1)
        s.close()
    for p in (sock_path, marker, os.path.join(DIR, ctx + ".log")):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    emit({"type": "done"})
    return 0


# ---- the kernel -------------------------------------------------------------------------------


def serve(ctx, lang):
    """Serves context CTX in language LANG, unless another kernel already does (its lock)."""
    import fcntl

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
    if lang in ("javascript", "typescript"):
        # Node holds the lock from here: the open file goes with the exec.
        os.set_inheritable(lock.fileno(), True)
        argv = ["node", "--disable-warning=ExperimentalWarning", "--input-type=module"]
        os.execvp("node", argv + ["-e", JS_SOURCE, "serve", ctx, lang])
    if lang == "bash":
        return serve_bash(ctx, sock_path)
    return serve_python(ctx, sock_path)


def serve_python(ctx, sock_path):
    import _thread
    import ast
    import linecache
    import signal
    import threading
    import traceback

    os.environ.setdefault("MPLBACKEND", "Agg")

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
            req = read_request(conn)
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


def serve_bash(ctx, sock_path):
    """One bash process for the context: each run's code is sourced into it (its stdin is
    /dev/null), so the working directory, variables, functions and options live on. The exit
    status of a run's last command is reported through a pipe of its own; a non-zero one is an
    error event named ExitStatus. At the bound the run's processes get SIGINT (bash itself
    traps it and stops sourcing), then SIGKILL if they have not ended 2 s later; a shell that
    exits (`exit`) ends the kernel, and the next run starts a fresh one."""
    import select
    import shlex
    import signal

    status_r, status_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    cell = os.path.join(DIR, ctx + ".cell")
    home = os.environ.get("HOME") or "/"
    shell = subprocess.Popen(
        ["bash", "--noprofile", "--norc"],
        stdin=subprocess.PIPE,
        stdout=out_w,
        stderr=err_w,
        pass_fds=(status_w,),
        cwd=home if os.path.isdir(home) else "/",
        start_new_session=True,
        # A shell started with SIGINT ignored could not trap it (see TRAP).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    for fd in (out_w, err_w, status_w):
        os.close(fd)
    for fd in (out_r, err_r, status_r):
        os.set_blocking(fd, False)
    names = {out_r: "stdout", err_r: "stderr"}

    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    os.chmod(sock_path, 0o600)
    srv.listen(64)

    def forward(conn, fd):
        """Sends what FD has to CONN: True if something was read, False if nothing was, None
        if the client is gone."""
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return False
        if not data:
            return False
        if conn is not None:
            line = json.dumps({"type": names[fd], "text": data.decode("utf-8", "replace")})
            try:
                conn.sendall((line + "\n").encode())
            except OSError:
                return None
        return True

    def error(name, value):
        return {"type": "error", "name": name, "value": value, "traceback": ""}

    def finish(conn=None, why=None):
        """Ends the kernel: the client, if any, gets WHY (an error event) and done first."""
        if conn is not None:
            for ev in [why, {"type": "done"}]:
                conn.sendall((json.dumps(ev) + "\n").encode())
            conn.close()
        try:
            os.unlink(sock_path)
        except FileNotFoundError:
            pass
        os._exit(0)

    def run(conn, code, timeout):
        """Runs CODE; returns the events that end the run (before done)."""
        with open(cell, "w") as f:
            f.write(code)
        # The trap is set again for each run: after a `return` from it, bash runs it no more.
        cmd = '%s{ source %s; } </dev/null; printf "%%s\\n" "$?" >&%d\n' % (
            TRAP,
            shlex.quote(cell),
            status_w,
        )
        try:
            shell.stdin.write(cmd.encode())
            shell.stdin.flush()
        except OSError:
            return [error("KernelError", "the shell has exited")]
        deadline = time.monotonic() + timeout if timeout > 0 else None
        interrupted = None
        status = b""
        while True:
            wait = 0.5
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.monotonic()))
            ready, _, _ = select.select([out_r, err_r, status_r], [], [], wait)
            for fd in ready:
                if fd == status_r:
                    try:
                        status += os.read(status_r, 64)
                    except BlockingIOError:
                        pass
                elif forward(conn, fd) is None:
                    conn = None
                    if interrupted is None:
                        interrupted = time.monotonic()  # the client left: stop the run
                        os.killpg(shell.pid, signal.SIGINT)
            if status.endswith(b"\n"):
                for fd in (out_r, err_r):
                    while forward(conn, fd) is True:
                        pass
                rc = int(status.strip() or b"0")
                if interrupted is not None:
                    return [error("TimeoutError", "execution timed out after %gs" % timeout)]
                if rc != 0:
                    return [error("ExitStatus", "exit status %d" % rc)]
                return []
            if shell.poll() is not None:
                for fd in (out_r, err_r):
                    while forward(conn, fd) is True:
                        pass
                why = "the shell exited with status %d; the next run starts a new one"
                finish(conn, error("Exit", why % shell.returncode))
            now = time.monotonic()
            if deadline is not None and interrupted is None and now >= deadline:
                interrupted = now
                os.killpg(shell.pid, signal.SIGINT)
            elif interrupted is not None and now - interrupted > 2.0:
                # Still running: the shell and everything it started end.
                os.killpg(shell.pid, signal.SIGKILL)
                shell.wait()
                why = "execution timed out after %gs; the shell was ended, the next run starts a new one"
                finish(conn, error("TimeoutError", why % timeout))

    while True:
        conn, _ = srv.accept()
        try:
            req = read_request(conn)
            if req.get("stop"):
                conn.sendall(b"x")
                conn.close()
                os.killpg(shell.pid, signal.SIGKILL)
                finish()
            if "code" not in req:
                continue  # a connection check
            for ev in run(conn, req.get("code", ""), float(req.get("timeout") or 0)) + [{"type": "done"}]:
                conn.sendall((json.dumps(ev) + "\n").encode())
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass


# Traps INT so that only the running commands stop, never the shell; `return` ends the sourcing
# of the cell.
TRAP = "trap 'return 130 2>/dev/null' INT; "



def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "run" and len(argv) in (4, 5):
        return client_run(argv[2], float(argv[3]), argv[4] if len(argv) == 5 else "")
    if cmd == "start" and len(argv) in (3, 4):
        return client_start(argv[2], argv[3] if len(argv) == 4 else "python")
    if cmd == "stop" and len(argv) == 3:
        return client_stop(argv[2])
    if cmd == "serve" and len(argv) == 4 and argv[3] in LANGUAGES:
        return serve(argv[2], argv[3])
    sys.stderr.write("usage: kernel run CTX TIMEOUT [LANGUAGE] | start CTX [LANGUAGE] | stop CTX\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
