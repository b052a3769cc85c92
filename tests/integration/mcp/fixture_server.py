"""A tiny MCP server on PyPI's `mcp` (2.3.0) for tests/integration/mcp.rs and the Workers
end-to-end test: stdio, or streamable HTTP on 127.0.0.1 only.

    python fixture_server.py                         # stdio
    python fixture_server.py streamable-http PORT    # http://127.0.0.1:PORT/mcp
    python fixture_server.py streamable-http PORT resumable   # with an event store, and the
                                                               # `interrupted` tool

`record` appends to the file named by $EFFECT_LOG, so tests can count real side effects.
"""

import os
import sys

import anyio

from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventMessage, EventStore
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


class MemoryEventStore(EventStore):
    """Keeps every event of every stream, so a client can resume after `Last-Event-ID`."""

    def __init__(self):
        self.events = []  # (event id, stream id, message or None for a priming event)

    async def store_event(self, stream_id, message):
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):
        ids = [event[0] for event in self.events]
        if last_event_id not in ids:
            return None
        stream_id = self.events[ids.index(last_event_id)][1]
        for event_id, stream, message in self.events[ids.index(last_event_id) + 1 :]:
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


async def interrupted(note: str, ctx: Context) -> str:
    """Closes the call's event stream before answering: the client resumes it with
    Last-Event-ID to get the answer."""
    await ctx.close_sse_stream()
    await anyio.sleep(0.3)
    return note


if __name__ == "__main__":
    if sys.argv[1:2] == ["streamable-http"]:
        options = {}
        if sys.argv[3:4] == ["resumable"]:
            # Streams with ids and a retry delay, kept for resumption; one more tool.
            options = {"event_store": MemoryEventStore(), "retry_interval": 200}
            app.add_tool(interrupted)
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), **options)
    else:
        app.run()
