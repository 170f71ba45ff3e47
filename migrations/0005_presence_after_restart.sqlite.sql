-- PostgreSQL only (a node's presence after a PostgreSQL restart); nothing
-- to change in SQLite, whose schema keeps the same version.
SELECT 1;
