-- cairn schema 10: a checksum on the other recorded values a replay hands back,
-- as schema 6 put one on each history entry: an operation's result (a
-- completed ctx.once is part of its task's history through its row) and each
-- message of a conversation (the context an agent is resumed with). CRC-32,
-- written with the value (cairn.store.sql.op_checksum, message_checksum) and
-- checked when it is read back for a replay, so a value changed on disk is
-- reported as corruption, with the task and the position, and never replayed.
-- NULL for values written before this schema, which are not checked.
ALTER TABLE operations ADD COLUMN checksum BIGINT;
ALTER TABLE messages ADD COLUMN checksum BIGINT;
