"""A tiny MCP server on PyPI's `mcp` (2.3.0) for tests/integration/mcp.rs and the Workers
end-to-end test: stdio, or streamable HTTP on 127.0.0.1 only.

    python fixture_server.py                         # stdio
    python fixture_server.py streamable-http PORT    # http://127.0.0.1:PORT/mcp

`record` appends to the file named by $EFFECT_LOG, so tests can count real side effects.
"""

import os
import sys

from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.message import ServerMessageMetadata

app = MCPServer("rebuno-fixture")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def greet(name: str, title: str = "friend") -> str:
    """Greet someone; `title` is optional but not nullable."""
    return f"hello {title} {name}"


@app.tool()
def weather(city: str) -> dict:
    """A canned forecast (a dict return: text only, no structured content)."""
    return {"city": city, "temp_c": 21}


@app.tool()
def record(note: str) -> str:
    """Append `note` to $EFFECT_LOG and return how many notes it holds."""
    with open(os.environ["EFFECT_LOG"], "a", encoding="utf-8") as log:
        log.write(note + "\n")
    with open(os.environ["EFFECT_LOG"], encoding="utf-8") as log:
        return str(sum(1 for _ in log))


@app.tool()
def boom(msg: str) -> str:
    """Always fails."""
    raise ValueError(msg)


@app.tool()
async def chatty(note: str, ctx: Context) -> str:
    """Logs a message and pings the client before echoing `note`: server messages on the call's
    event stream, the ping needing the client's answer."""
    await ctx.info(f"echoing {note}")
    # On the call's own stream (a bare send_ping would take the GET stream, which a client
    # need not open).
    related = ServerMessageMetadata(related_request_id=ctx.request_context.request_id)
    await ctx.session.send_request(types.PingRequest(), types.EmptyResult, metadata=related)
    return note


if __name__ == "__main__":
    if sys.argv[1:2] == ["streamable-http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
