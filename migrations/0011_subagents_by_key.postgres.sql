-- SQLite only (a subagent's row kept in its key's B-tree): a PostgreSQL
-- table is a heap beside its indexes either way.
SELECT 1;
