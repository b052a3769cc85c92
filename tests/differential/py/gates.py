"""Group `gates` (agent `diff-gates`): approvals and a rate-limit park.

* `publish`: a local draft step, then `publish`, gated by `require_approval`; the test grants,
  denies or lets the approval expire. A denial or expiry comes back as the refusal string.
* `ping`: two calls of a tool limited to one call a minute with `max_wait`: the second parks
  the execution until the limit refills, and the rerun replays the first.
* `burst`: the same without `max_wait`: the second call is refused `rate_limited`, which
  fails the execution with `rate_limit_exceeded`.
"""

from diffkit import mark
from rebuno import Agent, step, tool

agent = Agent("diff-gates")


@tool
async def publish(post: str) -> str:
    mark("publish.ran", post)
    return f"published: {post}"


@tool
async def ping(n: int) -> str:
    mark("ping.ran", str(n))
    return f"pong {n}"


@tool
async def burst(n: int) -> str:
    mark("burst.ran", str(n))
    return f"burst {n}"


def draft(text: str) -> str:
    mark("draft.ran", text)
    return text.upper()


async def handle(input: dict):
    if input["case"] == "publish":
        post = await step("draft", draft, args={"text": input["text"]})
        receipt = await publish(post)
        return {"post": post, "receipt": receipt}
    if input["case"] == "ping":
        return {"first": await ping(1), "second": await ping(2)}
    if input["case"] == "burst":
        return {"first": await burst(1), "second": await burst(2)}
    raise ValueError(f"unknown case {input['case']}")


agent.bind(handle)
app = agent.app
