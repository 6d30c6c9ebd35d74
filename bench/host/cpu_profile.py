"""Where the host's CPU goes while a running server does one kind of work, per operation.

Samples every CPU with `perf record -a -e cpu-clock` while it drives a PandaStack server through
its REST API, then splits the samples by process and, inside QEMU, by part of the emulator, and
prints milliseconds of CPU per operation. On a 2-core host, 2,000 ms of CPU per second is all
there is: a workload needing C ms of CPU per operation can do at most 2000 / C per second.

    python3 bench/host/cpu_profile.py --base-url http://127.0.0.1:8080 --api-key KEY WORKLOAD

Workloads (template `minimal` unless `--template`):
  creates   `--workers` (2) loops of create + delete for `--seconds` (30): `creates_per_second`
  burst     `--rounds` (3) times: 8 creates at once, then their deletes, a second apart:
            `api_create_ready_concurrent8_ms`
  fork      one parent, then `--rounds` (10) forks of one child, each child deleted: `api_fork1_ms`
  exec      one sandbox, `--rounds` (200) execs of `true`: `api_exec_ms`

QEMU's samples are placed by the nearest exported symbol at or below their address
(`nm -D`; Debian's QEMU is stripped of the rest): TCG's translator (`tcg_*`, `gen_*`,
`translator_*`, the x86 decoder between `helper_verw` and `tcg_x86_init`), TCG's runtime (TB
lookup, helpers, the soft TLB), the code TCG generated (perf's `[JIT]` maps), the kernel on
QEMU's behalf, the dynamic loader, other libraries. The load generator (this script) is counted
apart. Run as root with nothing else busy; `perf` from Debian's `linux-perf`.
"""

import argparse
import bisect
import collections
import http.client
import json
import os
import re
import subprocess
import tempfile
import threading
import time
import urllib.parse

QEMU = "/usr/bin/qemu-system-x86_64"
HZ = 499

TRANSLATE = re.compile(
    r"^(tcg_|gen_|translator_|tb_gen_code|helper_verw|tcg_x86_init|in_code_gen_buffer|"
    r"gdb_breakpoint_remove_all|gdb_put)"
)
RUNTIME = re.compile(
    r"^(helper_|cpu_|tlb_|tb_|qht_|accel_supported_gdbstub|tcg_flush_jmp_cache|probe_|"
    r"do_interrupt|x86_cpu|address_space|flatview|memory_region|io_)"
)


class Api:
    def __init__(self, base, key):
        u = urllib.parse.urlsplit(base)
        self.host, self.port, self.key = u.hostname, u.port or 80, key

    def call(self, method, path, body=None):
        c = http.client.HTTPConnection(self.host, self.port, timeout=300)
        data = json.dumps(body) if body is not None else None
        c.request(method, path, data, {"Authorization": f"Bearer {self.key}",
                                       "Content-Type": "application/json"})
        r = c.getresponse()
        out = r.read()
        c.close()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {out[:200]!r}")
        return json.loads(out) if out else None

    def create(self, template):
        return self.call("POST", "/v1/sandboxes", {"template": template})["id"]

    def delete(self, sid):
        self.call("DELETE", f"/v1/sandboxes/{sid}")


def creates(api, a):
    end = time.monotonic() + a.seconds
    done = [0] * a.workers

    def worker(i):
        while time.monotonic() < end:
            api.delete(api.create(a.template))
            done[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(a.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done), []


def burst(api, a):
    took, n = [], 0
    for _ in range(a.rounds):
        ids, lock = [], threading.Lock()

        def one():
            t = time.monotonic()
            sid = api.create(a.template)
            with lock:
                ids.append(sid)
                took.append((time.monotonic() - t) * 1000)

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for sid in ids:
            api.delete(sid)
        n += len(ids)
        time.sleep(1)
    return n, took


def fork(api, a):
    parent = api.create(a.template)
    took = []
    try:
        for _ in range(a.rounds):
            t = time.monotonic()
            r = api.call("POST", f"/v1/sandboxes/{parent}/fork", {"count": 1})
            took.append((time.monotonic() - t) * 1000)
            for c in r["children"]:
                api.delete(c["id"])
            api.call("DELETE", f"/v1/snapshots/{r['snapshot_id']}")
    finally:
        api.delete(parent)
    return a.rounds, took


def execs(api, a):
    sid = api.create(a.template)
    took = []
    try:
        for _ in range(10):
            api.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "true"})
        for _ in range(a.rounds):
            t = time.monotonic()
            api.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "true"})
            took.append((time.monotonic() - t) * 1000)
    finally:
        api.delete(sid)
    return a.rounds, took


