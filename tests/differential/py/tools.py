"""Group `tools` (agent `diff-tools`): tool calls and local steps, allowed and denied.

The handler takes the raw input and runs the case it names:
* `safe_to_retry`: the same read twice (occurrences 0 and 1), then another with a default arg;
* `at_most_once`: a write that must not run twice;
* `local`: local steps with and without args;
* `denied_tool`: a tool the policy denies, whose refusal string the handler returns;
* `denied_step`: a local step the policy denies (the denial fails the execution);
* `quiet`: a tool call, then no output at all (`None`);
* `float_args`: a tool whose argument is the float 0.00001 (`json.dumps` writes `1e-05`).
"""

from diffkit import mark
from rebuno import Agent, step, tool

agent = Agent("diff-tools")


@tool
async def search(query: str, limit: int = 2) -> list:
    mark("search.ran", query)
    return [f"{query}-{i}" for i in range(1, limit + 1)]


@tool("charge_card", idempotency="at_most_once")
async def charge_card(order: str, cents: int) -> str:
    mark("charge.ran", order)
    return f"charged {cents} for {order}"


@tool
async def delete_all(table: str) -> str:
    mark("delete_all.ran", table)
    return f"deleted {table}"


@tool
async def rank(threshold: float) -> str:
    mark("rank.ran")
    return "ranked"


def pick(found: list) -> int:
    mark("pick.ran")
    return len(found) - 1


def stamp() -> dict:
    mark("stamp.ran")
    return {"at": 1700000000, "nonce": "n-7"}


def drop_db() -> str:
    mark("drop_db.ran")
    return "dropped"


async def handle(input: dict):
    case = input["case"]
    if case == "safe_to_retry":
        first = await search("rust")
        again = await search("rust")
        wide = await search("rust", limit=3)
        return {"first": first, "again": again, "wide": wide}
    if case == "at_most_once":
        receipt = await charge_card("order-42", 1250)
        return {"receipt": receipt}
    if case == "local":
        stamped = await step("stamp", stamp)
        picked = await step("pick", pick, args={"found": ["a", "b", "c"]})
        return {"stamped": stamped, "picked": picked}
    if case == "denied_tool":
        users = await delete_all("users")
        logs = await delete_all("logs")
        return {"users": users, "logs": logs}
    if case == "denied_step":
        await step("drop_db", drop_db)
        return {"unreachable": True}
    if case == "float_args":
        return {"ranked": await rank(0.00001)}
    if case == "quiet":
        await search("quiet", limit=1)
        return None
    raise ValueError(f"unknown case {case}")


agent.bind(handle)
app = agent.app
