"""Try five candidate fixes in parallel from one warmed state and keep the one that passes.

A sandbox is prepared once (project files written, a slow "dependency install" done), then
forked five ways. Each fork applies a different patch and runs the tests; the first fork
whose tests pass is kept, the others are killed.

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/parallel_fixes.py
"""

import concurrent.futures as cf
import os
import time

from pandastack import PandaStack

BUGGY = '''
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]
'''

TESTS = '''
from stats import median
assert median([3, 1, 2]) == 2
assert median([4, 1, 3, 2]) == 2.5, median([4, 1, 3, 2])
assert median([5]) == 5
assert median([1, 2, 10]) == 2, median([1, 2, 10])
print("all tests passed")
'''

CANDIDATES = [
    # 0: wrong - returns the lower middle
    "def median(xs):\n    xs = sorted(xs)\n    return xs[(len(xs) - 1) // 2]\n",
    # 1: wrong - forgets to sort
    "def median(xs):\n    n = len(xs)\n    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2\n",
    # 2: right
    "def median(xs):\n    xs = sorted(xs)\n    n = len(xs)\n    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2\n",
    # 3: wrong - mean, not median
    "def median(xs):\n    return sum(xs) / len(xs)\n",
    # 4: wrong - syntax error
    "def median(xs)\n    return 0\n",
]

client = PandaStack()
template = os.environ.get("PANDASTACK_TEMPLATE", "base")

with client.sandboxes.create(template=template, ttl_seconds=900, metadata={"example": "parallel-fixes"}) as base:
    base.files.write("/work/stats.py", BUGGY)
    base.files.write("/work/test_stats.py", TESTS)
    # The "warm" state: something slow that every attempt would otherwise repeat.
    base.exec("sleep 1 && python3 -c 'import json, decimal, fractions' && touch /work/.deps-ready", check=True)
    first = base.exec("python3 test_stats.py", cwd="/work")
    print(f"baseline: exit {first.exit_code}: {first.stderr.strip().splitlines()[-1]}")

    t = time.monotonic()
    forks = base.fork(count=len(CANDIDATES), metadata={"example": "parallel-fixes", "role": "attempt"})
    print(f"forked {len(forks)} sandboxes in {time.monotonic() - t:.1f} s")
    client.snapshots.delete(forks[0].snapshot_id)  # the forks' common snapshot: not needed later

    def attempt(i):
        sb = forks[i]
        sb.files.write("/work/stats.py", CANDIDATES[i])
        return i, sb.exec("test -f .deps-ready && python3 test_stats.py", cwd="/work", timeout_seconds=60)

    winner = None
    try:
        with cf.ThreadPoolExecutor(len(forks)) as pool:
            for i, result in pool.map(attempt, range(len(forks))):
                verdict = "PASS" if result.ok else f"fail (exit {result.exit_code})"
                print(f"  candidate {i} on {forks[i].id}: {verdict}")
                if result.ok and winner is None:
                    winner = forks[i]
    finally:
        for sb in forks:
            if sb is not winner:
                sb.kill()

    if winner is None:
        raise SystemExit("no candidate passed")
    print(f"kept {winner.id}; its fix:")
    print(winner.files.read("/work/stats.py"))
    winner.kill()  # a real agent would keep working in it, or snapshot it
