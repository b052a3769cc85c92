"""Group `faults` (agent `diff-faults`): an agent process dies, or is superseded.

* `crash`: a local step, then the at_most_once tool `charge_card`, whose body announces itself
  and waits (the test kills the process there, serves a new one and re-delivers: the kernel
  answers the re-submitted step `indeterminate`).
* `crash_local`: the same with an at_most_once local step (`reserve`).
* `lease`: the read `fetch` waits for the test's go, keyed by this process's label; the test
  re-delivers to a second process meanwhile, so the first attempt's outcome is refused with
  `lease_superseded`. The handler marks the refusal, then lets it end the attempt.
"""

from diffkit import LABEL, mark, released
from rebuno import Agent, LeaseSuperseded, step, tool

agent = Agent("diff-faults")


@tool("charge_card", idempotency="at_most_once")
async def charge_card(order: str, cents: int) -> str:
    mark("charge.started", order)
    await released(f"charge.{LABEL}")
    return f"charged {cents} for {order}"


@tool
async def fetch(url: str) -> str:
    mark("fetch.started", url)
    await released(f"fetch.{LABEL}")
    return f"body of {url}"


async def reserve(sku: str) -> str:
    mark("reserve.started", sku)
    await released(f"reserve.{LABEL}")
    return f"reserved {sku}"


def new_order() -> str:
    mark("order.ran")
    return "order-42"


async def handle(input: dict):
    if input["case"] == "crash":
        order = await step("new_order", new_order)
        receipt = await charge_card(order, input["cents"])
        return {"order": order, "receipt": receipt}
    if input["case"] == "crash_local":
        held = await step("reserve", reserve, args={"sku": "sku-9"}, idempotency="at_most_once")
        return {"held": held}
    if input["case"] == "lease":
        try:
            page = await fetch(input["url"])
        except LeaseSuperseded:
            mark("superseded", input["url"])
            raise
        return {"page": page}
    raise ValueError(f"unknown case {input['case']}")


agent.bind(handle)
app = agent.app
