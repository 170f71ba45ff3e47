"""The host's MCP face, checked with the official `mcp` Python client
(pinned in requirements.txt). tests/it/mcp_face_sdk.rs runs it.

    client_checks.py CHECK stdio BINARY [SERVER ARGS...]
    client_checks.py CHECK http URL [TASK_ID]

Each check asserts what it needs and prints one JSON line of what it saw;
any failure exits non-zero with the assertion's message.
"""

import asyncio
import json
import os
import signal
import sys
from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

TOOLS = {
    "run_subagent", "spawn_subagent", "delegate_task", "await_subagent", "list_subagents",
    "send_message", "cancel_subagent", "terminate_subagent", "merge_results",
}


def spawn_step(name, script):
    return {"spawn": {"agent": {"name": name, "model": "scripted"},
                      "task": {"name": "t", "instruction": "i", "metadata": {"script": script}}}}


def three_levels(leaf_ms):
    """A root that spawns a child that spawns a grandchild sleeping leaf_ms."""
    leaf = [{"progress": "leaf working"}, {"sleep_ms": leaf_ms}, {"return": {"leaf": True}}]
    middle = [spawn_step("leaf", leaf), {"await_children": {}}, {"return": {"middle": True}}]
    return [{"progress": "root working"}, spawn_step("middle", middle), {"await_children": {}},
            {"return": {"answer": "done"}}]


def run_args(script):
    return {"instruction": "run the tree", "name": "root", "task_metadata": {"script": script}}


class Target:
    """Where the server is: a stdio command, or a streamable HTTP URL."""

    def __init__(self, transport, where, extra):
        self.transport, self.where, self.extra = transport, where, extra

    @asynccontextmanager
    async def session(self, **callbacks):
        if self.transport == "stdio":
            params = StdioServerParameters(command=self.where, args=["mcp", *self.extra],
                                           env={**os.environ, "RUST_LOG": "warn"})
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write, **callbacks) as session:
                    await session.initialize()
                    yield session
        else:
            async with streamablehttp_client(self.where) as (read, write, _):
                async with ClientSession(read, write, **callbacks) as session:
                    await session.initialize()
                    yield session


async def rows(session):
    listed = await session.call_tool("list_subagents", {})
    assert not listed.isError, listed
    return listed.structuredContent["subagents"]


async def wait_rows(session, wanted, what):
    for _ in range(200):
        now = await rows(session)
        if wanted(now):
            return now
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} never happened: {now}")


async def check_tree(target):
    progress = []
    updates = []

    async def on_message(message):
        if isinstance(message, types.ServerNotification) and \
                isinstance(message.root, types.ResourceUpdatedNotification):
            updates.append(str(message.root.params.uri))

    async def on_progress(done, total, message):
        progress.append((done, message))

    async with target.session(message_handler=on_message) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == TOOLS, sorted(tools)
        assert tools["terminate_subagent"].annotations.destructiveHint is True
        assert tools["list_subagents"].annotations.readOnlyHint is True
        assert all(tool.outputSchema for tool in tools.values())
        assert tools["run_subagent"].execution.taskSupport == "optional"
        result = await session.call_tool("run_subagent", run_args(three_levels(200)),
                                         progress_callback=on_progress)
        assert not result.isError, result
        outcome = result.structuredContent
        assert outcome["status"] == "COMPLETED", outcome
        assert outcome["result"]["answer"] == "done", outcome
        middle = next(iter(outcome["result"]["children"].values()))["result"]
        assert next(iter(middle["children"].values()))["result"]["leaf"] is True, outcome
        assert [n for n, _ in progress] == sorted(n for n, _ in progress), progress
        texts = [message or "" for _, message in progress]
        assert any("leaf working" in text for text in texts), texts
        assert len({text.split()[0] for text in texts}) == 3, texts
        # The call's tree has ended: it leaves the session's tree, its root
        # listed alone as it ended (retired).
        tree = await wait_rows(session, lambda now: len(now) == 1, "the call leaving the tree")
        assert tree[0]["status"] == "COMPLETED" and tree[0]["depth"] == 0, tree
        resources = (await session.list_resources()).resources
        assert len(resources) == 1, resources
        root_uri = next(str(r.uri) for r in resources if str(r.uri).endswith(outcome["subagent_id"]))
        read = await session.read_resource(root_uri)
        body = json.loads(read.contents[0].text)
        assert body["status"] == "COMPLETED" and body["result"]["answer"] == "done", body
        assert len(body["children"]) == 1, body
        # A subscribed subagent's changes arrive unasked.
        spawned = await session.call_tool("spawn_subagent", {"name": "watched"})
        watched = spawned.structuredContent["subagent_id"]
        uri = root_uri.rsplit("/", 1)[0] + "/" + watched
        await session.subscribe_resource(uri)
        handed = await session.call_tool("delegate_task", {
            "subagent_id": watched, "instruction": "quick", "wait": False,
            "task_metadata": {"script": [{"progress": "tick"}, {"return": {"ok": True}}]}})
        assert handed.structuredContent["subagent_id"] == watched, handed
        awaited = await session.call_tool("await_subagent", {"subagent_id": watched})
        assert awaited.structuredContent["status"] == "COMPLETED", awaited
        for _ in range(100):
            if uri in updates:
                break
            await asyncio.sleep(0.05)
        assert uri in updates, updates
        bad = await session.call_tool("await_subagent", {"subagent_id": "sub_ffffffff"})
        assert bad.isError and "unknown_subagent" in bad.content[0].text, bad
    print(json.dumps({"check": "tree", "progress": len(progress), "updates": len(updates)}))


