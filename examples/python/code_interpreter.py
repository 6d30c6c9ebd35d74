"""The code interpreter: run Python in a kernel that keeps its variables between calls, get rich
results back (an object's PNG), see exceptions as data, stream output, and use a second context.

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/code_interpreter.py
"""

import os

from pandastack import PandaStack

client = PandaStack()
template = os.environ.get("PANDASTACK_TEMPLATE", "base")

CHART = """
class Chart:
    def _repr_png_(self):
        return b'\\x89PNG\\r\\n\\x1a\\n'      # a real chart library returns a whole image here
Chart()
"""

with client.sandboxes.create(template=template, ttl_seconds=300, metadata={"example": "code"}) as sandbox:
    # 1. State survives between calls; the value of the final expression is a result.
    sandbox.run_code("data = [3, 1, 4, 1, 5, 9, 2, 6]")
    execution = sandbox.run_code("print('sorting', len(data), 'numbers')\nsorted(data)")
    print(f"stdout: {execution.stdout.strip()} | result: {execution.text}")

    # 2. Rich results: objects with _repr_png_ / _repr_html_ (or matplotlib figures) come back
    #    as PNG (base64) / HTML next to their text.
    png = sandbox.run_code(CHART).results[0].png_bytes()
    signature_ok = png.startswith(b"\x89PNG")
    print(f"png: {len(png)} bytes, signature ok: {signature_ok}")

    # 3. An exception is data, not an exception of the SDK.
    execution = sandbox.run_code("total = sum(data)\ntotal / 0")
    print(f"error: {execution.error.name}: {execution.error.value}")

    # 4. Streaming: the callbacks get output and results as they arrive.
    sandbox.run_code(
        "import time\nfor i in range(3):\n    print('step', i, flush=True)\n    time.sleep(0.2)\ntotal",
        on_stdout=lambda text: print(f"  live: {text}", end=""),
        on_result=lambda result: print(f"  live result: {result.text}"),
    )

    # 5. A separate context is a kernel of its own: it does not see `data`.
    context = sandbox.create_code_context()
    execution = sandbox.run_code("'data' in dir()", context=context)
    print(f"context {context.id} sees data: {execution.text}")
    sandbox.delete_code_context(context)
    print("done")
