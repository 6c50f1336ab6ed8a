-- cairn schema 12: fair claims between batches (docs/workers.md, "Fairness").
-- A worker serving every batch takes, at the highest pending priority, the
-- first batch after the one it claimed from last (by name), so a small batch is
-- not queued behind a big one enqueued before it. This index finds that task in
-- one probe: seek to (priority, batch > last), take the first entry.
CREATE INDEX tasks_pending_fair ON tasks (priority DESC, batch, pos) WHERE status = 'pending';
