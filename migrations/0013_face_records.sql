-- What the faces keep beside a session's tree (A2A contexts, MCP sessions):
-- the record of each finished task retired from the tree, the messages
-- that followed a task's first, and the MCP servers a session registered.
-- Each goes with its session.
CREATE TABLE retired_tasks (
    session_id TEXT NOT NULL,
    id TEXT NOT NULL,
    ended_ms BIGINT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (session_id, id)
);
CREATE INDEX retired_tasks_by_end ON retired_tasks (session_id, ended_ms);
CREATE TABLE task_history (
    session_id TEXT NOT NULL,
    subagent_id TEXT NOT NULL,
    messages TEXT NOT NULL,
    PRIMARY KEY (session_id, subagent_id)
);
CREATE TABLE session_servers (
    session_id TEXT NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,
    PRIMARY KEY (session_id, name)
);
-- A caller's contexts (ListTasks without a contextId), by face.
CREATE INDEX sessions_by_principal ON sessions (transport, principal);
