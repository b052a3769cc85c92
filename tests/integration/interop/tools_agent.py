"""Scenario a: two @tool calls and a local step, all allowed, completing with their results."""

from harness import mark
from rebuno import Agent, step, tool

agent = Agent("interop-tools", description="Searches, picks and summarizes.")


@tool
async def search(query: str) -> list:
    mark("search.ran", query)
    return [f"{query}-1", f"{query}-2", f"{query}-3"]


@tool("summarize")
async def summarize(items: list, limit: int = 1) -> str:
    mark("summarize.ran", str(limit))
    return " | ".join(items[:limit])


def pick(found: list) -> int:
    mark("pick.ran")
    return len(found) - 1


async def handle(query: str):
    found = await search(query)
    picked = await step("pick", pick, args={"found": found})
    summary = await summarize(found, limit=picked)
    return {"found": found, "picked": picked, "summary": summary}


agent.bind(handle)
app = agent.app
