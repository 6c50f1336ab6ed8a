-- cairn schema 6 on PostgreSQL: a checksum per history entry, checked when a
-- task's history is loaded for a replay. Same meaning as the SQLite migration
-- of the same number. A CRC-32 is unsigned 32-bit: bigint holds it.
ALTER TABLE steps ADD COLUMN checksum BIGINT;