async def check_cancel(target):
    started = asyncio.Event()

    async def on_progress(done, total, message):
        if message and "leaf working" in message:
            started.set()

    async with target.session() as session:
        request_id = session._request_id  # the id the next request takes
        call = asyncio.create_task(session.call_tool(
            "run_subagent", run_args(three_levels(60_000)), progress_callback=on_progress))
        await asyncio.wait_for(started.wait(), 20)
        busy = await rows(session)
        assert len(busy) == 3 and all(row["status"] in ("RUNNING", "WAITING") for row in busy), busy
        await session.send_notification(types.ClientNotification(types.CancelledNotification(
            params=types.CancelledNotificationParams(requestId=request_id, reason="changed my mind"))))
        call.cancel()
        # The whole tree cancelled; the call's root then leaves the tree
        # (retired), listed alone as it ended.
        stopped = await wait_rows(
            session, lambda now: now and all(row["status"] == "CANCELLED" for row in now), "the tree being cancelled")
        assert len(stopped) in (1, 3), stopped
        retired = await wait_rows(session, lambda now: len(now) == 1, "the cancelled call leaving the tree")
        assert retired[0]["status"] == "CANCELLED" and retired[0]["depth"] == 0, retired
    print(json.dumps({"check": "cancel", "cancelled": len(stopped), "retired": retired[0]["status"]}))


async def check_elicit(target):
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        assert params.requestedSchema["properties"]["answer"]["enum"] == ["red", "blue"], params
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    script = [{"ask_user": {"question": "Which colour?", "choices": ["red", "blue"]}}, {"return": {"asked": True}}]
    async with target.session(elicitation_callback=on_elicit) as session:
        result = await session.call_tool("run_subagent", run_args(script))
        outcome = result.structuredContent
        assert outcome["status"] == "COMPLETED", outcome
        assert "blue" in json.dumps(outcome["result"]), outcome
        assert asked and "Which colour?" in asked[0], asked
    print(json.dumps({"check": "elicit", "asked": asked}))


async def start_task(session, leaf_ms):
    created = await session.experimental.call_tool_as_task("run_subagent", run_args(three_levels(leaf_ms)))
    task_id = created.task.taskId
    assert created.task.status == "working", created
    status = await session.experimental.get_task(task_id)
    assert status.status in ("working", "completed"), status
    listed = await session.experimental.list_tasks()
    assert task_id in [task.taskId for task in listed.tasks], listed
    return task_id


