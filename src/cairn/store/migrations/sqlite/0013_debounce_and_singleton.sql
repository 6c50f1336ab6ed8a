-- cairn schema 13: debounced and singleton tasks (docs/debounce.md).

-- A debounced task waits (status 'waiting', wake_at its due time) until no new
-- event with its debounce key arrived for its window; each event replaces its
-- arguments and pushes wake_at. debounce_events counts the events it absorbed.
ALTER TABLE tasks ADD COLUMN debounce_key TEXT;
ALTER TABLE tasks ADD COLUMN debounce_ms INTEGER;
ALTER TABLE tasks ADD COLUMN debounce_events INTEGER NOT NULL DEFAULT 0;
-- A singleton task holds its key while pending, running or waiting; a task
-- queued behind the holder waits (status 'waiting', no wake_at) with the key in
-- singleton_queued, and is made the holder when the holder ends.
ALTER TABLE tasks ADD COLUMN singleton_key TEXT;
ALTER TABLE tasks ADD COLUMN singleton_queued TEXT;

-- At most one open (not yet started) debounced task per key: the upsert of an
-- event lands on it, whichever process sends the event.
CREATE UNIQUE INDEX tasks_debounce_open ON tasks (debounce_key)
    WHERE debounce_key IS NOT NULL AND started_at IS NULL
    AND (status = 'pending' OR status = 'waiting');
-- At most one holder per singleton key: a second insert of one is refused by
-- the store, not by a look before it.
CREATE UNIQUE INDEX tasks_singleton_held ON tasks (singleton_key)
    WHERE singleton_key IS NOT NULL
    AND (status = 'pending' OR status = 'running' OR status = 'waiting');
CREATE INDEX tasks_singleton_queue ON tasks (singleton_queued, pos)
    WHERE singleton_queued IS NOT NULL AND status = 'waiting';

-- When a holder ends (or is deleted), the oldest task queued behind it becomes
-- the holder, pending, in the same transaction: no process has to notice.
CREATE TRIGGER tasks_singleton_next AFTER UPDATE OF status ON tasks
WHEN OLD.singleton_key IS NOT NULL
    AND (OLD.status = 'pending' OR OLD.status = 'running' OR OLD.status = 'waiting')
    AND NOT (NEW.status = 'pending' OR NEW.status = 'running' OR NEW.status = 'waiting')
BEGIN
    UPDATE tasks SET status = 'pending', singleton_key = singleton_queued,
        singleton_queued = NULL, wake_at = NULL, updated_at = NEW.updated_at
    WHERE pos = (SELECT pos FROM tasks WHERE singleton_queued = OLD.singleton_key
                 AND status = 'waiting' ORDER BY pos LIMIT 1);
END;
CREATE TRIGGER tasks_singleton_next_on_delete AFTER DELETE ON tasks
WHEN OLD.singleton_key IS NOT NULL
    AND (OLD.status = 'pending' OR OLD.status = 'running' OR OLD.status = 'waiting')
BEGIN
    UPDATE tasks SET status = 'pending', singleton_key = singleton_queued,
        singleton_queued = NULL, wake_at = NULL
    WHERE pos = (SELECT pos FROM tasks WHERE singleton_queued = OLD.singleton_key
                 AND status = 'waiting' ORDER BY pos LIMIT 1);
END;
