-- Several hosts need PostgreSQL; an SQLite store has one node. The tables
-- exist here too so both schemas stay at the same version and shape.

CREATE TABLE leases (
    session_id TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    lease_until_ms BIGINT NOT NULL
);

CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    http_addr TEXT,
    tcp_addr TEXT,
    started_ms BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL
);
