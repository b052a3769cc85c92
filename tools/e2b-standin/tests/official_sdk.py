"""E2B's own Python SDK (e2b==2.63.0, unchanged) against the E2B stand-in.

Run by tests/official_sdk.rs with the venv of scripts/interop-venv.sh and the environment the
SDK reads: E2B_API_URL and E2B_SANDBOX_URL (the stand-in's URL; plain http, so the SDK speaks
HTTP/1.1 and sends E2b-Sandbox-Id with every envd request) and E2B_API_KEY.

Each check prints one line; the last line is "N passed, M failed", and the exit code is 1 when a
check failed.
"""

import asyncio
import os
import sys
import time
import traceback

import e2b
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    FileNotFoundException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    TimeoutException,
)

RESULTS = {"passed": 0, "failed": 0}


def check(name):
    """Runs the decorated function as one named check and records its outcome."""

    def run(fn):
        try:
            fn()
        except Exception:  # noqa: BLE001 - every failure is reported, not raised
            RESULTS["failed"] += 1
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        else:
            RESULTS["passed"] += 1
            print(f"ok   {name}", flush=True)
        return fn

    return run


def expect_raises(kind, fn):
    try:
        fn()
    except kind as e:
        return e
    raise AssertionError(f"expected {kind.__name__}")


