"""Scenario f: one durable LLM call through the SDK's `rebuno.http_client()` (an httpx2 client
whose `RebunoTransport` records the request as an `llm_call` step, target = the body's model).

Input: {"url": <chat-completions URL>, "stream": false|true, "prompt": "..."}. The agent posts
{"model": "gpt-test", "messages": [{"role": "user", "content": prompt}], "stream": stream}
(no `openai` package: the raw request is what the SDK records). A streamed answer is read to
EOF through the SSE events; its `content` is the concatenated `choices[0].delta.content`. A
JSON answer's `content` is `choices[0].message.content`. The output also carries the raw body
text, the status and the content-type the SDK handed back (live or replayed). With
`"hang": true` the first delivery waits after recording, so a re-delivery replays the call.
"""

import asyncio
import json

from harness import mark
from rebuno import Agent, execution, http_client

agent = Agent("interop-llm", description="Asks an OpenAI-style model once.")


def sse_content(raw: str) -> str:
    parts = []
    for event in raw.split("\n\n"):
        for line in event.splitlines():
            if not line.startswith("data:"):
                continue
            data = line[len("data:") :].strip()
            if data == "[DONE]":
                continue
            delta = (json.loads(data).get("choices") or [{}])[0].get("delta") or {}
            parts.append(delta.get("content") or "")
    return "".join(parts)


async def handle(url: str, stream: bool = False, prompt: str = "hi", hang: bool = False):
    mark("llm.ran", "stream" if stream else "json")
    body = {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": prompt}],
        "stream": stream,
    }
    async with http_client(timeout=30.0) as client:
        if stream:
            async with client.stream("POST", url, json=body) as resp:
                chunks = [chunk async for chunk in resp.aiter_bytes()]
                status = resp.status_code
                content_type = resp.headers.get("content-type", "")
            raw = b"".join(chunks).decode("utf-8")
            content = sse_content(raw) if status < 400 else None
        else:
            resp = await client.post(url, json=body)
            status = resp.status_code
            content_type = resp.headers.get("content-type", "")
            raw = resp.text
            content = resp.json()["choices"][0]["message"]["content"] if status < 400 else None
    if hang and execution().dispatch_attempt == 1:
        # The first delivery "dies" after recording, so the next one replays the call.
        await asyncio.sleep(3600)
    return {
        "content": content,
        "raw": raw,
        "status": status,
        "content_type": content_type,
        "sdk": "python",
    }


agent.bind(handle)
app = agent.app
