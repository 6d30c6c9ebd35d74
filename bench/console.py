#!/usr/bin/env python3
"""The web console's figures (issue #40), measured in a real browser (Debian's Chromium driven by
Playwright) against a real `pandastack server` with real guests:

- **First load of the sandbox list** with `--sandboxes` (200) sandboxes: a fresh, signed-in
  page load of `/#/sandboxes`, from navigation start (`performance.now()` is 0 there) until
  every row is in the table (`main table tbody tr[data-key]`, counted by a MutationObserver
  installed before the page's own scripts run) — `first_load_warm_ms` with the console's files
  in the browser's cache (a returning user: a new tab in a context that loaded the console
  before), `first_load_cold_ms` with an empty cache (a new browser context given only the
  session cookie). `*_painted_ms` is the end of the frame after that (requestAnimationFrame,
  then a task); `*_list_end_ms` is when the last `GET /v1/sandboxes?limit=…` response ended
  (Resource Timing), so the rest is rendering, and `*_list_start_ms` when the page asked for it
  (before it: the document, the console's modules, `GET /console/session`, the page's module);
  `list_request_ms` is that request alone.
- **Live update**: a state change made through the API on the host, and the time the open
  page shows it. A MutationObserver on the table's body notes `Date.now()` when a row appears
  with a state, or goes; the host notes `time.time()` around the API call — one machine, one
  clock. `live_state_ms`: `POST …/pause` or `…/resume` (alternately) answered → the row says
  `paused` / `running`; `live_create_ms`: `POST /v1/sandboxes` answered → a row for it says
  `running`; `live_delete_ms`: `DELETE` answered → its row is gone. `*_from_request_ms` counts
  from the moment the call was sent instead.

It starts its own server (scripts/dev-server.sh; `PANDASTACK_BIN`, default
target/debug/pandastack — use a release build for figures worth keeping), makes the sandboxes
of template `minimal` (`--workers` at a time, each hibernated as soon as it is up, so that at
most a few VMs run at once; one stays running for the pause/resume runs), measures, prints
p50/p99/min/max, writes `--json`, and stops the server (which destroys its sandboxes) however
it ends. The console measured is the one embedded in the binary, unless `--console-dir` makes
the server read it from disk (slower: every request re-reads and hashes the directory).

    source /tmp/env.sh   # PANDASTACK_KERNEL, PANDASTACK_GUEST_AGENT, … as for scripts/dev-server.sh
    PANDASTACK_BIN=target/release/pandastack \\
      /var/cache/pandastack/venv-console/bin/python bench/console.py --json bench/console.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROWS = "main table tbody tr[data-key]"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The server and its API


class Api:
    def __init__(self, base: str, key: str):
        self.base = base.rstrip("/")
        self.key = key

    def call(self, method: str, path: str, body=None, timeout: float = 300):
        """`(status, json body)`; a 429 is waited out (Retry-After) and tried again."""
        for _ in range(20):
            data = None if body is None else json.dumps(body).encode()
            req = urllib.request.Request(self.base + path, data=data, method=method)
            req.add_header("Authorization", f"Bearer {self.key}")
            req.add_header("Accept", "application/json")
            if data is not None:
                req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=timeout) as r:
                    raw, status = r.read(), r.status
            except urllib.error.HTTPError as e:
                raw, status = e.read(), e.code
                if status == 429:
                    time.sleep(float(e.headers.get("Retry-After") or 1))
                    continue
            return status, (json.loads(raw) if raw else None)
        raise RuntimeError(f"{method} {path}: still rate limited")

    def ok(self, method: str, path: str, body=None, want=(200, 201, 204)):
        status, out = self.call(method, path, body)
        if status not in want:
            raise RuntimeError(f"{method} {path} → {status}: {out}")
        return out

    def list_all(self, path: str) -> list:
        out, cursor = [], None
        while True:
            q = f"{path}?limit=200" + (f"&cursor={cursor}" if cursor else "")
            page = self.ok("GET", q)
            out += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                return out


def start_server(name: str, port: int | None, console_dir: str | None) -> dict:
    env = dict(os.environ)
    env["PANDASTACK_BIN"] = server_bin()
    env.pop("PANDASTACK_CONSOLE_DIR", None)
    if console_dir:
        env["PANDASTACK_CONSOLE_DIR"] = str(Path(console_dir).resolve())
    cmd = [str(REPO / "scripts/dev-server.sh"), "start", name] + ([str(port)] if port else [])
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    found = dict(re.findall(r"^export (\w+)=(.*)$", out, re.M))
    return found


def stop_server(name: str) -> None:
    env = dict(os.environ, PANDASTACK_BIN=server_bin())
    subprocess.run([str(REPO / "scripts/dev-server.sh"), "stop", name], env=env, check=False)


def server_bin() -> str:
    return os.environ.get("PANDASTACK_BIN") or str(REPO / "target/debug/pandastack")


def mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1 << 20)
    return math.inf


def host_info() -> dict:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    try:
        qemu = subprocess.run(["qemu-system-x86_64", "--version"], stdout=subprocess.PIPE, text=True).stdout
        qemu = qemu.splitlines()[0] if qemu else ""
    except OSError:
        qemu = ""
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    return {"cpus": os.cpu_count(), "cpu_model": cpu, "memory_gib": mem_kib // (1 << 20), "qemu": qemu}


# ---------------------------------------------------------------------------------------------
# Setup: N sandboxes, all but one hibernated


def make_sandboxes(api: Api, n: int, workers: int, min_free_gib: float) -> tuple[str, list[str]]:
    """Creates `n` sandboxes of `minimal`; returns (the one left running, all ids)."""
    t = time.monotonic()
    live = api.ok("POST", "/v1/sandboxes", {"template": "minimal", "metadata": {"bench": "console"}})["id"]
    log(f"first sandbox {live} running after {time.monotonic() - t:.1f} s (template baked if it was not)")
    ids = [live]
    lock = threading.Lock()
    done = [1]

    def one(i: int) -> str:
        for _ in range(120):
            if mem_available_gib() >= min_free_gib:
                break
            time.sleep(1)
        else:
            raise RuntimeError(f"memory stayed below {min_free_gib} GiB available")
        sb = api.ok("POST", "/v1/sandboxes", {"template": "minimal", "metadata": {"bench": "console", "n": str(i)}})
        api.ok("POST", f"/v1/sandboxes/{sb['id']}/hibernate")
        with lock:
            done[0] += 1
            if done[0] % 25 == 0:
                log(f"{done[0]}/{n} sandboxes ({time.monotonic() - t:.0f} s, {mem_available_gib():.1f} GiB available)")
        return sb["id"]

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        ids += list(pool.map(one, range(1, n)))
    log(f"{n} sandboxes in {time.monotonic() - t:.0f} s")
    return live, ids


# ---------------------------------------------------------------------------------------------
# First load

# Runs before the page's own scripts: notes when the table first holds `want` rows.
LOAD_OBSERVER = """
(() => {
  const want = %d;
  const b = (window.__bench = { dom: null, frame: null });
  const obs = new MutationObserver(() => {
    if (b.dom !== null || document.querySelectorAll(%s).length < want) return;
    b.dom = performance.now();
    obs.disconnect();
    requestAnimationFrame(() => setTimeout(() => { b.frame = performance.now(); }, 0));
  });
  obs.observe(document, { childList: true, subtree: true });
})();
"""

LOAD_RESULT = """
() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const res = performance.getEntriesByType("resource");
  const lists = res.filter((e) => e.name.includes("/v1/sandboxes?limit="));
  const assets = res.filter((e) => e.name.includes("/console/assets/"));
  const session = res.find((e) => e.name.endsWith("/console/session"));
  return {
    dom: window.__bench.dom,
    frame: window.__bench.frame,
    rows: document.querySelectorAll(%s).length,
    doc_end: nav.responseEnd,
    dom_content_loaded: nav.domContentLoadedEventEnd,
    session_end: session ? session.responseEnd : null,
    list_start: lists.length ? lists[0].startTime : null,
    list_end: lists.length ? lists[lists.length - 1].responseEnd : null,
    list_requests: lists.length,
    assets: assets.length,
    assets_from_network: assets.filter((e) => e.transferSize > 0).length,
  };
}
"""


def new_context(browser, state=None):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860}, storage_state=state)
    ctx.set_default_timeout(60_000)
    return ctx


def watch_errors(pg, errors: list) -> None:
    pg.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    pg.on(
        "console",
        lambda m: errors.append(f"console: {m.text}")
        if m.type == "error" and not m.text.startswith("Failed to load resource")
        else None,
    )


def sign_in(ctx, base: str, key: str) -> None:
    pg = ctx.new_page()
    pg.goto(base + "/")
    pg.get_by_label("API key").fill(key)
    pg.get_by_role("button", name="Sign in").click()
    pg.wait_for_selector("nav#nav:not([hidden])")
    pg.close()


def load_once(ctx, base: str, n: int, errors: list) -> dict:
    pg = ctx.new_page()
    watch_errors(pg, errors)
    pg.goto(base + "/#/sandboxes", wait_until="commit")
    pg.wait_for_function("() => window.__bench && window.__bench.frame !== null")
    r = pg.evaluate(LOAD_RESULT % json.dumps(ROWS))
    pg.close()
    if r["rows"] < n:
        raise RuntimeError(f"the table holds {r['rows']} rows, not {n}")
    if errors:
        raise RuntimeError("the page reported errors:\n" + "\n".join(errors))
    return r


# ---------------------------------------------------------------------------------------------
# Live update

# Notes, per row key, when it first appeared with each state and when it went (Date.now()).
LIVE_OBSERVER = """
() => {
  const tb = document.querySelector("main table tbody");
  window.__seen = {};
  const note = (k, what, t) => { if (!((k + "|" + what) in window.__seen)) window.__seen[k + "|" + what] = t; };
  new MutationObserver((recs) => {
    const t = Date.now();
    for (const r of recs) {
      for (const el of r.addedNodes) {
        if (el.nodeType !== 1 || !el.dataset.key) continue;
        const st = el.querySelector('td[data-label="State"]');
        note(el.dataset.key, "present", t);
        if (st) note(el.dataset.key, "state:" + st.textContent.trim(), t);
      }
      for (const el of r.removedNodes) {
        if (el.nodeType !== 1 || !el.dataset.key) continue;
        if (!tb.querySelector(`tr[data-key="${CSS.escape(el.dataset.key)}"]`)) note(el.dataset.key, "gone", t);
      }
    }
  }).observe(tb, { childList: true });
}
"""


def timed(api: Api, method: str, path: str, body=None):
    t0 = time.time() * 1000
    out = api.ok(method, path, body)
    t1 = time.time() * 1000
    return t0, t1, out


def seen(pg, key: str, what: str) -> float:
    expr = f"window.__seen[{json.dumps(key + '|' + what)}]"
    pg.wait_for_function(f"() => {expr} !== undefined", timeout=30_000)
    return pg.evaluate(f"() => {expr}")


# ---------------------------------------------------------------------------------------------


def stats(xs: list[float], unit: str = "ms") -> dict:
    s = sorted(xs)

    def pick(q: float) -> float:
        i = min(max(math.ceil(len(s) * q), 1), len(s)) - 1
        return round(s[i], 1)

    return {"p50": pick(0.5), "p99": pick(0.99), "min": round(s[0], 1), "max": round(s[-1], 1), "n": len(s), "unit": unit}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sandboxes", type=int, default=200, help="sandboxes in the list (default 200)")
    ap.add_argument("--load-runs", type=int, default=20, help="first loads, each warm and cold (default 20)")
    ap.add_argument("--live-runs", type=int, default=20, help="pause/resume state changes (default 20)")
    ap.add_argument("--create-runs", type=int, default=5, help="creates and deletes watched live (default 5)")
    ap.add_argument("--workers", type=int, default=3, help="sandboxes made at once during setup (default 3)")
    ap.add_argument("--min-free-gib", type=float, default=3.0, help="wait before a create while less memory is available")
    ap.add_argument("--name", default="bench-console", help="dev-server name (data dir /var/lib/pandastack/NAME)")
    ap.add_argument("--port", type=int, help="API port (default: a free one)")
    ap.add_argument("--console-dir", help="serve the console from this directory (PANDASTACK_CONSOLE_DIR)")
    ap.add_argument("--chromium", default=os.environ.get("PANDASTACK_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()

    from playwright.sync_api import sync_playwright

    if not Path(server_bin()).is_file():
        sys.exit(f"no server binary at {server_bin()}: build it or set PANDASTACK_BIN")
    # A SIGTERM ends the run through the `finally` below, like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    samples: dict[str, list[float]] = {}
    info: dict = {}
    add = lambda k, v: samples.setdefault(k, []).append(v)  # noqa: E731

    log(f"starting server {a.name} ({server_bin()})")
    try:
        env = start_server(a.name, a.port, a.console_dir)
        base, key = env["PANDASTACK_BASE_URL"], env["PANDASTACK_API_KEY"]
        api = Api(base, key)
        log(f"server at {base}; {mem_available_gib():.1f} GiB available")
        live, ids = make_sandboxes(api, a.sandboxes, a.workers, a.min_free_gib)
        listed = api.list_all("/v1/sandboxes")
        if len(listed) != a.sandboxes:
            raise RuntimeError(f"the API lists {len(listed)} sandboxes, not {a.sandboxes}")
        states = {}
        for sb in listed:
            states[sb["state"]] = states.get(sb["state"], 0) + 1
        log(f"listed: {states}; {mem_available_gib():.1f} GiB available")
        info["states"] = states
        index = urllib.request.urlopen(base + "/").read().decode()
        m = re.search(r"/console/assets/([^/\"]+)/", index)
        info["console_build"] = m.group(1) if m else None

        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=a.chromium, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
            )
            info["chromium"] = browser.version
            observer = LOAD_OBSERVER % (a.sandboxes, json.dumps(ROWS))
            warm = new_context(browser)
            warm.add_init_script(observer)
            sign_in(warm, base, key)
            state = warm.storage_state()
            errors: list[str] = []
            load_once(warm, base, a.sandboxes, errors)  # fills the cache, off the clock
            info["loadavg_before"] = os.getloadavg()
            log(f"first loads: {a.load_runs} warm and {a.load_runs} cold, alternating (load average {info['loadavg_before'][0]:.2f})")
            for i in range(a.load_runs):
                cold = new_context(browser, state)
                cold.add_init_script(observer)
                for kind, ctx in (("cold", cold), ("warm", warm)):
                    r = load_once(ctx, base, a.sandboxes, errors)
                    add(f"first_load_{kind}_ms", r["dom"])
                    add(f"first_load_{kind}_painted_ms", r["frame"])
                    add(f"first_load_{kind}_list_start_ms", r["list_start"])
                    add(f"first_load_{kind}_list_end_ms", r["list_end"])
                    add("list_request_ms", r["list_end"] - r["list_start"])
                    info.setdefault(f"{kind}_sample", r)
                    if kind == "warm" and r["assets_from_network"]:
                        raise RuntimeError(f"a warm load fetched {r['assets_from_network']} console files: {r}")
                cold.close()
                log(f"  run {i + 1}: cold {samples['first_load_cold_ms'][-1]:.0f} ms, warm {samples['first_load_warm_ms'][-1]:.0f} ms")

            log(f"live updates: {a.live_runs} pause/resume, {a.create_runs} creates and deletes")
            pg = warm.new_page()
            watch_errors(pg, errors)
            pg.goto(base + "/#/sandboxes")
            pg.wait_for_function(f"() => document.querySelectorAll({json.dumps(ROWS)}).length >= {a.sandboxes}")
            pg.evaluate(LIVE_OBSERVER)
            running = True
            for i in range(a.live_runs):
                action, want = ("pause", "paused") if running else ("resume", "running")
                pg.evaluate("() => { window.__seen = {}; }")
                t0, t1, _ = timed(api, "POST", f"/v1/sandboxes/{live}/{action}")
                t = seen(pg, live, "state:" + want)
                running = not running
                add("live_state_ms", t - t1)
                add("live_state_from_request_ms", t - t0)
                add(f"api_{action}_ms", t1 - t0)
                time.sleep(0.3)
            for i in range(a.create_runs):
                pg.evaluate("() => { window.__seen = {}; }")
                t0, t1, sb = timed(api, "POST", "/v1/sandboxes", {"template": "minimal", "metadata": {"bench": "console-live"}})
                t = seen(pg, sb["id"], "state:running")
                add("live_create_ms", t - t1)
                add("live_create_from_request_ms", t - t0)
                add("api_create_ms", t1 - t0)
                time.sleep(0.3)
                t0, t1, _ = timed(api, "DELETE", f"/v1/sandboxes/{sb['id']}")
                t = seen(pg, sb["id"], "gone")
                add("live_delete_ms", t - t1)
                add("live_delete_from_request_ms", t - t0)
                time.sleep(0.3)
            pg.close()
            info["loadavg_after"] = os.getloadavg()
            if errors:
                raise RuntimeError("the page reported errors:\n" + "\n".join(errors))
            browser.close()
    finally:
        log(f"stopping server {a.name}")
        stop_server(a.name)

    metrics = {k: stats(v) for k, v in sorted(samples.items())}
    print(f"{'metric':<36} {'p50':>8} {'p99':>8} {'min':>8} {'max':>8} {'n':>4}")
    for k, m in metrics.items():
        print(f"{k:<36} {m['p50']:>8} {m['p99']:>8} {m['min']:>8} {m['max']:>8} {m['n']:>4}")
    targets = {
        "first_load_warm": metrics["first_load_warm_ms"]["p50"] <= 1000,
        "first_load_cold": metrics["first_load_cold_ms"]["p50"] <= 1000,
    }
    print(f"targets (first load p50 ≤ 1000 ms): {targets}")
    if a.json:
        try:
            commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True).stdout.strip()
        except OSError:
            commit = ""
        out = {
            "name": "console",
            "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": commit,
            "server_bin": server_bin(),
            "host": host_info(),
            "sandboxes": a.sandboxes,
            "template": "minimal",
            "targets_met": targets,
            **info,
            "metrics": metrics,
            "samples": {k: [round(x, 1) for x in v] for k, v in sorted(samples.items())},
        }
        Path(a.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
        log(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
