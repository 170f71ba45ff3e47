#!/usr/bin/env python3
"""Drive subagentd's A2A v1.0 front door with the official `a2a-sdk` client.

    python client_checks.py BASE_URL CHECK [ARG...]

The card is read from BASE_URL/.well-known/agent-card.json; every call goes
to the JSON-RPC interface the card names. Each CHECK prints ONE line of JSON
on stdout with what it observed, for the Rust tests to assert on. If the SDK
raises, the error goes to stderr and the exit status is 1 (2 for bad usage).
With A2A_TOKEN set, every request carries `Authorization: Bearer $A2A_TOKEN`.
With A2A_TRACE set, each request body (and each non-SSE response body) is
written to stderr, to show what went over the wire when a check fails.

Checks: card | send TEXT | send_script SCRIPT_JSON | stream_script SCRIPT_JSON
| get TASK_ID [HISTORY_LENGTH] | list [CONTEXT_ID] | cancel TASK_ID
| get_missing | start_script SCRIPT_JSON | answer TASK_ID TEXT
| subscribe TASK_ID
"""

import asyncio
import json
import os
import sys
import uuid

import httpx
from google.protobuf import json_format

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError


def out(obj):
    """The check's one line of output."""
    print(json.dumps(obj, sort_keys=True), flush=True)


def state_name(state):
    return TaskState.Name(state)


def texts(parts):
    """The text of every text part."""
    return [p.text for p in parts if p.WhichOneof("content") == "text"]


def data(parts):
    """Every data part, as plain JSON."""
    return [json_format.MessageToDict(p.data) for p in parts if p.WhichOneof("content") == "data"]


def user_message(text, task_id="", script=None):
    """A user message with one text part; a script goes in metadata.script."""
    msg = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)], task_id=task_id)
    if script is not None:
        msg.metadata.update({"script": script})
    return msg


def summary(event):
    """What `send`, `send_script` and `answer` print for the single response."""
    kind = event.WhichOneof("payload")
    if kind == "message":
        m = event.message
        return {"kind": kind, "task_id": m.task_id, "context_id": m.context_id, "state": None,
                "message_texts": texts(m.parts), "artifact_texts": [], "artifact_data": [], "history_texts": []}
    t = event.task
    return {
        "kind": kind,
        "task_id": t.id,
        "context_id": t.context_id,
        "state": state_name(t.status.state),
        "status_texts": texts(t.status.message.parts),
        "artifact_texts": [x for a in t.artifacts for x in texts(a.parts)],
        "artifact_data": [x for a in t.artifacts for x in data(a.parts)],
        "history_texts": [x for m in t.history for x in texts(m.parts)],
    }


class Stream:
    """Folds streamed events (task / status_update / artifact_update / message)."""

    def __init__(self):
        self.kinds, self.states, self.progress, self.paths = [], [], [], []
        self.task_id = None
        self.artifacts = {}  # artifact_id -> list of text parts, in arrival order

    def add(self, ev):
        kind = ev.WhichOneof("payload")
        self.kinds.append(kind)
        if kind == "task":
            self.task_id = ev.task.id
            self.states.append(state_name(ev.task.status.state))
            for a in ev.task.artifacts:
                self.artifacts[a.artifact_id] = texts(a.parts)
        elif kind == "status_update":
            su = ev.status_update
            self.task_id = self.task_id or su.task_id
            self.states.append(state_name(su.status.state))
            first = texts(su.status.message.parts)[:1]
            if first and first[0]:
                self.progress.append(first[0])
            meta = json_format.MessageToDict(su.metadata) if su.HasField("metadata") else {}
            if "path" in meta:
                self.paths.append(meta["path"])
        elif kind == "artifact_update":
            au = ev.artifact_update
            got = texts(au.artifact.parts)
            if au.append:
                self.artifacts.setdefault(au.artifact.artifact_id, []).extend(got)
            else:
                self.artifacts[au.artifact.artifact_id] = got

    def result(self):
        return {
            "kinds": self.kinds,
            "states": self.states,
            "progress": self.progress,
            "paths": self.paths,
            "final_state": self.states[-1] if self.states else None,
            "task_id": self.task_id,
            "artifact_texts": [x for got in self.artifacts.values() for x in got],
        }


async def send_once(client, msg):
    """A non-streaming send: the client yields exactly one event."""
    events = [ev async for ev in client.send_message(SendMessageRequest(message=msg))]
    if len(events) != 1:
        raise RuntimeError(f"non-streaming send yielded {len(events)} events")
    return events[0]


