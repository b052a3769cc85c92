"""Scenario d: tools refused by policy return the SDK's refusal string as their result."""

from harness import mark
from rebuno import Agent, tool

agent = Agent("interop-deny")


@tool
async def count_rows(table: str) -> int:
    mark("count_rows.ran", table)
    return 7


@tool
async def delete_all(table: str) -> str:
    mark("delete_all.ran", table)
    return f"deleted {table}"


async def handle(table: str):
    rows = await count_rows(table)
    named = await delete_all(table)
    fallthrough = await delete_all("logs")
    return {"rows": rows, "named_rule": named, "default_rule": fallthrough}


agent.bind(handle)
app = agent.app
