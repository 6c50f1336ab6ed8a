-- cairn schema 7: token-aware shared limits (cairn.limits.TokenRate) and
-- budgets (cairn.budgets). Both count with the permits that shared limits
-- already hold, so a reservation is taken, renewed by the heartbeat, given
-- back and settled exactly as a permit is.

-- What a permit holds of a limit that counts an amount: the tokens of a
-- TokenRate (the prompt plus max_tokens while its call runs, the tokens the
-- provider reported once it ended), or a budget's tokens or nano-dollars.
-- 0 for a Rate or Concurrency permit, which counts as one call.
ALTER TABLE permits ADD COLUMN amount INTEGER NOT NULL DEFAULT 0;

-- Until when the limit lends nothing: a provider's HTTP 429 with Retry-After
-- closes it for every caller on the store, not only the one that was told.
ALTER TABLE limits ADD COLUMN closed_until TEXT;

-- One row per budget: scope 'batch:<name>' or 'task:<id>'. Its caps (NULL: no
-- cap on that measure; usd in nano-dollars), the share at which it warns, when
-- its two alerts fired (each once per raise), and how many times it was raised
-- (a task parks only if the budget was not raised since it was refused).
-- spent_* is what settled calls used; a running call's reservation is a
-- held permit of limit 'budget-usd:<scope>' / 'budget-tokens:<scope>', folded
-- into spent_* (and deleted) when its call ends.
CREATE TABLE budgets (
    scope      TEXT PRIMARY KEY,
    usd_nanos  INTEGER,
    tokens     INTEGER,
    warn_at    REAL NOT NULL,
    raised     INTEGER NOT NULL DEFAULT 0,
    spent_usd_nanos INTEGER NOT NULL DEFAULT 0,
    spent_tokens    INTEGER NOT NULL DEFAULT 0,
    warned_at  TEXT,
    reached_at TEXT,
    updated_at TEXT NOT NULL
) WITHOUT ROWID;

-- Tasks parked on a budget: waiting (no process, no lease) until the budget
-- is raised, which wakes them; the row says which budget, since when, and what
-- the refused call needed.
CREATE TABLE budget_parks (
    task_id   TEXT PRIMARY KEY,
    scope     TEXT NOT NULL,
    parked_at TEXT NOT NULL,
    needed    TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX budget_parks_by_scope ON budget_parks (scope);
