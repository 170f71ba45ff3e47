-- PostgreSQL only (byte-order keys, room for updates in place): SQLite's
-- TEXT columns already compare bytes (BINARY), and it has no fillfactor.
SELECT 1;
