"""Scenario e, parent: a tool that runs the chat agent as a subagent in a session."""

import harness  # noqa: F401  (exits with the test process)
from rebuno import Agent, subagent, tool

agent = Agent("interop-lead")


@tool
async def consult(question: str, thread: str):
    return await subagent("interop-chat", {"question": question}, session=thread)


async def handle(question: str, thread: str):
    answer = await consult(question, thread)
    return {"answer": answer}


agent.bind(handle)
app = agent.app
