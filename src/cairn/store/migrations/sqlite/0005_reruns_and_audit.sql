-- cairn schema 5: rerun a task from a step (its runs, and the entries a rerun
-- superseded, kept readable), and the audit trail of operator actions.
-- Nothing here touches the steps table: replay still reads one task's steps
-- and completed operations, and a claim is still one update of one task row.

-- Which run of the task this is: 1 until `cairn rerun` makes a new one.
ALTER TABLE tasks ADD COLUMN run INTEGER NOT NULL DEFAULT 1;

-- One row per run a rerun superseded: how that run ended (its status, result
-- and error, as the task row held them) and where the next run forked from it
-- (fork_seq: every entry before it is shared by both runs; from it on, that
-- run's entries are in superseded_entries), when and by whom.
CREATE TABLE task_runs (
    task_id     TEXT NOT NULL,
    run         INTEGER NOT NULL,
    fork_seq    INTEGER NOT NULL,
    status      TEXT NOT NULL,
    result      TEXT,
    error       TEXT,
    attempts    INTEGER NOT NULL,
    started_at  TEXT,
    finished_at TEXT,
    forked_at   TEXT NOT NULL,
    forked_by   TEXT NOT NULL,
    PRIMARY KEY (task_id, run)
) WITHOUT ROWID;

-- The history entries a rerun took out of the task's history (position fork_seq
-- and after), under the run that recorded them. `entry` is the whole entry as
-- JSON (cairn.store.entries), so this table does not follow the steps table's
-- column list; kind and name are columns of their own for the diff and for the
-- replay's read of completed operations, which leaves out those superseded.
CREATE TABLE superseded_entries (
    task_id TEXT NOT NULL,
    run     INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    name    TEXT NOT NULL,
    entry   TEXT NOT NULL,
    PRIMARY KEY (task_id, run, seq)
) WITHOUT ROWID;
CREATE INDEX superseded_by_seq ON superseded_entries (task_id, seq);

-- Every operator action (retry, cancel, rerun, signal, resolve; from the CLI,
-- the dashboard or the admin API): who, what, on what, when, and how many tasks
-- it changed. Written before the action (count NULL) and completed after it, so
-- an action whose process died in between still shows, with no count.
CREATE TABLE audit (
    id      INTEGER PRIMARY KEY,
    at      TEXT NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    target  TEXT NOT NULL,
    detail  TEXT,
    count   INTEGER,
    outcome TEXT
);
