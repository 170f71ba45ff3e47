-- What each subagent's own tasks cost, in nanodollars, at their routes'
-- prices (its subtree's is summed on load). NULL: nothing priced was spent,
-- which is no cost at all rather than a cost of zero.
ALTER TABLE subagents ADD COLUMN usage_cost BIGINT;