async def run(base, check, args, http):
    card = await A2ACardResolver(http, base).get_agent_card()
    if check == "card":
        return out({
            "name": card.name,
            "streaming": card.capabilities.streaming,
            "interfaces": [[i.url, i.protocol_binding, i.protocol_version] for i in card.supported_interfaces],
            "skills": [s.id for s in card.skills],
        })

    def client(streaming, polling=False):
        return ClientFactory(ClientConfig(streaming=streaming, polling=polling, httpx_client=http)).create(card)

    plain = client(streaming=False)
    if check == "send":
        return out(summary(await send_once(plain, user_message(args[0]))))
    if check == "send_script":
        return out(summary(await send_once(plain, user_message("run", script=json.loads(args[0])))))
    if check == "answer":
        return out(summary(await send_once(plain, user_message(args[1], task_id=args[0]))))
    if check == "start_script":
        # polling=True sets configuration.returnImmediately: the call returns at once.
        ev = await send_once(client(streaming=False, polling=True), user_message("run", script=json.loads(args[0])))
        s = summary(ev)
        return out({"task_id": s["task_id"], "context_id": s["context_id"], "state": s["state"]})
    if check == "stream_script":
        stream = Stream()
        req = SendMessageRequest(message=user_message("run", script=json.loads(args[0])))
        async for ev in client(streaming=True).send_message(req):
            stream.add(ev)
        return out(stream.result())
    if check == "subscribe":
        stream = Stream()
        async for ev in client(streaming=True).subscribe(SubscribeToTaskRequest(id=args[0])):
            stream.add(ev)
        r = stream.result()
        return out({k: r[k] for k in ("kinds", "states", "final_state", "progress", "task_id")})
    if check == "get":
        req = GetTaskRequest(id=args[0])
        if len(args) > 1:
            req.history_length = int(args[1])
        t = await plain.get_task(req)
        return out({"task_id": t.id, "state": state_name(t.status.state), "history_len": len(t.history),
                    "artifact_texts": [x for a in t.artifacts for x in texts(a.parts)]})
    if check == "get_missing":
        try:
            await plain.get_task(GetTaskRequest(id="nope"))
        except TaskNotFoundError:
            return out({"error": "TaskNotFound"})
        raise RuntimeError("GetTask of an unknown id did not raise TaskNotFoundError")
    if check == "list":
        req = ListTasksRequest(page_size=100, include_artifacts=True)
        if args:
            req.context_id = args[0]
        page = await plain.list_tasks(req)
        return out({"ids": [t.id for t in page.tasks], "states": [state_name(t.status.state) for t in page.tasks],
                    "total_size": page.total_size, "page_size": page.page_size,
                    "next_page_token": page.next_page_token})
    if check == "cancel":
        try:
            t = await plain.cancel_task(CancelTaskRequest(id=args[0]))
        except TaskNotCancelableError:
            return out({"error": "TaskNotCancelable"})
        except TaskNotFoundError:
            return out({"error": "TaskNotFound"})
        return out({"task_id": t.id, "state": state_name(t.status.state)})
    raise SystemExit(f"unknown check {check!r}\n{__doc__}")


async def trace_request(request):
    print(f">>> {request.method} {request.url} {request.content.decode(errors='replace')}", file=sys.stderr)


async def trace_response(response):
    if "text/event-stream" not in response.headers.get("content-type", ""):
        await response.aread()  # SSE bodies are left alone: reading them here would buffer the stream
        print(f"<<< {response.status_code} {response.text}", file=sys.stderr)


async def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    base, check, args = argv[1], argv[2], argv[3:]
    headers = {}
    if os.environ.get("A2A_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['A2A_TOKEN']}"
    # One httpx client for the card and every call; generous timeout for blocking sends.
    hooks = {"request": [trace_request], "response": [trace_response]} if os.environ.get("A2A_TRACE") else {}
    async with httpx.AsyncClient(headers=headers, timeout=60.0, event_hooks=hooks) as http:
        try:
            await run(base, check, args, http)
        except (IndexError, ValueError) as e:
            if isinstance(e, IndexError):
                print(f"{check}: missing argument\n{__doc__}", file=sys.stderr)
                return 2
            print(f"{check}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        except Exception as e:  # the SDK raised: report it, fail the check
            detail = f" data={e.data!r}" if getattr(e, "data", None) else ""
            print(f"{check}: {type(e).__module__}.{type(e).__name__}: {e}{detail}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv)))
