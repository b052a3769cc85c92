"""Group `flows` (agent `diff-flow`): subagents, sessions and resources.

* `lead`: a tool `consult` that runs this same agent as a subagent (case `chat`), in the
  session `thread` when one is given, and returns its output.
* `chat` with the question `sulk` fails instead: its tool `mope` raises, so the subagent
  fails with a tool error and the parent's `consult` step fails `subagent_failed`.
* `chat`: waits for the test's go (DIFF_DIR/release.chat-<question>, written once its parent
  is blocked, so the parent's suspension is in every log), reads `previous()`, records a
  `mood` step and returns an output and a state counting its turns.
* `notes`: a directory resource `ws` checkpointed after every write, written by the tool
  `write_note` (declared on `ws`); forks restore the directory from a checkpoint.
"""

import os
import shutil
import uuid
from contextvars import ContextVar

from diffkit import mark, released
from rebuno import (
    Agent,
    CheckpointPolicy,
    CheckpointUnavailable,
    Result,
    previous,
    resource,
    step,
    subagent,
    tool,
)

agent = Agent("diff-flow")
WORKSPACE: ContextVar[str] = ContextVar("workspace")


@tool
async def consult(question: str, thread: str):
    child = {"case": "chat", "question": question}
    return await subagent("diff-flow", child, session=thread)


@tool
async def mope(question: str) -> str:
    raise RuntimeError(f"no comment on {question}")


async def chat(question: str):
    await released(f"chat-{question}")
    if question == "sulk":
        return await mope(question)
    prev = await previous()
    turns = (prev or {}).get("turns", 0) + 1
    mood = await step("mood", lambda: "curious" if turns == 1 else "familiar")
    mark("chat.ran", f"turn {turns}")
    return Result(
        output={"reply": f"turn {turns}: {question}", "mood": mood, "previous": prev},
        state={"turns": turns, "last": question},
    )


class DirDriver:
    driver_id = "diff-dir"
    coverage_reuse = False
    configuration = {"layout": "flat"}

    def __init__(self, root: str):
        self.root = root

    def create(self, checkpoint_ref):
        path = os.path.join(self.root, "workspaces", uuid.uuid4().hex)
        if checkpoint_ref:
            saved = os.path.join(self.root, "checkpoints", checkpoint_ref)
            if not os.path.isdir(saved):
                raise CheckpointUnavailable(checkpoint_ref)
            shutil.copytree(saved, path)
        else:
            os.makedirs(path)
        mark("driver.create", "restored" if checkpoint_ref else "fresh")
        return path, {"path": path}

    def open(self, binding):
        return binding["path"]

    def checkpoint(self, handle):
        ref = "cp-" + uuid.uuid4().hex[:12]
        shutil.copytree(handle, os.path.join(self.root, "checkpoints", ref))
        mark("driver.checkpoint", " ".join(sorted(os.listdir(handle))))
        return ref


@tool("write_note", resources=["ws"])
async def write_note(name: str, text: str) -> list:
    path = WORKSPACE.get()
    mark("write_note.ran", name)
    with open(os.path.join(path, name), "w", encoding="utf-8") as f:
        f.write(text)
    return sorted(os.listdir(path))


async def notes(items: list):
    driver = DirDriver(os.environ["DIFF_DIR"])
    path = await resource("ws", driver=driver, checkpoints=CheckpointPolicy(every_steps=1))
    WORKSPACE.set(path)
    listings = [await write_note(n["name"], n["text"]) for n in items]
    files = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), encoding="utf-8") as f:
            files[name] = f.read()
    return {"listings": listings, "files": files}


async def handle(input: dict):
    case = input["case"]
    if case == "lead":
        answer = await consult(input["question"], input.get("thread", ""))
        return {"answer": answer}
    if case == "chat":
        return await chat(input["question"])
    if case == "notes":
        return await notes(input["notes"])
    raise ValueError(f"unknown case {case}")


agent.bind(handle)
app = agent.app
