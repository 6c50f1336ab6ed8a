-- cairn schema 11 on PostgreSQL: trigram indexes for the task search, when the
-- pg_trgm extension can be had. A search (cairn.admin's TaskQuery.search)
-- matches any part of a task's id, name or error text with ILIKE '%term%',
-- which no B-tree index serves: without these indexes a rare or absent term
-- reads every task. A GIN index of each column's trigrams (pg_trgm's
-- gin_trgm_ops) answers ILIKE '%term%' for a term of 3 characters or more,
-- and the planner ORs the three (a BitmapOr); the statements stay the same.
-- fastupdate is off: with it (PostgreSQL's default) new entries wait in a
-- pending list that every search reads through, and in bench/search_index.py
-- a search after filling 100,000 tasks stayed as slow as the scan; without it
-- each insert puts its trigrams in the index at once, and an enqueue of
-- 20,000 tasks measured within a few per cent of one without the indexes.
--
-- Optional: creating pg_trgm needs the CREATE privilege on the database
-- (pg_trgm is a trusted extension since PostgreSQL 13) and the contrib package
-- on the server. If either is missing the store is migrated all the same,
-- without the indexes, and a search scans the tasks as before (correct, slower
-- at scale); docs/workers.md gives the statements to run later by hand. Each
-- DO block's EXCEPTION clause is a savepoint, so a refusal undoes only itself.
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'cairn: no pg_trgm (%), so task searches scan the tasks', SQLERRM;
END
$$;

-- The extension may live in another schema (installed there first, by a DBA
-- or another cairn schema of the database): its operator class is named there.
DO $$
DECLARE
    trgm_schema text;
BEGIN
    SELECT n.nspname INTO trgm_schema
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'pg_trgm';
    IF trgm_schema IS NULL THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE INDEX tasks_id_trigrams ON tasks USING gin (id %I.gin_trgm_ops) WITH (fastupdate = off)', trgm_schema);
    EXECUTE format('CREATE INDEX tasks_name_trigrams ON tasks USING gin (name %I.gin_trgm_ops) WITH (fastupdate = off)', trgm_schema);
    EXECUTE format('CREATE INDEX tasks_error_trigrams ON tasks USING gin (error %I.gin_trgm_ops) WITH (fastupdate = off)', trgm_schema);
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'cairn: no trigram indexes (%), so task searches scan the tasks', SQLERRM;
END
$$;
