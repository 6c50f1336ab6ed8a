-- cairn schema 9: the step a running task is in now, and since when (then
-- what a task logged, and the metrics page's hourly sums, below).
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

-- The metrics page's charts over time: tasks finished and failed per hour, and
-- what the model calls finished in it cost, summed once per closed hour by the
-- reader (cairn.admin.charts) and kept, so the page never counts the whole
-- store again; what finished in an hour not yet summed is found through
-- tasks_by_finish and calls_by_finish (only model calls and compactions are
-- in it: a plain step's insert leaves it alone).
CREATE TABLE metric_hours (
    hour     TEXT NOT NULL PRIMARY KEY,
    finished INTEGER NOT NULL,
    failed   INTEGER NOT NULL,
    cost     REAL NOT NULL DEFAULT 0.0
) WITHOUT ROWID;
CREATE INDEX tasks_by_finish ON tasks (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX calls_by_finish ON steps (finished_at) WHERE kind = 'llm' OR kind = 'conv';
