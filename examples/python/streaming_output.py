"""Stream a command's output as it is produced: with callbacks, and as an event iterator.

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/streaming_output.py
"""

import os
import sys
import time

from pandastack import PandaStack

client = PandaStack()
template = os.environ.get("PANDASTACK_TEMPLATE", "base")

SCRIPT = "for i in 1 2 3 4 5; do echo step $i; sleep 0.5; done; echo warning: almost done >&2; echo finished"

with client.sandboxes.create(template=template, ttl_seconds=300, metadata={"example": "streaming"}) as sandbox:
    # 1. Callbacks: called with each chunk as it arrives; the result still has everything.
    t0 = time.monotonic()
    result = sandbox.exec(
        SCRIPT,
        on_stdout=lambda s: print(f"[{time.monotonic() - t0:4.1f}s] out: {s}", end=""),
        on_stderr=lambda s: print(f"[{time.monotonic() - t0:4.1f}s] err: {s}", end="", file=sys.stderr),
    )
    print(f"exit {result.exit_code}, {len(result.stdout.splitlines())} stdout lines")

    # 2. Iterator of typed events: StdoutEvent / StderrEvent, then one ExitEvent. Chunks are
    #    whatever the program wrote at once, not necessarily whole lines.
    ticker = "import sys, time\nfor i in range(3):\n    sys.stdout.write(f'tick {i}\\n'); sys.stdout.flush(); time.sleep(0.3)"
    for event in sandbox.exec_stream(["python3", "-c", ticker]):
        if event.type == "stdout":
            sys.stdout.write(event.data)
        elif event.type == "stderr":
            sys.stderr.write(event.data)
        elif event.type == "exit":
            print(f"exit {event.exit_code} after {event.duration_ms} ms")
