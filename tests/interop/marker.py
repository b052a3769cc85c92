"""Marker files: how the agents tell the Rust test which bodies ran, in which process."""

import os


def mark(name: str, text: str = "") -> None:
    """Append one line (pid and text) to INTEROP_DIR/<name>."""
    path = os.path.join(os.environ["INTEROP_DIR"], name)
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {text}\n")
