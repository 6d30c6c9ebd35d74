"""Cost of moving a new process into a fresh cgroup, measured inside a guest.

What every exec's child does before it runs (it writes itself into its own cgroup's
`cgroup.procs`). Run it in a sandbox, e.g.:

    pandastack run --image "$IMG" -- python3 -c "$(cat bench/guest/cgroup_move.py)"

Prints the p50, min and max of fork + move + exit (fresh cgroup each time, PAUSE seconds
apart) and of fork + exit alone. See docs/vm-runtime.md, "What an exec costs".
"""

import os
import time

BASE = "/sys/fs/cgroup/pandastack"
ROUNDS = 40
PAUSE = 0.03


def summary(name, ms):
    ms.sort()
    print(f"{name} ms p50 {ms[len(ms) // 2]:.1f} min {ms[0]:.1f} max {ms[-1]:.1f}")


moves = []
for i in range(ROUNDS):
    d = f"{BASE}/bench-move-{i}"
    os.mkdir(d)
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        with open(f"{d}/cgroup.procs", "w") as f:
            f.write("0")
        os._exit(0)
    os.waitpid(pid, 0)
    moves.append((time.perf_counter() - t) * 1000)
    os.rmdir(d)
    time.sleep(PAUSE)
summary("fork+move+exit", moves)

forks = []
for i in range(ROUNDS):
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    forks.append((time.perf_counter() - t) * 1000)
    time.sleep(PAUSE)
summary("fork+exit", forks)
