-- cairn schema 3: what produced each history entry, the version each task started
-- on, and the versions the running workers can run (docs/versions.md).

-- A short text naming what produced the entry: "code:<hash>" for a step (a hash
-- of its function's source), "model:<m> system:<hash> tools:<hash>" for a model
-- call. NULL for entries without code of their own (inputs, sleeps, ...) and for
-- every entry recorded before this migration: those are never compared.
ALTER TABLE steps ADD COLUMN fingerprint TEXT;
-- Set when the entry's code had changed and the `keep` policy replayed the old
-- result anyway: the fingerprint of the code that kept it (`cairn show` says so).
ALTER TABLE steps ADD COLUMN kept TEXT;

-- The app version the task started on (until it starts: the enqueuer's); NULL
-- (before this migration, or an app without one): any worker may run it.
ALTER TABLE tasks ADD COLUMN version TEXT;

-- One row per worker process, written when it starts and at each heartbeat:
-- the versions it claims ("*" for any), so `cairn versions` can tell which
-- tasks no running worker will take.
CREATE TABLE workers (
    owner    TEXT PRIMARY KEY,
    versions TEXT NOT NULL,
    seen_at  TEXT NOT NULL
) WITHOUT ROWID;
