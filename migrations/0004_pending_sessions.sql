-- An HTTP session is stored when `POST /session` creates it, so that any
-- node can serve its first `/send`; until its first handshake succeeds it is
-- `handshaken = 0` (served again, it still needs one).
ALTER TABLE sessions ADD COLUMN handshaken BIGINT NOT NULL DEFAULT 1;
