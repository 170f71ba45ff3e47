-- A free presence lock says a node died only once PostgreSQL has been up
-- for a lease: right after a restart every lock is free, live nodes'
-- included, until each retakes its own (at its next renewal, within a third
-- of the lease). Before then, a session is taken only when its lease lapsed.

CREATE FUNCTION subagentd_presence_settled(lease_ms BIGINT) RETURNS BOOLEAN LANGUAGE sql VOLATILE AS
$$ SELECT clock_timestamp() - pg_postmaster_start_time() > make_interval(secs => lease_ms / 1000.0) $$;

CREATE OR REPLACE FUNCTION subagentd_acquire(sid TEXT, node TEXT, lease_ms BIGINT,
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
       OR (subagentd_presence_settled(lease_ms)
           AND pg_try_advisory_xact_lock(hashtext('subagentd node'), hashtext(cur.node_id))) THEN
        UPDATE leases SET node_id = node, epoch = cur.epoch + 1, lease_until_ms = now_ms + lease_ms
        WHERE session_id = sid;
        epoch := cur.epoch + 1; owner := node;
        RETURN;
    END IF;
    owner := cur.node_id;
    wait_ms := cur.lease_until_ms - now_ms;
END $$;
