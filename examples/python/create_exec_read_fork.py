"""Create a sandbox, run a command, write and read a file, fork it, and show that the fork is
isolated from its parent.

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/create_exec_read_fork.py
"""

import os

from pandastack import PandaStack

client = PandaStack()  # PANDASTACK_API_KEY (or PANDASTACK_TOKEN), PANDASTACK_BASE_URL
template = os.environ.get("PANDASTACK_TEMPLATE", "base")

with client.sandboxes.create(template=template, ttl_seconds=600, metadata={"example": "create-exec-read-fork"}) as sandbox:
    print(f"created {sandbox.id} ({sandbox.template}) in {sandbox.boot_ms} ms")

    result = sandbox.exec("python3 -c 'print(2 ** 10)'", timeout_seconds=30)
    print("exec:", result.stdout.strip(), "exit", result.exit_code)

    sandbox.filesystem.write("/root/notes.txt", "written by the parent\n")
    print("read:", sandbox.filesystem.read("/root/notes.txt").strip())

    # A fork clones memory, processes and disk. It starts with the parent's files...
    with sandbox.fork() as branch:
        # The fork went through a snapshot; it is a normal snapshot (usable with
        # create(snapshot_id=...)). Not needed here, so free its disk space.
        client.snapshots.delete(branch.snapshot_id)
        print(f"forked {branch.id}: sees", repr(branch.files.read("/root/notes.txt").strip()))
        # ...and from then on the two are independent.
        branch.files.write("/root/notes.txt", "rewritten by the fork\n")
        print("fork now has:  ", branch.files.read("/root/notes.txt").strip())
        print("parent still has:", sandbox.files.read("/root/notes.txt").strip())
    # leaving the `with` blocks kills the fork and then the parent
print("done")