async def finish_task(session, task_id):
    status = await session.experimental.get_task(task_id)
    assert status.status in ("working", "completed"), status
    result = await session.experimental.get_task_result(task_id, types.CallToolResult)
    assert result.structuredContent["status"] == "COMPLETED", result
    assert result.structuredContent["result"]["answer"] == "done", result
    done = await session.experimental.get_task(task_id)
    assert done.status == "completed", done
    return result


async def check_task_start(target):
    async with target.session() as session:
        task_id = await start_task(session, 3_000)
    print(json.dumps({"check": "task-start", "task_id": task_id}))


async def check_task_finish(target, task_id):
    async with target.session() as session:
        await finish_task(session, task_id)
    print(json.dumps({"check": "task-finish", "task_id": task_id}))


async def check_task_cancel(target):
    async with target.session() as session:
        task_id = await start_task(session, 60_000)
        await wait_rows(session, lambda now: len(now) == 3, "the tree starting")
        cancelled = await session.experimental.cancel_task(task_id)
        assert cancelled.status == "cancelled", cancelled
        await wait_rows(session, lambda now: now and all(row["status"] == "CANCELLED" for row in now), "the tree stopping")
        again = await session.experimental.get_task(task_id)
        assert again.status == "cancelled", again
        try:
            await session.experimental.cancel_task(task_id)
            raise AssertionError("a second cancel was taken")
        except Exception as err:  # McpError: the task has ended
            assert "ended" in str(err), err
    print(json.dumps({"check": "task-cancel", "task_id": task_id}))


async def check_restart_http(target):
    """HTTP: a task started; the server is restarted (by whoever runs this:
    it prints the task and waits for a line on stdin); the same session
    goes on and gets the task's result."""
    async with streamablehttp_client(target.where, terminate_on_close=False) as (read, write, session_id):
        async with ClientSession(read, write) as session:
            await session.initialize()
            task_id = await start_task(session, 3_000)
            print(json.dumps({"check": "restart-http", "task_id": task_id, "session": session_id()}), flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            await finish_task(session, task_id)
            # Ended, the call's tree leaves the session's: its root alone is listed.
            tree = await wait_rows(session, lambda now: len(now) == 1, "the task leaving the tree")
            assert tree[0]["status"] == "COMPLETED", tree
    print(json.dumps({"check": "restart-http", "finished": task_id}))


async def check_restart_stdio(target):
    """stdio: a task started, the server SIGKILLed, a new one answers it."""
    pidfile = os.path.join(os.path.dirname(target.extra[-1].split(":", 1)[1]), "mcp.pid")
    wrapper = Target("stdio", "/bin/sh", [])

    @asynccontextmanager
    async def session():
        params = StdioServerParameters(command="/bin/sh", args=[
            "-c", f'echo $$ > {pidfile}; exec "$0" "$@"', target.where, "mcp", *target.extra],
            env={**os.environ, "RUST_LOG": "warn"})
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                yield client

    wrapper.session = session
    async with wrapper.session() as first:
        task_id = await start_task(first, 3_000)
        os.kill(int(open(pidfile).read()), signal.SIGKILL)
    async with wrapper.session() as second:
        await finish_task(second, task_id)
    print(json.dumps({"check": "restart-stdio", "task_id": task_id}))


async def check_resume_stdio(target):
    """stdio: a task started, the client leaves (stdin closed) while it
    runs; the next server on the same store answers it."""
    async with target.session() as first:
        task_id = await start_task(first, 2_000)
    async with target.session() as second:
        await finish_task(second, task_id)
    print(json.dumps({"check": "resume-stdio", "task_id": task_id}))


CHECKS = {
    "tree": check_tree,
    "cancel": check_cancel,
    "elicit": check_elicit,
    "task-start": check_task_start,
    "task-cancel": check_task_cancel,
    "restart-stdio": check_restart_stdio,
    "restart-http": check_restart_http,
    "resume-stdio": check_resume_stdio,
}


def main():
    check, transport, where, *rest = sys.argv[1:]
    if check == "task-finish":
        asyncio.run(check_task_finish(Target(transport, where, []), rest[0]))
        return
    asyncio.run(CHECKS[check](Target(transport, where, rest)))


if __name__ == "__main__":
    main()
