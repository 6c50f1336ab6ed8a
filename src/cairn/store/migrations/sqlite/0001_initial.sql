-- cairn schema 1: batches, tasks, their recorded history, and operations.
-- Every timestamp is ISO 8601 text in UTC with an offset, so text order is time order.

CREATE TABLE cairn_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE batches (
    name       TEXT PRIMARY KEY,
    task_name  TEXT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE tasks (
    -- pos orders tasks by when they were enqueued; id is the user-visible key.
    pos              INTEGER PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    batch            TEXT REFERENCES batches (name),
    item_key         TEXT,
    name             TEXT NOT NULL,
    args             TEXT NOT NULL,
    codec            TEXT NOT NULL,
    -- CHECKs are written as OR chains: SQLite builds a temporary table for an
    -- IN list on every insert, which cost ~15 us a step on the hot path.
    status           TEXT NOT NULL CHECK (status = 'pending' OR status = 'running'
        OR status = 'completed' OR status = 'failed' OR status = 'cancelled'
        OR status = 'waiting'),
    -- attempts counts task attempts started and is never reset; retry_base is its
    -- value at the last manual retry, so the budget used is attempts - retry_base.
    attempts         INTEGER NOT NULL DEFAULT 0,
    retry_base       INTEGER NOT NULL DEFAULT 0,
    -- fence grows by one at every claim; every write for the task checks it.
    fence            INTEGER NOT NULL DEFAULT 0,
    owner            TEXT,
    lease_expires_at TEXT,
    result           TEXT,
    error            TEXT,
    created_at       TEXT NOT NULL,
    started_at       TEXT,
    finished_at      TEXT,
    updated_at       TEXT NOT NULL,
    -- Times the task was taken over while running (its owner died, its lease
    -- ran out, or its call was interrupted): the basis of the restart metrics.
    interruptions    INTEGER NOT NULL DEFAULT 0,
    -- A 'waiting' task (suspended by ctx.wait_for, holding no process) is taken
    -- up again when a signal arrives or, if set, once this time has passed.
    wake_at          TEXT,
    -- The task that spawned this one (ctx.spawn), if any.
    parent_id        TEXT
);

-- Claiming the next pending task of a batch, and finding a batch's running tasks,
-- touch only the rows in that state: resume cost does not grow with finished tasks.
CREATE INDEX tasks_by_batch_status ON tasks (batch, status, pos);
CREATE INDEX tasks_by_status ON tasks (status);
-- Waiting tasks whose timeout has come are found without a scan.
CREATE INDEX tasks_waking ON tasks (wake_at) WHERE status = 'waiting';

CREATE TABLE steps (
    task_id      TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    kind         TEXT NOT NULL
        CHECK (kind = 'step' OR kind = 'input' OR kind = 'sleep' OR kind = 'op'
            OR kind = 'llm' OR kind = 'conv' OR kind = 'map' OR kind = 'spawn'
            OR kind = 'join' OR kind = 'wait'),
    name         TEXT NOT NULL,
    status       TEXT NOT NULL
        CHECK (status = 'completed' OR status = 'retrying' OR status = 'failed'
            OR status = 'waiting'),
    output       TEXT,
    -- attempts is the total over the task's life; run_attempts counts those made
    -- during task attempt number task_attempt (the step's retry budget).
    attempts     INTEGER NOT NULL,
    task_attempt INTEGER NOT NULL,
    run_attempts INTEGER NOT NULL,
    error        TEXT,
    retry_at     TEXT,
    started_at   TEXT NOT NULL,
    finished_at  TEXT NOT NULL,
    -- seconds this task attempt waited on RetryAfter here (no attempt spent)
    deferred     REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID;

-- Side effects guarded by a key: claimed (committed) before the function runs,
-- completed with its result after. The rows are also the audit log.
CREATE TABLE operations (
    scope            TEXT NOT NULL,
    key              TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status = 'claimed' OR status = 'completed'
        OR status = 'failed' OR status = 'in_doubt' OR status = 'released'),
    -- calls counts claims. Each claim is committed before the function is
    -- called, so a claim whose process died before calling it counts too: calls
    -- can over-state, never under-state, how often the outside world was asked.
    calls            INTEGER NOT NULL,
    permanent        INTEGER NOT NULL DEFAULT 0,
    task_id          TEXT NOT NULL,
    step_seq         INTEGER NOT NULL,
    claim_fence      INTEGER NOT NULL,
    result           TEXT,
    error            TEXT,
    first_claimed_at TEXT NOT NULL,
    claimed_at       TEXT NOT NULL,
    completed_at     TEXT,
    updated_at       TEXT NOT NULL,
    PRIMARY KEY (scope, key)
) WITHOUT ROWID;

-- Only the index a task's replay needs (its completed operations are its
-- history): every index is written on each claim and record, and the audit
-- listings (by time, status) can afford a scan where an operation cannot.
CREATE INDEX operations_by_task ON operations (task_id);

-- Signals sent to tasks (cairn signal, Cairn.signal): one per (task, name). A
-- task's ctx.wait_for(name) takes it whenever it arrives, before or after the
-- task began waiting.
CREATE TABLE signals (
    task_id TEXT NOT NULL,
    name    TEXT NOT NULL,
    payload TEXT NOT NULL,
    codec   TEXT NOT NULL,
    sent_at TEXT NOT NULL,
    PRIMARY KEY (task_id, name)
) WITHOUT ROWID;

-- An agent's conversations. Each (task, name) gets a small integer key once, when
-- the conversation is first opened, so message rows and their index entries
-- carry that integer instead of repeating the task id and the name.
CREATE TABLE conversations (
    conv_id INTEGER PRIMARY KEY,
    task_id TEXT NOT NULL,
    name    TEXT NOT NULL,
    UNIQUE (task_id, name)
);

-- One row per message, keyed by its position (idx) in the conversation. Rows are
-- only ever appended, never rewritten. A 'summary' row is a running summary of
-- every message up to covers_until; the active context is row 0 (the system
-- prompt), the latest summary and the messages after covers_until. A rowid
-- table, not WITHOUT ROWID: messages are often longer than the ~1 KB an index
-- b-tree keeps in a page, and spilling each one into a mostly empty overflow
-- page would cost more than the (now all-integer) primary-key index does.
CREATE TABLE messages (
    conv_id      INTEGER NOT NULL,
    idx          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    -- The whole message in the OpenAI chat shape, as compact JSON, stored as
    -- b"j" + its UTF-8, or b"z" + it zlib-compressed when that is at least a
    -- fifth smaller (cairn.store.sql.pack_content).
    content      BLOB NOT NULL,
    tokens       INTEGER NOT NULL,
    kind         TEXT NOT NULL CHECK (kind = 'message' OR kind = 'summary'),
    covers_until INTEGER,
    -- JSON about how the row came to be (a model reply's usage, a compaction's
    -- token counts); NULL for a plain append.
    meta         TEXT,
    -- Microseconds since the epoch (UTC): a few bytes, where ISO text takes 32.
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (conv_id, idx)
);

-- Finding a conversation's latest summary is one index probe, whatever its length.
CREATE INDEX messages_summaries ON messages (conv_id, idx) WHERE kind = 'summary';

-- Shared limits (cairn.limits). One row per limit name, locked by every acquire
-- so that two processes can never both take the last free permit.
CREATE TABLE limits (
    name TEXT PRIMARY KEY
);

-- The permits of every limit. A permit counts against its limit until ends_at
-- (plus the window, for a rate): while its call runs, ends_at is the holder's
-- lease, pushed on by its heartbeat, so a killed holder's permit comes back;
-- when the call ends, ends_at is the time it ended and held is 0.
CREATE TABLE permits (
    limit_name TEXT NOT NULL,
    permit     TEXT NOT NULL,
    owner      TEXT NOT NULL,
    task_id    TEXT NOT NULL,
    held       INTEGER NOT NULL,
    granted_at TEXT NOT NULL,
    ends_at    TEXT NOT NULL,
    PRIMARY KEY (limit_name, permit)
) WITHOUT ROWID;

-- The heartbeat finds the permits a process holds without a scan.
CREATE INDEX permits_held_by_owner ON permits (owner) WHERE held = 1;

-- One row per schedule (cairn.schedule). covered_until is the latest firing time
-- already dealt with (created, or passed over by the catch-up policy), or the
-- moment the schedule was first seen; firings after it are still to come. A
-- worker creates firings only by moving covered_until forward with a
-- compare-and-set in the same transaction, so two workers never both act on the
-- same firings. cron, tz and task_name are the spec the row was counted under.
CREATE TABLE schedules (
    name          TEXT PRIMARY KEY,
    task_name     TEXT NOT NULL,
    cron          TEXT NOT NULL,
    tz            TEXT NOT NULL,
    covered_until TEXT NOT NULL,
    last_fired_at TEXT,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
) WITHOUT ROWID;
