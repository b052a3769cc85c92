"""Group `llm` (agent `diff-llm`): durable LLM calls through the SDK's `http_client()`.

The provider is the test's OpenAI-style stub at DIFF_LLM_URL. The handler posts
{"model": <model>, "messages": [{"role": "user", "content": prompt}], "stream": stream} and
returns the status, content-type and the body it was handed: parsed JSON, or for a stream
the concatenated `choices[0].delta.content`. A model the policy denies (`gpt-denied`) is
refused by the SDK's transport without calling the provider; the handler returns that answer,
or with `"raise": true` turns it back into the SDK's error with `raise_for_refusal`.
"""

import json
import os

import diffkit  # noqa: F401  (exits with the test process)
from rebuno import Agent, http_client, raise_for_refusal


def sse_content(raw: str) -> str:
    parts = []
    for line in raw.splitlines():
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            continue
        delta = (json.loads(data).get("choices") or [{}])[0].get("delta") or {}
        parts.append(delta.get("content") or "")
    return "".join(parts)


agent = Agent("diff-llm")


async def handle(input: dict):
    stream = bool(input.get("stream", False))
    body = {
        "model": input["model"],
        "messages": [{"role": "user", "content": input["prompt"]}],
        "stream": stream,
    }
    url = os.environ["DIFF_LLM_URL"]
    async with http_client(timeout=30.0) as client:
        if stream:
            async with client.stream("POST", url, json=body) as resp:
                raw = b"".join([chunk async for chunk in resp.aiter_bytes()]).decode()
        else:
            resp = await client.post(url, json=body)
            raw = resp.text
    content_type = resp.headers.get("content-type", "").split(";")[0]
    if input.get("raise") and resp.status_code >= 400:
        raise_for_refusal(RuntimeError(raw))
    answer = sse_content(raw) if stream and resp.status_code < 400 else json.loads(raw)
    return {"status": resp.status_code, "content_type": content_type, "answer": answer}


agent.bind(handle)
app = agent.app
