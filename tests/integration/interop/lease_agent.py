"""Lease fencing: a handler whose dispatch was re-delivered elsewhere is refused and stops.

The tool body announces itself, then waits for INTEROP_DIR/release.<pid>, so the test decides
which process finishes first. The handler marks a LeaseSuperseded before letting the SDK
swallow it.
"""

import asyncio
import os

from harness import mark
from rebuno import Agent, LeaseSuperseded, tool

agent = Agent("interop-lease")


@tool
async def fetch(url: str) -> str:
    mark("fetch.started", url)
    release = os.path.join(os.environ["INTEROP_DIR"], f"release.{os.getpid()}")
    while not os.path.exists(release):
        await asyncio.sleep(0.02)
    return f"body of {url}"


async def handle(url: str):
    try:
        page = await fetch(url)
    except LeaseSuperseded:
        mark("superseded", url)
        raise
    return {"page": page}


agent.bind(handle)
app = agent.app
