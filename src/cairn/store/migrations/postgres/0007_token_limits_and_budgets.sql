-- cairn schema 7: token-aware shared limits and budgets; see the SQLite
-- schema for the meaning of each column.
ALTER TABLE permits ADD COLUMN amount BIGINT NOT NULL DEFAULT 0;

ALTER TABLE limits ADD COLUMN closed_until TIMESTAMPTZ;

CREATE TABLE budgets (
    scope      TEXT PRIMARY KEY,
    usd_nanos  BIGINT,
    tokens     BIGINT,
    warn_at    DOUBLE PRECISION NOT NULL,
    raised     INTEGER NOT NULL DEFAULT 0,
    spent_usd_nanos BIGINT NOT NULL DEFAULT 0,
    spent_tokens    BIGINT NOT NULL DEFAULT 0,
    warned_at  TIMESTAMPTZ,
    reached_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE budget_parks (
    task_id   TEXT PRIMARY KEY,
    scope     TEXT NOT NULL,
    parked_at TIMESTAMPTZ NOT NULL,
    needed    TEXT NOT NULL
);
CREATE INDEX budget_parks_by_scope ON budget_parks (scope);
