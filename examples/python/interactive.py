"""Talk to a running process: feed its stdin line by line, and drive a terminal (PTY).

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/interactive.py
"""

import os

from pandastack import PandaStack

client = PandaStack()
template = os.environ.get("PANDASTACK_TEMPLATE", "base")

REPL = """
import sys
total = 0
for line in sys.stdin:
    total += int(line)
    print(f"running total: {total}", flush=True)
print(f"final: {total}")
"""

with client.sandboxes.create(template=template, ttl_seconds=300, metadata={"example": "interactive"}) as sandbox:
    # 1. A process with stdin: a WebSocket per process; output arrives as it is produced.
    with sandbox.spawn(["python3", "-c", REPL]) as proc:
        for n in (5, 10, 27):
            proc.send_stdin(f"{n}\n")
            line = ""
            while not line.endswith("\n"):
                line += next(proc).data
            print("process said:", line.strip())
        proc.close_stdin()  # end of input: the program finishes
        result = proc.wait()
    print(result.stdout.strip().splitlines()[-1], "| exit", result.exit_code)

    # 2. A terminal: bytes in, bytes out, resizable.
    with sandbox.pty(cols=100, rows=30) as term:
        term.write("stty size; echo hello from a pty; exit 7\n")
        output = b"".join(term)  # until the shell exits
    print("terminal output ends with:", output.decode(errors="replace").strip().splitlines()[-1])
    print("shell exit code:", term.exit_code)
