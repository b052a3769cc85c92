"""Test plumbing shared by the interop agents (none of it touches the SDK).

* `mark(name, text)`: appends `<pid> <text>` to INTEROP_DIR/<name>, so the Rust test can see
  which bodies ran, and in which process.
* On import, a daemon thread exits this process when its parent (the test binary) goes away,
  so an aborted test run never leaves uvicorn servers behind. The tests kill their agents
  themselves in the normal case.
"""

import os
import threading
import time


def mark(name: str, text: str = "") -> None:
    path = os.path.join(os.environ["INTEROP_DIR"], name)
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {text}\n")


def _exit_with_parent() -> None:
    parent = os.getppid()
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


threading.Thread(target=_exit_with_parent, name="exit-with-parent", daemon=True).start()
