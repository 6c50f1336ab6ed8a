-- cairn schema 6: the step a running task is in now, and since when.
-- The lease heartbeat notes it (one statement per beat, for the tasks whose
-- step changed since the last beat), so a step still costs one commit; each
-- claim clears it. Nothing reads it on the hot path.
ALTER TABLE tasks ADD COLUMN step_now_seq INTEGER;
ALTER TABLE tasks ADD COLUMN step_now TEXT;
ALTER TABLE tasks ADD COLUMN step_now_at TEXT;

-- What a task logged (the logging module) while it ran, kept with it: one row
-- per task, its records as a JSON list, bounded (a cap on their number and
-- size, cairn.engine.tasklogs), with a count of those not kept. Written once
-- at the end of each attempt, never per record.
CREATE TABLE task_logs (
    task_id TEXT NOT NULL PRIMARY KEY,
    lines   TEXT NOT NULL,
    kept    INTEGER NOT NULL,
    dropped INTEGER NOT NULL
) WITHOUT ROWID;
