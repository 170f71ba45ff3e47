-- Keys compared byte by byte: SQLite's TEXT columns already are (BINARY),
-- so there is nothing to change here (see the PostgreSQL migration).
SELECT 1;
