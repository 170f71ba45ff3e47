-- PostgreSQL only: half of each new page of `subagents` is left free, where
-- migration 9 left 30 %. A subagent's row is written at its spawn and
-- updated at its task's start or end, most often in a later commit: the
-- new version stays on its page (a HOT update: no index entry, the old
-- version pruned on the page) only when the page has room for it. With
-- autovacuum off (as on this project's test server), nothing else makes
-- room. Measured in the wire bench: HOT updates 41 % → 76 %, PostgreSQL's
-- CPU per cycle down (see BENCHMARKS.md), the table larger by the room
-- left. Pages already written keep their fill; no table is rewritten.
ALTER TABLE subagents SET (fillfactor = 50);