WORKLOADS = {"creates": creates, "burst": burst, "fork": fork, "exec": execs}


def qemu_symbols():
    out = subprocess.run(["nm", "-D", "--defined-only", QEMU], capture_output=True, text=True,
                         check=True).stdout
    syms = sorted((int(p[0], 16), p[2]) for p in (line.split() for line in out.splitlines())
                  if len(p) == 3 and p[1] in "Tt")
    return [a for a, _ in syms], [s for _, s in syms]


def bucket(comm, dso, sym, addrs, names):
    if comm.startswith("qemu-system"):
        if dso.startswith("[JIT]"):
            return "qemu: guest code (host code TCG generated)"
        if dso == os.path.basename(QEMU):
            if sym.startswith("0x"):
                i = bisect.bisect_right(addrs, int(sym, 16)) - 1
                sym = names[i] if i >= 0 else "?"
            if TRANSLATE.match(sym):
                return "qemu: TCG translation (x86 decode, optimise, host code generation)"
            if RUNTIME.match(sym):
                return "qemu: TCG runtime (TB lookup and chaining, helpers, soft TLB)"
            return "qemu: rest of QEMU (devices, migration, main loop)"
        if dso == "[kernel.kallsyms]":
            return "qemu: kernel (page faults, syscalls, exit)"
        if dso.startswith("ld-linux"):
            return "qemu: dynamic loader (process start)"
        return "qemu: libraries (glib, libc, ...)"
    if comm.startswith(("tokio", "pandastack", "sqlx", "ps-")):
        return "pandastack server"
    if comm == "python3" or comm.startswith("Thread"):
        return "load generator (this script)"
    if comm.startswith("swapper"):
        return "idle"
    return "other (kernel threads, ...)"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("workload", choices=WORKLOADS)
    p.add_argument("--base-url", default="http://127.0.0.1:8080")
    p.add_argument("--api-key", default=os.environ.get("PANDASTACK_API_KEY"))
    p.add_argument("--template", default="minimal")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--rounds", type=int)
    a = p.parse_args()
    a.rounds = a.rounds or {"burst": 3, "fork": 10, "exec": 200}.get(a.workload, 0)
    api = Api(a.base_url, a.api_key)
    api.delete(api.create(a.template))  # warm: the template baked, the pool filled
    time.sleep(2)

    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        rec = subprocess.Popen(["perf", "record", "-a", "-e", "cpu-clock", "-F", str(HZ),
                                "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        started = time.monotonic()
        try:
            ops, took = WORKLOADS[a.workload](api, a)
        finally:
            wall = time.monotonic() - started
            time.sleep(0.5)
            rec.send_signal(2)
            rec.wait()
        report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                                 "--fields", "sample,comm,dso,sym"],
                                capture_output=True, text=True, check=True).stdout

    addrs, names = qemu_symbols()
    parts, total = collections.Counter(), 0
    for line in report.splitlines():
        m = re.match(r"\s*(\d+)\s+(\S.*?)\s{2,}(\S.*?)\s{2,}\[.\]\s+(\S+)", line)
        if m:
            n = int(m.group(1))
            parts[bucket(m.group(2), m.group(3), m.group(4), addrs, names)] += n
            total += n
    busy = (total - parts["idle"]) / HZ
    print(f"{a.workload}: {ops} operations in {wall:.1f} s ({ops / wall:.2f}/s); "
          f"{total / HZ:.1f} CPU-s sampled (+1.5 s around), {busy:.1f} busy: "
          f"{busy / ops * 1000:.1f} ms of CPU per operation")
    if took:
        took.sort()
        print(f"latency p50 {took[len(took) // 2]:.1f} ms, max {took[-1]:.1f} ms (n {len(took)})")
    for name, n in parts.most_common():
        print(f"{n / HZ / ops * 1000:8.1f} ms  {100 * n / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
