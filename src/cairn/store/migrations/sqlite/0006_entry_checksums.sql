-- cairn schema 6: a checksum per history entry, checked when a task's history
-- is loaded for a replay, so a recorded value changed on disk (an edit in
-- place, bytes written over the file) is reported as corruption, with the
-- task and the position, and never replayed. CRC-32 of the entry's kind, name
-- and output (cairn.store.sql.entry_checksum). NULL for entries written before
-- this schema, or brought in by an import or a move, which are not checked.
ALTER TABLE steps ADD COLUMN checksum INTEGER;
