"""Group `failures` (agent `diff-fail`): ways a handler fails.

The handler's parameters are its input schema (`case: str, count: int`), so an input without
`count` fails binding (`input_invalid`). Cases:
* `handler_error`: a step, then the handler raises;
* `exception`: a step, then an unexpected exception (the Rust twin panics);
* `tool_error`: a tool whose body raises (the step fails, then the execution).
"""

from diffkit import mark
from rebuno import Agent, step, tool

agent = Agent("diff-fail")


@tool
async def flaky(count: int) -> str:
    mark("flaky.ran", str(count))
    raise RuntimeError(f"flaky broke after {count}")


def prepare(count: int) -> int:
    return count * 2


async def handle(case: str, count: int):
    doubled = await step("prepare", prepare, args={"count": count})
    if case == "handler_error":
        raise RuntimeError(f"the handler gave up at {doubled}")
    if case == "exception":
        raise ZeroDivisionError(f"kaboom at {doubled}")
    if case == "tool_error":
        return {"never": await flaky(count)}
    return {"doubled": doubled}


agent.bind(handle)
app = agent.app
