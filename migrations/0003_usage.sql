-- Token usage of each subagent's own tasks (its subtree's is summed on load).
ALTER TABLE subagents ADD COLUMN usage_input BIGINT NOT NULL DEFAULT 0;
ALTER TABLE subagents ADD COLUMN usage_output BIGINT NOT NULL DEFAULT 0;
