"""The async client: run several commands concurrently in one sandbox.

    PANDASTACK_BASE_URL=... PANDASTACK_API_KEY=... python3 examples/python/async_quickstart.py
"""

import asyncio
import os
import time

from pandastack import AsyncPandaStack


async def main() -> None:
    template = os.environ.get("PANDASTACK_TEMPLATE", "base")
    async with AsyncPandaStack() as client:
        async with client.sandboxes.create(template=template, ttl_seconds=300, metadata={"example": "async"}) as sandbox:
            t = time.monotonic()
            results = await asyncio.gather(*(sandbox.exec(f"sleep 1; echo job {i}") for i in range(4)))
            print([r.stdout.strip() for r in results], f"in {time.monotonic() - t:.1f} s")
            await sandbox.files.write("/tmp/hello.txt", "hello from asyncio")
            print(await sandbox.files.read("/tmp/hello.txt"))


asyncio.run(main())
