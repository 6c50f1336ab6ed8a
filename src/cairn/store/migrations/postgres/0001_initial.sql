-- cairn schema 1 on PostgreSQL: batches, tasks, their recorded history, and
-- operations. Same tables and meaning as the SQLite schema; times are timestamptz.
-- cairn keeps its tables in a schema of their own (default "cairn"), so they
-- never collide with an application's own "tasks" table.

CREATE TABLE cairn_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE batches (
    name       TEXT PRIMARY KEY,
    task_name  TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE tasks (
    pos              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    batch            TEXT REFERENCES batches (name),
    item_key         TEXT,
    name             TEXT NOT NULL,
    args             TEXT NOT NULL,
    codec            TEXT NOT NULL,
    status           TEXT NOT NULL
        CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled', 'waiting')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    retry_base       INTEGER NOT NULL DEFAULT 0,
    fence            BIGINT NOT NULL DEFAULT 0,
    owner            TEXT,
    lease_expires_at TIMESTAMPTZ,
    result           TEXT,
    error            TEXT,
    created_at       TIMESTAMPTZ NOT NULL,
    started_at       TIMESTAMPTZ,
    finished_at      TIMESTAMPTZ,
    updated_at       TIMESTAMPTZ NOT NULL,
    interruptions    INTEGER NOT NULL DEFAULT 0,
    -- A 'waiting' task (suspended by ctx.wait_for, holding no process) is taken
    -- up again when a signal arrives or, if set, once this time has passed.
    wake_at          TIMESTAMPTZ,
    -- The task that spawned this one (ctx.spawn), if any.
    parent_id        TEXT
);

CREATE INDEX tasks_by_batch_status ON tasks (batch, status, pos);
CREATE INDEX tasks_by_status ON tasks (status);
CREATE INDEX tasks_by_owner ON tasks (owner) WHERE status = 'running';
-- Waiting tasks whose timeout has come are found without a scan.
CREATE INDEX tasks_waking ON tasks (wake_at) WHERE status = 'waiting';

CREATE TABLE steps (
    task_id      TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    kind         TEXT NOT NULL
        CHECK (kind IN ('step', 'input', 'sleep', 'op', 'llm', 'conv', 'map', 'spawn', 'join',
            'wait')),
    name         TEXT NOT NULL,
    status       TEXT NOT NULL
        CHECK (status IN ('completed', 'retrying', 'failed', 'waiting')),
    output       TEXT,
    attempts     INTEGER NOT NULL,
    task_attempt INTEGER NOT NULL,
    run_attempts INTEGER NOT NULL,
    error        TEXT,
    retry_at     TIMESTAMPTZ,
    started_at   TIMESTAMPTZ NOT NULL,
    finished_at  TIMESTAMPTZ NOT NULL,
    deferred     DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, seq)
);

CREATE TABLE operations (
    scope            TEXT NOT NULL,
    key              TEXT NOT NULL,
    status           TEXT NOT NULL
        CHECK (status IN ('claimed', 'completed', 'failed', 'in_doubt', 'released')),
    calls            INTEGER NOT NULL,
    permanent        INTEGER NOT NULL DEFAULT 0,
    task_id          TEXT NOT NULL,
    step_seq         INTEGER NOT NULL,
    claim_fence      BIGINT NOT NULL,
    result           TEXT,
    error            TEXT,
    first_claimed_at TIMESTAMPTZ NOT NULL,
    claimed_at       TIMESTAMPTZ NOT NULL,
    completed_at     TIMESTAMPTZ,
    updated_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (scope, key)
);

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
    sent_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (task_id, name)
);

-- An agent's conversations: a small integer key per (task, name), then one row
-- per message, appended, never rewritten (see the SQLite schema for the meaning
-- of each column).
CREATE TABLE conversations (
    conv_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id TEXT NOT NULL,
    name    TEXT NOT NULL,
    UNIQUE (task_id, name)
);

CREATE TABLE messages (
    conv_id      BIGINT NOT NULL,
    idx          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    content      BYTEA NOT NULL,
    tokens       INTEGER NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('message', 'summary')),
    covers_until INTEGER,
    meta         TEXT,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (conv_id, idx)
);

CREATE INDEX messages_summaries ON messages (conv_id, idx) WHERE kind = 'summary';

-- Shared limits (cairn.limits); see the SQLite schema for the meaning.
CREATE TABLE limits (
    name TEXT PRIMARY KEY
);

CREATE TABLE permits (
    limit_name TEXT NOT NULL,
    permit     TEXT NOT NULL,
    owner      TEXT NOT NULL,
    task_id    TEXT NOT NULL,
    held       INTEGER NOT NULL,
    granted_at TIMESTAMPTZ NOT NULL,
    ends_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (limit_name, permit)
);

CREATE INDEX permits_held_by_owner ON permits (owner) WHERE held = 1;

-- One row per schedule (cairn.schedule); see the SQLite schema for the meaning
-- of each column.
CREATE TABLE schedules (
    name          TEXT PRIMARY KEY,
    task_name     TEXT NOT NULL,
    cron          TEXT NOT NULL,
    tz            TEXT NOT NULL,
    covered_until TIMESTAMPTZ NOT NULL,
    last_fired_at TIMESTAMPTZ,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL
);
