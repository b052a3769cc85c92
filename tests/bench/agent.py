"""The benchmark agent written with the official Python SDK (rebuno==0.29.2), served by uvicorn.

Same workload as the Rust agent (tests/bench/src/agent.rs): input {"k": K, "mode": M};
`live` calls a no-op tool K times and completes; `hold` does the same but, on the first
delivery attempt, waits forever after the K calls so that a re-delivery replays all K;
`idle` waits inside a tool for an hour.

Run by `cargo run --release -p rebuno-bench` as
`python -m uvicorn agent:app --app-dir tests/bench ...` with REBUNO_URL and REBUNO_AGENT_SECRET
set. The process exits when its stdin closes (the benchmark driver went away).
"""

import asyncio
import os
import sys
import threading

import rebuno
from rebuno import Agent, tool

agent = Agent("bench")


@tool
async def noop(i: int) -> int:
    return i


@tool
async def wait(secs: int) -> int:
    await asyncio.sleep(secs)
    return 0


async def handle(k: int = 0, mode: str = "live"):
    if mode == "idle":
        await wait(3600)
        return {}
    for i in range(k):
        await noop(i)
    if mode == "hold" and rebuno.execution().dispatch_attempt == 1:
        await asyncio.Event().wait()
    return {"steps": k}


def _exit_when_stdin_closes() -> None:
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        os._exit(0)


threading.Thread(target=_exit_when_stdin_closes, name="stdin-watch", daemon=True).start()

agent.bind(handle)
app = agent.app
