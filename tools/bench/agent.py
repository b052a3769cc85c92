"""The benchmark agent written with the official Python SDK (rebuno==0.29.2), served by uvicorn.

Same workload as the Rust agent (tools/bench/src/agent.rs): input {"k": K, "mode": M};
`live` calls a no-op tool K times and completes; `hold` does the same but, on the first
delivery attempt, waits forever after the K calls so that a re-delivery replays all K;
`idle` waits inside a tool for an hour. `llm` and `llm_hold` are `live` and `hold` with K durable
LLM calls (through `rebuno.http_client()`, each an `llm_call` step) to the chat-completions stub
at the input's `llm_url` instead of the K tool calls.

Run by `cargo run --release -p rebuno-bench` as
`python -m uvicorn agent:app --app-dir tools/bench ...` with REBUNO_URL and REBUNO_AGENT_SECRET
set. The process exits when its stdin closes (the benchmark driver went away).
"""

import asyncio
import os
import sys
import threading

import rebuno
from rebuno import Agent, http_client, tool

agent = Agent("bench")
# One recording client for the process (it finds the current execution per request), like the
# Rust agent's shared `rebuno::llm::fetch` client.
llm = http_client(timeout=30.0)


@tool
async def noop(i: int) -> int:
    return i


@tool
async def wait(secs: int) -> int:
    await asyncio.sleep(secs)
    return 0


async def chat(url: str, i: int) -> None:
    """One chat completion through the SDK's recorder; `i` makes each request a new step."""
    message = {"role": "user", "content": str(i)}
    body = {"model": "bench", "messages": [message], "stream": False}
    resp = await llm.post(url, json=body)
    resp.raise_for_status()
    if resp.json()["choices"][0]["message"]["content"] is None:
        raise RuntimeError("the provider's answer has no content")


async def handle(k: int = 0, mode: str = "live", llm_url: str = ""):
    if mode == "idle":
        await wait(3600)
        return {}
    for i in range(k):
        if mode.startswith("llm"):
            await chat(llm_url, i)
        else:
            await noop(i)
    if mode.endswith("hold") and rebuno.execution().dispatch_attempt == 1:
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
