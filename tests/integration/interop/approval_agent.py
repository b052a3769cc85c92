"""Scenario c: a tool gated by a require_approval rule; the handler reruns after the grant."""

from harness import mark
from rebuno import Agent, step, tool

agent = Agent("interop-approval")


@tool
async def publish(post: str) -> str:
    mark("publish.ran", post)
    return f"published: {post}"


def draft(text: str) -> str:
    mark("draft.ran", text)
    return text.upper()


async def handle(text: str):
    post = await step("draft", draft, args={"text": text})
    receipt = await publish(post)
    return {"post": post, "receipt": receipt}


agent.bind(handle)
app = agent.app
