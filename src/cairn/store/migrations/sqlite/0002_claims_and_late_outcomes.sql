-- cairn schema 2: claims that stay flat however many tasks have finished, orphans
-- found without a scan, and late outcomes in the operations' audit trail.

-- Only pending rows: the next task to claim, in enqueue order, of one batch or of
-- any batch, is found among the claimable rows, never by walking finished ones.
CREATE INDEX tasks_pending ON tasks (pos) WHERE status = 'pending';
CREATE INDEX tasks_pending_by_batch ON tasks (batch, pos) WHERE status = 'pending';

-- Only running rows: a task whose lease has expired, or whose owner process is
-- gone, is found (and claimed before any pending task) without a scan.
CREATE INDEX tasks_running_by_lease ON tasks (lease_expires_at) WHERE status = 'running';
CREATE INDEX tasks_by_owner ON tasks (owner) WHERE status = 'running';

-- The outcome a claimant learned after it had lost its task (it was paused past
-- its lease, and another owner took over): kept for the audit (`cairn ops`
-- shows it), never used as the key's result and never written into a task
-- history the late claimant no longer owns.
ALTER TABLE operations ADD COLUMN late_result TEXT;
ALTER TABLE operations ADD COLUMN late_at TEXT;
