"""An agent workspace that survives its sandbox: a durable volume holds the work, sandboxes
come and go.

Sandbox 1 sets up a project in /workspace (on the volume) and does the first step; it is
deleted. Sandbox 2 mounts the same volume, finds the work where sandbox 1 left it and carries
on. Finally the volume is backed up to the server's object store (restorable on any host with
``client.volumes.create(name, from_backup=backup.id)``).

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/agent_workspace.py
"""

import os
import uuid

from pandastack import PandaStack, VolumeMount

client = PandaStack()  # PANDASTACK_API_KEY (or PANDASTACK_TOKEN), PANDASTACK_BASE_URL
template = os.environ.get("PANDASTACK_TEMPLATE", "base")
name = f"agent-ws-{uuid.uuid4().hex[:8]}"

volume = client.volumes.create(name, size_gb=1)
print(f"volume {volume.name}: {volume.size_gb} GiB on {volume.host}")
workspace = [VolumeMount(name, "/workspace")]
try:
    # Sandbox 1: set up the project and do the first step of the work.
    with client.sandboxes.create(
        template=template, ttl_seconds=600, volumes=workspace, metadata={"example": "agent-workspace"}
    ) as first:
        first.files.write(
            "/workspace/project/fib.py",
            "import sys\n"
            "a, b = 0, 1\n"
            "for _ in range(int(sys.argv[1])):\n"
            "    a, b = b, a + b\n"
            "print(a)\n",
        )
        out = first.exec("cd /workspace/project && python3 fib.py 10", check=True).stdout.strip()
        first.exec(f"echo 'step 1 done: fib(10) = {out}' >> /workspace/project/PROGRESS && sync", check=True)
        print(f"sandbox 1 ({first.id}) wrote the project; fib(10) = {out}")
    # Leaving the `with` block deleted sandbox 1; the volume is free again.
    print("sandbox 1 deleted; volume attached to:", client.volumes.get(name).attached_to)

    # Sandbox 2: a fresh sandbox, the same workspace.
    with client.sandboxes.create(
        template=template, ttl_seconds=600, volumes=workspace, metadata={"example": "agent-workspace"}
    ) as second:
        progress = second.files.read("/workspace/project/PROGRESS").strip()
        print(f"sandbox 2 ({second.id}) found: {progress}")
        out = second.exec("cd /workspace/project && python3 fib.py 20", check=True).stdout.strip()
        second.exec(f"echo 'step 2 done: fib(20) = {out}' >> /workspace/project/PROGRESS && sync", check=True)
        print("progress now:", " | ".join(second.files.read("/workspace/project/PROGRESS").splitlines()))

    # Back the workspace up to the object store and wait for the upload.
    backup = client.volumes.backup(name, wait=True, timeout=600)
    print(f"backup {backup.id}: {backup.state}, {backup.bytes_uploaded} bytes uploaded")
finally:
    client.volumes.delete(name)  # its backups stay in the object store
print("done")
