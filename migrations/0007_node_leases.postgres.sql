-- Leases per node, fencing per session.
--
-- A session's row in `leases` keeps its owner node and epoch (fencing is
-- unchanged: every commit proves the epoch of each session it writes), but
-- no expiry of its own: it is owned as long as its node's lease runs
-- (`nodes.lease_until_ms`), which the node renews in one row, whatever its
-- number of sessions. A session handed back (handed off, or its node shut
-- down) is `released`: anyone may take it at once.

ALTER TABLE nodes ADD COLUMN lease_until_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE leases DROP COLUMN lease_until_ms;
ALTER TABLE leases ADD COLUMN released BOOLEAN NOT NULL DEFAULT false;

-- As in migration 2: checks that `node` owns each of `ids` at `epochs` (0:
-- a session the node just opened, whose lease row starts here at epoch 1),
-- keeps them locked against a takeover until the transaction ends, drops
-- the lease of a session in `ends`, and raises SA409 naming every session
-- the node does not own. `lease_ms` is kept for the callers' signature.
CREATE OR REPLACE FUNCTION subagentd_fence(node TEXT, ids TEXT[], epochs BIGINT[], ends BOOLEAN[], lease_ms BIGINT)
RETURNS INTEGER LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    lost TEXT[] := '{}';
    held RECORD;
BEGIN
    FOR i IN 1 .. coalesce(array_length(ids, 1), 0) LOOP
        IF epochs[i] = 0 THEN
            INSERT INTO leases (session_id, node_id, epoch)
            VALUES (ids[i], node, 1)
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
-- it: its lease row is missing or released, its owner's node lease lapsed
-- (or the node is gone from the list), or the owner's presence lock is free
-- (the owner died; believed once PostgreSQL has been up for a lease).
-- Returns the new epoch; else epoch 0 with the owner and how long its
-- node's lease has left (owner NULL: no such session).
CREATE OR REPLACE FUNCTION subagentd_acquire(sid TEXT, node TEXT, lease_ms BIGINT,
                                  OUT epoch BIGINT, OUT owner TEXT, OUT wait_ms BIGINT)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    cur RECORD;
    owner_until BIGINT;
    now_ms BIGINT := subagentd_now_ms();
BEGIN
    epoch := 0; owner := NULL; wait_ms := 0;
    IF NOT EXISTS (SELECT 1 FROM sessions WHERE id = sid) THEN
        RETURN;
    END IF;
    SELECT l.node_id, l.epoch, l.released INTO cur FROM leases l WHERE l.session_id = sid FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO leases (session_id, node_id, epoch)
        VALUES (sid, node, 1) ON CONFLICT (session_id) DO NOTHING;
        IF FOUND THEN
            epoch := 1; owner := node;
        ELSE
            owner := '';  -- taken meanwhile: ask again
        END IF;
        RETURN;
    END IF;
    owner_until := coalesce((SELECT n.lease_until_ms FROM nodes n WHERE n.id = cur.node_id), 0);
    IF cur.node_id = node OR cur.released OR owner_until <= now_ms
       OR (subagentd_presence_settled(lease_ms)
           AND pg_try_advisory_xact_lock(hashtext('subagentd node'), hashtext(cur.node_id))) THEN
        UPDATE leases SET node_id = node, epoch = cur.epoch + 1, released = false
        WHERE session_id = sid;
        epoch := cur.epoch + 1; owner := node;
        RETURN;
    END IF;
    owner := cur.node_id;
    wait_ms := owner_until - now_ms;
END $$;
