-- cairn schema 6: the step a running task is in now, and since when.
-- The lease heartbeat notes it (one statement per beat, for the tasks whose
-- step changed since the last beat), so a step still costs one commit; each
-- claim clears it. Nothing reads it on the hot path.
ALTER TABLE tasks ADD COLUMN step_now_seq INTEGER;
ALTER TABLE tasks ADD COLUMN step_now TEXT;
ALTER TABLE tasks ADD COLUMN step_now_at TEXT;