def main():
    assert e2b.__version__ if hasattr(e2b, "__version__") else True
    for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"):
        assert os.environ.get(name), f"{name} is not set"

    sbx = Sandbox.create("base", timeout=120)
    state = {}

    @check("create base: a sandbox id and an envd access token")
    def _():
        assert sbx.sandbox_id.startswith("i"), sbx.sandbox_id
        assert sbx._envd_access_token, "the /v2 create returns an envd access token"
        info = sbx.get_info()
        assert info.sandbox_id == sbx.sandbox_id
        assert info.state.value == "running", info.state
        listed = [s.sandbox_id for s in Sandbox.list().next_items()]
        assert sbx.sandbox_id in listed, listed

    @check("files: write, read (relative and absolute), bytes")
    def _():
        info = sbx.files.write("hello.txt", "hi there")
        assert info.path == "/home/user/hello.txt", info.path
        assert sbx.files.read("hello.txt") == "hi there"
        assert sbx.files.read("/home/user/hello.txt") == "hi there"
        sbx.files.write("/home/user/deep/er/data.bin", b"\x00\x01\xff")
        assert sbx.files.read("deep/er/data.bin", format="bytes") == bytearray(b"\x00\x01\xff")

    @check("files: write_files (multipart with several parts)")
    def _():
        infos = sbx.files.write_files(
            [{"path": "multi/a.txt", "data": "A"}, {"path": "/home/user/multi/b.txt", "data": "B"}]
        )
        assert sorted(i.path for i in infos) == ["/home/user/multi/a.txt", "/home/user/multi/b.txt"]
        assert sbx.files.read("multi/b.txt") == "B"

    @check("files: list, exists, make_dir, get_info, rename, remove")
    def _():
        names = {e.name: e for e in sbx.files.list("/home/user")}
        assert {"hello.txt", "deep", "multi"} <= set(names), names
        assert names["hello.txt"].type.value == "file", names["hello.txt"].type
        assert names["deep"].type.value == "dir", names["deep"].type
        assert names["hello.txt"].size == len("hi there")
        deep = [e.path for e in sbx.files.list("/home/user/deep", depth=2)]
        assert deep == ["/home/user/deep/er", "/home/user/deep/er/data.bin"], deep
        assert sbx.files.exists("hello.txt")
        assert not sbx.files.exists("nope.txt")
        assert sbx.files.make_dir("newdir/sub") is True
        assert sbx.files.make_dir("newdir/sub") is False
        assert sbx.files.get_info("newdir").type.value == "dir"
        moved = sbx.files.rename("multi/a.txt", "moved/a.txt")
        assert moved.path == "/home/user/moved/a.txt", moved.path
        sbx.files.remove("newdir")
        assert not sbx.files.exists("newdir")

    @check("files: a missing file is FileNotFoundException")
    def _():
        expect_raises(FileNotFoundException, lambda: sbx.files.read("missing.txt"))
        expect_raises(FileNotFoundException, lambda: sbx.files.list("/home/user/missing"))

    @check("commands: stdout, stderr, exit code, envs, cwd")
    def _():
        res = sbx.commands.run("echo out; echo err >&2")
        assert (res.stdout, res.stderr, res.exit_code) == ("out\n", "err\n", 0), res
        res = sbx.commands.run('echo "$FOO"', envs={"FOO": "bar"})
        assert res.stdout == "bar\n", res
        res = sbx.commands.run("cat data.bin | wc -c", cwd="/home/user/deep/er")
        assert res.stdout.strip() == "3", res
        res = sbx.commands.run("cat ~/hello.txt")
        assert res.stdout == "hi there", res

    @check("commands: streamed output reaches the callbacks")
    def _():
        seen = []
        sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.1; done", on_stdout=seen.append)
        assert "".join(seen) == "1\n2\n3\n", seen

    @check("commands: a non-zero exit is CommandExitException")
    def _():
        err = expect_raises(CommandExitException, lambda: sbx.commands.run("echo no >&2; exit 3"))
        assert err.exit_code == 3, err.exit_code
        assert err.stderr == "no\n", err.stderr

    @check("commands: a timeout is TimeoutException")
    def _():
        started = time.monotonic()
        expect_raises(TimeoutException, lambda: sbx.commands.run("sleep 10", timeout=1))
        assert time.monotonic() - started < 8

    @check("commands: background, list, kill")
    def _():
        handle = sbx.commands.run("sleep 30", background=True)
        pids = [p.pid for p in sbx.commands.list()]
        assert handle.pid in pids, pids
        assert sbx.commands.kill(handle.pid) is True
        err = expect_raises(CommandExitException, handle.wait)
        assert err.exit_code == -1, err.exit_code
        assert sbx.commands.kill(handle.pid) is False

    @check("commands: stdin")
    def _():
        handle = sbx.commands.run("cat", background=True, stdin=True)
        sbx.commands.send_stdin(handle.pid, "piped\n")
        sbx.commands.close_stdin(handle.pid)
        assert handle.wait().stdout == "piped\n"

    @check("snapshots: create_snapshot, list_snapshots, create from the snapshot")
    def _():
        snap = sbx.create_snapshot()
        assert snap.snapshot_id.endswith(":default"), snap.snapshot_id
        listed = [s.snapshot_id for s in Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items()]
        assert snap.snapshot_id in listed, listed
        sbx.files.write("hello.txt", "changed after the snapshot")
        child = Sandbox.create(snap.snapshot_id, timeout=60)
        try:
            assert child.sandbox_id != sbx.sandbox_id
            assert child.files.read("hello.txt") == "hi there"
            assert child.files.read("deep/er/data.bin", format="bytes") == bytearray(b"\x00\x01\xff")
        finally:
            child.kill()
        state["snapshot"] = snap.snapshot_id

    @check("snapshots: the sandbox runs on after a snapshot")
    def _():
        assert sbx.commands.run("echo still").stdout == "still\n"

    @check("snapshots: a missing snapshot is a 404 SandboxException")
    def _():
        err = expect_raises(SandboxException, lambda: Sandbox.create("nosuchsnapshot0000000:default"))
        assert err.status_code == 404, (err.status_code, err)
        assert "not found" in str(err), err

    @check("snapshots: delete_snapshot, then creating from it is a 404")
    def _():
        doomed = sbx.create_snapshot()
        assert Sandbox.delete_snapshot(doomed.snapshot_id) is True
        err = expect_raises(SandboxException, lambda: Sandbox.create(doomed.snapshot_id))
        assert err.status_code == 404, (err.status_code, err)
        assert Sandbox.delete_snapshot(doomed.snapshot_id) is False

    @check("connect: to a running sandbox")
    def _():
        again = Sandbox.connect(sbx.sandbox_id)
        assert again.files.read("hello.txt") == "changed after the snapshot"

    @check("pause: pause, pause again, envd refused while paused, connect resumes")
    def _():
        runner = sbx.commands.run("sleep 60", background=True)
        assert sbx.pause() is True
        assert sbx.pause() is False
        assert Sandbox.get_info(sbx.sandbox_id).state.value == "paused"
        assert sbx.is_running() is False
        expect_raises(SandboxNotRunningException, lambda: sbx.files.read("hello.txt"))
        resumed = Sandbox.connect(sbx.sandbox_id, timeout=120)
        assert resumed.files.read("hello.txt") == "changed after the snapshot"
        assert Sandbox.get_info(sbx.sandbox_id).state.value == "running"
        pids = [p.pid for p in resumed.commands.list()]
        assert runner.pid in pids, "the paused process lives on after resume"
        resumed.commands.kill(runner.pid)

    @check("async: AsyncSandbox.connect, files and commands")
    def _():
        async def go():
            asbx = await AsyncSandbox.connect(sbx.sandbox_id)
            await asbx.files.write("async.txt", "from async")
            assert await asbx.files.read("async.txt") == "from async"
            res = await asbx.commands.run("echo async")
            assert res.stdout == "async\n", res

        asyncio.run(go())

    @check("auth: a wrong API key is AuthenticationException")
    def _():
        expect_raises(
            AuthenticationException,
            lambda: Sandbox.create("base", api_key="e2b_0000000000000000000000000000000000000000"),
        )

    @check("timeout: a sandbox is killed at its timeout")
    def _():
        short = Sandbox.create("base", timeout=1)
        time.sleep(2.5)
        expect_raises(SandboxNotFoundException, lambda: Sandbox.get_info(short.sandbox_id))

    @check("kill: kill, kill again, gone")
    def _():
        assert sbx.kill() is True
        assert Sandbox.kill(sbx.sandbox_id) is False
        expect_raises(SandboxNotFoundException, lambda: Sandbox.get_info(sbx.sandbox_id))

    print(f"{RESULTS['passed']} passed, {RESULTS['failed']} failed", flush=True)
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
