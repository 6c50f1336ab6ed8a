-- cairn schema 3 on PostgreSQL: what produced each history entry, the version
-- each task started on, and the versions the running workers can run. Same
-- meaning as the SQLite migration of the same number.

ALTER TABLE steps ADD COLUMN fingerprint TEXT;
ALTER TABLE steps ADD COLUMN kept TEXT;

ALTER TABLE tasks ADD COLUMN version TEXT;

CREATE TABLE workers (
    owner    TEXT PRIMARY KEY,
    versions TEXT NOT NULL,
    seen_at  TIMESTAMPTZ NOT NULL
);
