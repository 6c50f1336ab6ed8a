-- cairn schema 6 on PostgreSQL: the step a running task is in now, and since
-- when. Same meaning as the SQLite migration of the same number.
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
