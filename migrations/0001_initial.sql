-- subagentd's durable state (one schema for SQLite and PostgreSQL: plain
-- TEXT and BIGINT columns; JSON is stored as text).

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    capabilities TEXT NOT NULL,
    principal TEXT,
    transport TEXT NOT NULL,
    next_seq BIGINT NOT NULL,
    created_ms BIGINT NOT NULL,
    touched_ms BIGINT NOT NULL
);
CREATE INDEX sessions_touched ON sessions (touched_ms);

CREATE TABLE subagents (
    session_id TEXT NOT NULL,
    id TEXT NOT NULL,
    ord BIGINT NOT NULL,
    parent_id TEXT,
    parent_agent_id TEXT,
    root_agent_id TEXT,
    depth BIGINT NOT NULL,
    spawn_key TEXT,
    tasks_started BIGINT NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    PRIMARY KEY (session_id, id)
);

CREATE TABLE tasks (
    session_id TEXT NOT NULL,
    subagent_id TEXT NOT NULL,
    task TEXT NOT NULL,
    task_no BIGINT NOT NULL,
    attempt BIGINT NOT NULL,
    step BIGINT NOT NULL,
    checkpoint TEXT,
    PRIMARY KEY (session_id, subagent_id)
);

CREATE TABLE memories (
    session_id TEXT NOT NULL,
    owner_id TEXT NOT NULL,
    entries TEXT NOT NULL,
    PRIMARY KEY (session_id, owner_id)
);

CREATE TABLE mailboxes (
    session_id TEXT NOT NULL,
    subagent_id TEXT NOT NULL,
    messages TEXT NOT NULL,
    PRIMARY KEY (session_id, subagent_id)
);

CREATE TABLE journal (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE inbound (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    frame TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
