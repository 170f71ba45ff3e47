-- The highest request frame number a session has journaled, kept when its
-- frames are served and deleted: frames numbered after a restart go on
-- from it, so a new frame never takes a served one's number (an operation
-- keyed by its frame would answer the old frame's outcome instead).
ALTER TABLE sessions ADD COLUMN last_inbound BIGINT NOT NULL DEFAULT 0;
