"""A function with NumPy, invoked with a payload.

The handler is plain Python: ``handler(event)`` gets the JSON payload and returns JSON. The
server installs ``numpy`` in a build VM, starts the runtime, imports the handler (so NumPy is
loaded once, at build time) and snapshots that VM: the first call restores an instance from the
snapshot (``cold``), the next ones go to the warm instance. A handler's exception comes back as
data, with its traceback.

The server needs sandbox networking (``--network on``) for pip to reach PyPI; the first
function on a server builds and bakes the ``app`` template, which takes minutes.

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/function_numpy.py
"""

import uuid

from pandastack import PandaStack

HANDLER = '''
import numpy as np


def handler(event):
    m = np.array(event["matrix"], dtype=float)
    values = np.linalg.eigvals(m)
    print(f"a {m.shape[0]}x{m.shape[1]} matrix")
    return {
        "det": round(float(np.linalg.det(m)), 6),
        "eigenvalues": sorted(round(float(v.real), 6) for v in values),
        "numpy": np.__version__,
    }
'''

client = PandaStack()  # PANDASTACK_API_KEY (or PANDASTACK_TOKEN), PANDASTACK_BASE_URL
name = f"linalg-{uuid.uuid4().hex[:6]}"

fn = client.functions.create(
    name, "python", "main.handler", files={"main.py": HANDLER}, dependencies="numpy\n", timeout_seconds=30
)
print(f"function {fn.name}: building version 1")
try:
    v = client.functions.wait_for_version(name, 1, timeout=1800)
    print(f"version {v.version} is {v.state} (phases: {', '.join(sorted(v.phases_ms))})")

    first = client.functions.invoke(name, {"matrix": [[2, 0], [0, 3]]})
    print(f"call 1 ({'cold' if first.cold else 'warm'}): det {first.result['det']}, eigenvalues {first.result['eigenvalues']}")
    print(f"it printed: {first.stdout.strip()}")
    second = client.functions.invoke(name, {"matrix": [[4, 1], [2, 3]]})
    print(f"call 2 ({'cold' if second.cold else 'warm'}): det {second.result['det']}, eigenvalues {second.result['eigenvalues']}")

    bad = client.functions.invoke(name, {"matrix": [[1, 2, 3]]})
    print(f"a non-square matrix: {bad.status}, {bad.error.type}: {bad.error.message}")
finally:
    client.functions.delete(name)
print("function deleted")
print("done")
