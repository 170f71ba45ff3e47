-- PostgreSQL only (room left on each page for updates in place): SQLite
-- has no fillfactor.
SELECT 1;
