"""Test plumbing of the differential agents (none of it touches the SDK).

* `mark(name, text)`: appends `<label> <text>` to DIFF_DIR/<name>, so the Rust test sees which
  bodies ran, and in which agent process (DIFF_LABEL names it; the Rust twin writes the same).
* `released(name)`: waits until the test creates DIFF_DIR/release.<name>, so the test decides
  when a body may go on (a crash point, a superseded attempt, a subagent's answer).
* On import, a daemon thread exits this process when its parent (the test binary) goes away.
"""

import asyncio
import os
import threading
import time

LABEL = os.environ.get("DIFF_LABEL", "py")


def mark(name: str, text: str = "") -> None:
    with open(os.path.join(os.environ["DIFF_DIR"], name), "a", encoding="utf-8") as f:
        f.write(f"{LABEL} {text}\n")


async def released(name: str) -> None:
    path = os.path.join(os.environ["DIFF_DIR"], f"release.{name}")
    while not os.path.exists(path):
        await asyncio.sleep(0.02)


def _exit_with_parent() -> None:
    parent = os.getppid()
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


threading.Thread(target=_exit_with_parent, name="exit-with-parent", daemon=True).start()
