"""Scenario f: a resource (a directory per execution) checkpointed after every step, then forked.

`DirDriver` is a small resource driver: `create` makes a fresh directory (restored from a
checkpoint copy when the kernel selects one), `open` reuses a bound directory, `checkpoint`
copies the directory under INTEROP_DIR/checkpoints/<ref>.
"""

import os
import shutil
import uuid
from contextvars import ContextVar

from harness import mark
from rebuno import Agent, CheckpointPolicy, CheckpointUnavailable, resource, tool

agent = Agent("interop-resource")
WORKSPACE: ContextVar[str] = ContextVar("workspace")


class DirDriver:
    driver_id = "interop-dir"
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
        mark("driver.create", checkpoint_ref or "-")
        return path, {"path": path}

    def open(self, binding):
        mark("driver.open", binding["path"])
        return binding["path"]

    def checkpoint(self, handle):
        ref = "cp-" + uuid.uuid4().hex[:12]
        shutil.copytree(handle, os.path.join(self.root, "checkpoints", ref))
        mark("driver.checkpoint", f"{ref} {' '.join(sorted(os.listdir(handle)))}")
        return ref


@tool("write_note", resources=["ws"])
async def write_note(name: str, text: str) -> list:
    path = WORKSPACE.get()
    mark("write_note.ran", name)
    with open(os.path.join(path, name), "w", encoding="utf-8") as f:
        f.write(text)
    return sorted(os.listdir(path))


async def handle(notes: list):
    driver = DirDriver(os.environ["INTEROP_DIR"])
    path = await resource("ws", driver=driver, checkpoints=CheckpointPolicy(every_steps=1))
    WORKSPACE.set(path)
    listings = []
    for note in notes:
        listings.append(await write_note(note["name"], note["text"]))
    files = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), encoding="utf-8") as f:
            files[name] = f.read()
    return {"listings": listings, "files": files}


agent.bind(handle)
app = agent.app
