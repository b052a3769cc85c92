"""Scenario b: an at_most_once tool whose body hangs until the test SIGKILLs the process.

The body writes a marker when it starts, so the test knows the step is executing. A fresh
process then gets the re-delivery: the kernel answers the re-submitted step with an
`indeterminate` error instead of running the body again.
"""

import asyncio

from harness import mark
from rebuno import Agent, step, tool

agent = Agent("interop-crash")


@tool("charge_card", idempotency="at_most_once")
async def charge_card(order: str, cents: int) -> str:
    mark("charge.started", order)
    await asyncio.sleep(3600)  # the test kills the process here
    return f"charged {cents} for {order}"


def new_order() -> str:
    mark("order.ran")
    return "order-42"


async def handle(cents: int):
    mark("handle.ran", str(cents))
    order = await step("new_order", new_order)
    receipt = await charge_card(order, cents)
    return {"order": order, "receipt": receipt}


agent.bind(handle)
app = agent.app
