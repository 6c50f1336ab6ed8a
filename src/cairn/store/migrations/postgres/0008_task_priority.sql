-- cairn schema 8: a task's priority. Claims take the highest priority first and,
-- within one priority, the order tasks were enqueued in, as before (docs/workers.md).

-- Set at enqueue (0 unless given), changeable while the task waits to run.
ALTER TABLE tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;

-- The next task to claim stays one probe of an index of pending rows only: the
-- indexes of schema 2 are rebuilt in the new order, highest priority first.
DROP INDEX tasks_pending;
DROP INDEX tasks_pending_by_batch;
CREATE INDEX tasks_pending ON tasks (priority DESC, pos) WHERE status = 'pending';
CREATE INDEX tasks_pending_by_batch ON tasks (batch, priority DESC, pos) WHERE status = 'pending';
