"""Replay across SDKs: the history this agent records is replayed offline against a Rust twin
of its handler (`rebuno_devkernel::replay::check`), which must submit the same kind, target and
args in the same order, so the kernel gives its steps the same ids.

It covers what makes a step's identity in this SDK: a `@tool` whose recorded args are its bound
parameters with the defaults applied (non-ASCII text, an int, a float), a `step` with args, a
`step` without (recorded as `{}`) and an `at_most_once` tool.
"""

from harness import mark
from rebuno import Agent, step, tool

agent = Agent("interop-replay")


@tool
async def search(query: str, limit: int = 3, min_score: float = 0.25) -> list:
    mark("search.ran", query)
    return [f"{query}-{i}" for i in range(1, limit + 1)]


@tool("send_digest", idempotency="at_most_once")
async def send_digest(to: str, subject: str, items: list) -> str:
    mark("send_digest.ran", to)
    return f"sent {len(items)} to {to}"


def pick(found: list) -> int:
    mark("pick.ran")
    return len(found) - 1


def batch() -> str:
    mark("batch.ran")
    return "batch-7"


async def handle(query: str, to: str):
    found = await search(query)
    picked = await step("pick", pick, args={"found": found})
    batch_id = await step("batch", batch)
    receipt = await send_digest(to, "Weekly digest", found[:picked])
    return {"found": found, "picked": picked, "batch": batch_id, "receipt": receipt}


agent.bind(handle)
app = agent.app
