"""Captures tests/integration/mcp/fixtures/flatten.json: raw CallToolResults from the real servers (wire
form) next to the Python SDK's flattening of each (rebuno 0.29.2 `_default_flatten`), for the
offline parity test in tests/integration/mcp.rs. Re-run after changing a pinned server:

    tests/integration/mcp/setup.sh && target/mcp-venv/bin/python tests/integration/mcp/capture_fixtures.py
"""

import asyncio
import json
import os
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, stdio_client
from rebuno.mcp import _default_flatten

HERE = Path(__file__).resolve().parent
EVERYTHING = HERE / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
FIXTURE = HERE / "fixture_server.py"

EVERYTHING_CALLS = [
    ("echo", {"message": "hi"}),
    ("get-sum", {"a": 1, "b": 2}),
    ("get-structured-content", {"location": "Chicago"}),
    ("get-annotated-message", {"messageType": "success"}),
    ("get-annotated-message", {"messageType": "success", "includeImage": None}),
    ("get-sum", {"a": 2, "b": None}),
    ("get-tiny-image", {}),
    ("get-resource-links", {"count": 2}),
    ("no-such-tool", {}),
]
FIXTURE_CALLS = [
    ("add", {"a": 2, "b": 3}),
    ("greet", {"name": "ann"}),
    ("greet", {"name": "ann", "title": None}),
    ("weather", {"city": "Oslo"}),
    ("boom", {"msg": "x"}),
]


async def capture(command, args, calls, env=None):
    params = StdioServerParameters(command=command, args=args, env=env)
    out = []
    async with stdio_client(params, errlog=open(os.devnull, "w")) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for name, arguments in calls:
                result = await session.call_tool(name, arguments)
                raw = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                raw.pop("resultType", None)
                out.append({"call": name, "arguments": arguments, "raw": raw,
                            "python": _default_flatten(result)})
    return out


async def main():
    cases = await capture("node", [str(EVERYTHING), "stdio"], EVERYTHING_CALLS)
    cases += await capture(sys.executable, [str(FIXTURE)], FIXTURE_CALLS,
                           env={**os.environ, "EFFECT_LOG": os.devnull})
    target = HERE / "fixtures/flatten.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(cases, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {len(cases)} cases to {target}")


asyncio.run(main())
