"""Cost, on the host, of a new process moving itself into fresh cgroups.

What a QEMU process paid between fork and exec before every restore, wake and fork child
(pandastack-qemu's cgroup.rs; since then only a booting QEMU does, and a restoring one is moved
by the server while it starts). Run as root with the hierarchies of the controllers the server
uses, e.g. on a cgroup v1 host:

    python3 bench/host/cgroup_move.py /sys/fs/cgroup/memory /sys/fs/cgroup/cpu /sys/fs/cgroup/pids

or on a cgroup v2 host: `python3 bench/host/cgroup_move.py /sys/fs/cgroup`. Makes
`pandastack/bench-move-*` in each (removed after each round), ROUNDS rounds PAUSE seconds apart,
and prints the p50, p90 and max of the child's writes to `cgroup.procs`.
"""

import os
import statistics
import sys
import time

ROUNDS = 30
PAUSE = 0.03


def main(roots):
    took = []
    for i in range(ROUNDS):
        dirs = []
        for root in roots:
            d = os.path.join(root, "pandastack", f"bench-move-{os.getpid()}-{i}")
            os.makedirs(d)
            dirs.append(d)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                t = time.perf_counter()
                for d in dirs:
                    with open(os.path.join(d, "cgroup.procs"), "w") as f:
                        f.write("0")
                os.write(w, str(time.perf_counter() - t).encode())
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        took.append(float(os.read(r, 64)) * 1000)
        os.close(r)
        os.close(w)
        for d in dirs:
            os.rmdir(d)
        time.sleep(PAUSE)
    took.sort()
    print(
        f"move into {len(roots)} cgroup(s): p50 {statistics.median(took):.1f} ms, "
        f"p90 {took[int(len(took) * 0.9)]:.1f}, max {took[-1]:.1f} (n={len(took)})"
    )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
