"""Scenario e, child: a session-aware agent that counts its turns through previous() state.

Before answering it waits (up to 10 s) until its parent is blocked, so the parent's suspension
is observable on every run rather than depending on which process is faster.
"""

import asyncio

from harness import mark
from rebuno import Agent, Client, Result, execution, previous, step

agent = Agent("interop-chat")


async def parent_blocked() -> None:
    async with Client() as client:
        me = await client.get(execution().id)
        if me.spawned_by is None:
            return
        for _ in range(200):
            parent = await client.get(me.spawned_by.execution_id)
            if parent.status == "blocked":
                return
            await asyncio.sleep(0.05)


async def handle(question: str):
    await parent_blocked()
    prev = await previous()
    turns = (prev or {}).get("turns", 0) + 1
    mood = await step("mood", lambda: "curious" if turns == 1 else "familiar")
    mark("chat.ran", f"turn {turns}")
    return Result(
        output={"reply": f"turn {turns}: {question}", "mood": mood, "previous": prev},
        state={"turns": turns, "last": question},
    )


agent.bind(handle)
app = agent.app
