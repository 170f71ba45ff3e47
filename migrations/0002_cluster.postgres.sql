-- Several hosts (PostgreSQL only): who owns each session, and the nodes.
--
-- A session has one owner node at a time. Its lease row names the node,
-- an epoch that grows at every change of owner, and when the lease lapses
-- (ms since the epoch, by this server's clock, so nodes' clocks never
-- matter). Every batch a node commits first passes `subagentd_fence`, in
-- the same statement: a node that lost a session (paused, cut off) past its
-- lease can never write to it again.

CREATE TABLE leases (
    session_id TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    lease_until_ms BIGINT NOT NULL
);
CREATE INDEX leases_node ON leases (node_id);

CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    http_addr TEXT,
    tcp_addr TEXT,
    started_ms BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL
);

CREATE FUNCTION subagentd_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS
$$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT $$;

-- Checks that `node` owns each of `ids` at `epochs` (0: a session the node
-- just opened, whose lease starts here at epoch 1), and keeps them locked
-- against a takeover (which locks FOR UPDATE) until the transaction ends.
-- Renewals (plain updates) do not wait for it. The lease of a session in
-- `ends` goes with it. Raises SQLSTATE SA409 naming every session the node
-- does not own, so the batch is rolled back whole.
CREATE FUNCTION subagentd_fence(node TEXT, ids TEXT[], epochs BIGINT[], ends BOOLEAN[], lease_ms BIGINT)
RETURNS INTEGER LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lost TEXT[] := '{}';
    held RECORD;
BEGIN
    FOR i IN 1 .. coalesce(array_length(ids, 1), 0) LOOP
        IF epochs[i] = 0 THEN
            INSERT INTO leases (session_id, node_id, epoch, lease_until_ms)
            VALUES (ids[i], node, 1, subagentd_now_ms() + lease_ms)
            ON CONFLICT (session_id) DO NOTHING;
        END IF;
        SELECT l.node_id, l.epoch INTO held FROM leases l WHERE l.session_id = ids[i] FOR KEY SHARE;
        IF NOT FOUND OR held.node_id <> node OR held.epoch <> greatest(epochs[i], 1) THEN
            lost := lost || ids[i];
        ELSIF ends[i] THEN
            DELETE FROM leases WHERE session_id = ids[i];
        END IF;
    END LOOP;
    IF coalesce(array_length(lost, 1), 0) > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'SA409', MESSAGE = 'fenced: ' || array_to_string(lost, ',');
    END IF;
    RETURN 1;
END $$;

-- Takes session `sid` for `node`, when it is stored and nobody else holds
-- it: its lease row is missing, lapsed, or its owner's presence lock (held
-- by a live node on a connection of its own) is free, so the owner died.
-- Returns the new epoch; else epoch 0 with the owner and how long its lease
-- has left (owner NULL: no such session).
CREATE FUNCTION subagentd_acquire(sid TEXT, node TEXT, lease_ms BIGINT,
                                  OUT epoch BIGINT, OUT owner TEXT, OUT wait_ms BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    cur RECORD;
    now_ms BIGINT := subagentd_now_ms();
BEGIN
    epoch := 0; owner := NULL; wait_ms := 0;
    IF NOT EXISTS (SELECT 1 FROM sessions WHERE id = sid) THEN
        RETURN;
    END IF;
    SELECT l.node_id, l.epoch, l.lease_until_ms INTO cur FROM leases l WHERE l.session_id = sid FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO leases (session_id, node_id, epoch, lease_until_ms)
        VALUES (sid, node, 1, now_ms + lease_ms) ON CONFLICT (session_id) DO NOTHING;
        IF FOUND THEN
            epoch := 1; owner := node;
        ELSE
            owner := '';  -- taken meanwhile: ask again
        END IF;
        RETURN;
    END IF;
    IF cur.node_id = node OR cur.lease_until_ms <= now_ms
       OR pg_try_advisory_xact_lock(hashtext('subagentd node'), hashtext(cur.node_id)) THEN
        UPDATE leases SET node_id = node, epoch = cur.epoch + 1, lease_until_ms = now_ms + lease_ms
        WHERE session_id = sid;
        epoch := cur.epoch + 1; owner := node;
        RETURN;
    END IF;
    owner := cur.node_id;
    wait_ms := cur.lease_until_ms - now_ms;
END $$;
