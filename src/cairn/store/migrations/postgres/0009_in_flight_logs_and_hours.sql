-- cairn schema 9 on PostgreSQL: the step in flight, what a task logged, the
-- metrics page's hourly sums. Same meaning as the SQLite migration of the same number.
ALTER TABLE tasks ADD COLUMN step_now_seq integer;
ALTER TABLE tasks ADD COLUMN step_now text;
ALTER TABLE tasks ADD COLUMN step_now_at timestamptz;

-- What a task logged while it ran, kept with it (see the SQLite migration).
CREATE TABLE task_logs (
    task_id text NOT NULL PRIMARY KEY,
    lines   text NOT NULL,
    kept    integer NOT NULL,
    dropped integer NOT NULL
);

-- The metrics page's charts over time (see the SQLite migration).
CREATE TABLE metric_hours (
    hour     timestamptz NOT NULL PRIMARY KEY,
    finished integer NOT NULL,
    failed   integer NOT NULL,
    cost     double precision NOT NULL DEFAULT 0.0
);
CREATE INDEX tasks_by_finish ON tasks (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX calls_by_finish ON steps (finished_at) WHERE kind = 'llm' OR kind = 'conv';
