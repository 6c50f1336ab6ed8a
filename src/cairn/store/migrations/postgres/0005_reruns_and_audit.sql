-- cairn schema 5 on PostgreSQL: rerun a task from a step, and the audit trail
-- of operator actions. Same meaning as the SQLite migration of the same number.
-- Nothing here touches the steps table.

-- Which run of the task this is: 1 until `cairn rerun` makes a new one.
ALTER TABLE tasks ADD COLUMN run INTEGER NOT NULL DEFAULT 1;

-- One row per run a rerun superseded: how that run ended and where the next
-- run forked from it (every entry before fork_seq is shared by both runs).
CREATE TABLE task_runs (
    task_id     TEXT NOT NULL,
    run         INTEGER NOT NULL,
    fork_seq    INTEGER NOT NULL,
    status      TEXT NOT NULL,
    result      TEXT,
    error       TEXT,
    attempts    INTEGER NOT NULL,
    started_at  TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    forked_at   TIMESTAMPTZ NOT NULL,
    forked_by   TEXT NOT NULL,
    PRIMARY KEY (task_id, run)
);

-- The history entries a rerun took out of the task's history, under the run
-- that recorded them; `entry` is the whole entry as JSON (cairn.store.entries).
CREATE TABLE superseded_entries (
    task_id TEXT NOT NULL,
    run     INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    name    TEXT NOT NULL,
    entry   TEXT NOT NULL,
    PRIMARY KEY (task_id, run, seq)
);
CREATE INDEX superseded_by_seq ON superseded_entries (task_id, seq);

-- Every operator action: who, what, on what, when, how many tasks it changed.
-- Written before the action (count NULL) and completed after it.
CREATE TABLE audit (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      TIMESTAMPTZ NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    target  TEXT NOT NULL,
    detail  TEXT,
    count   INTEGER,
    outcome TEXT
);
