-- Leases per node (see the PostgreSQL text of this migration); an SQLite
-- store has one node, and its tables keep the same shape.

ALTER TABLE nodes ADD COLUMN lease_until_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE leases DROP COLUMN lease_until_ms;
ALTER TABLE leases ADD COLUMN released BOOLEAN NOT NULL DEFAULT false;
