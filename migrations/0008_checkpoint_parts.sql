-- Checkpoints that store what they add: a checkpoint of a conversation
-- writes the messages added since the task's previous one as a part, and
-- the rest of its state (token counts, …) in `tasks.checkpoint` as before,
-- so that a task of N steps writes O(N) bytes, not O(N²). Loading puts the
-- list back: the parts, in `seq` order, are the state's field
-- `tasks.appended_to` (NULL: the checkpoint is stored whole, as before).
--
-- A part is keyed by the index of its first item in the list. Parts are
-- only inserted (a batch retried after a lost commit outcome writes the
-- same rows again), and go where their task's row goes (its end, its
-- subagent forgotten, its session ended); a run's first checkpoint (a new
-- task, or one resumed after a restart) replaces them in its commit.

CREATE TABLE checkpoint_parts (
    session_id TEXT NOT NULL,
    subagent_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    items TEXT NOT NULL,
    PRIMARY KEY (session_id, subagent_id, seq)
);

ALTER TABLE tasks ADD COLUMN appended_to TEXT;
