-- A memory is kept in its owner's subagent row, not a table of its own: a
-- task's end then updates one row (its status, result and memory) where it
-- updated one and upserted another, the cost of every delegated task on
-- the commit path. Measured in the wire bench: one index probe and one row
-- insert fewer per cycle.
--
-- NULL: the subagent owns no memory stored yet. A memory whose owner's row
-- is gone (its subagent forgotten) was deleted with it and is not copied.
ALTER TABLE subagents ADD COLUMN memory TEXT;
UPDATE subagents SET memory = (
    SELECT entries FROM memories
    WHERE memories.session_id = subagents.session_id AND memories.owner_id = subagents.id
);
DROP TABLE memories;
