"""Format 1's tables, frozen (see ``format1.saver``).

The original module's docstring follows.

The checkpointer's own tables, beside cairn's in the same file or schema.

They are not part of cairn's migration chain: the checkpointer creates them
itself (``CREATE TABLE IF NOT EXISTS``, as LangGraph's own savers do in
``setup()``) and keeps its own schema version in ``cairn_lg_meta``, so a store
that never holds a LangGraph thread carries none of them, and cairn's schema
and its upgrades are untouched.

Three tables hold a thread:

* ``cairn_lg_checkpoints``: one row per checkpoint (its versions, not its
  values) and its metadata;
* ``cairn_lg_blobs``: one row per (channel, version). A list channel (a
  graph's messages) is stored as an *append*: the items added since an earlier
  version of the same channel, with that version named in ``base``; so a
  thread of n turns holds each message once, not n times;
* ``cairn_lg_writes``: the pending writes of each checkpoint's tasks.

Statements use ``?`` placeholders (the PostgreSQL store rewrites them); every
value is a parameter.
"""

from __future__ import annotations

FORMAT = 1  # the version of these tables; a newer one in cairn_lg_meta is refused

_SQLITE_DDL = (
    "CREATE TABLE IF NOT EXISTS cairn_lg_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS cairn_lg_checkpoints ("
    " thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL,"
    " parent_id TEXT, type TEXT NOT NULL, checkpoint BLOB NOT NULL,"
    " metadata_type TEXT NOT NULL, metadata BLOB NOT NULL,"
    " PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS cairn_lg_blobs ("
    " thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, channel TEXT NOT NULL,"
    " version TEXT NOT NULL, kind TEXT NOT NULL, base TEXT, type TEXT, data BLOB,"
    " PRIMARY KEY (thread_id, checkpoint_ns, channel, version)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS cairn_lg_writes ("
    " thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, checkpoint_id TEXT NOT NULL,"
    " task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL,"
    " type TEXT NOT NULL, data BLOB NOT NULL, task_path TEXT NOT NULL,"
    " PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)) WITHOUT ROWID",
)

DDL = {
    # WITHOUT ROWID: the rows live in their primary key's b-tree, so the key
    # columns (a thread id, a 36-character checkpoint id) are stored once, not
    # again in a separate index.
    "sqlite": _SQLITE_DDL,
    "postgres": tuple(
        statement.replace(" BLOB", " BYTEA").replace(" WITHOUT ROWID", "")
        for statement in _SQLITE_DDL
    ),
}
# One creator at a time across processes: concurrent CREATE TABLE IF NOT
# EXISTS can still collide on PostgreSQL's catalog. ("cairnlg" as an integer.)
PG_CREATE_LOCK = ("SELECT pg_advisory_xact_lock(?)", (0x636169726E6C67,))

GET_FORMAT = "SELECT value FROM cairn_lg_meta WHERE key = 'format'"
SET_FORMAT = (
    "INSERT INTO cairn_lg_meta (key, value) VALUES ('format', ?) ON CONFLICT (key) DO NOTHING"
)

_CHECKPOINT_COLUMNS = "checkpoint_id, parent_id, type, checkpoint, metadata_type, metadata"
UPSERT_CHECKPOINT = (
    "INSERT INTO cairn_lg_checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id,"
    " type, checkpoint, metadata_type, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET"
    " parent_id = excluded.parent_id, type = excluded.type,"
    " checkpoint = excluded.checkpoint, metadata_type = excluded.metadata_type,"
    " metadata = excluded.metadata"
)
LATEST_CHECKPOINT = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM cairn_lg_checkpoints"
    " WHERE thread_id = ? AND checkpoint_ns = ? ORDER BY checkpoint_id DESC LIMIT 1"
)
ONE_CHECKPOINT = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM cairn_lg_checkpoints"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
# list(): every filter is a fixed fragment, chosen by which arguments were given.
LIST_CHECKPOINTS = (
    f"SELECT thread_id, checkpoint_ns, {_CHECKPOINT_COLUMNS} FROM cairn_lg_checkpoints"
)
BY_THREAD = "thread_id = ?"
BY_NAMESPACE = "checkpoint_ns = ?"
BY_CHECKPOINT = "checkpoint_id = ?"
BEFORE = "checkpoint_id < ?"
NEWEST_FIRST = " ORDER BY checkpoint_id DESC"
LIMIT = " LIMIT ?"

INSERT_BLOB = (
    "INSERT INTO cairn_lg_blobs (thread_id, checkpoint_ns, channel, version, kind, base,"
    " type, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING"
)
ONE_BLOB = (
    "SELECT version, kind, base, type, data FROM cairn_lg_blobs"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ? AND version = ?"
)
CHANNEL_BLOBS = (
    "SELECT version, kind, base, type, data FROM cairn_lg_blobs"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND channel = ?"
)

_WRITE_VALUES = (
    "INSERT INTO cairn_lg_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,"
    " channel, type, data, task_path) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)"
)
# A task's ordinary writes are written once (a retried put_writes keeps the
# first); its special ones (error, interrupt, resume) replace what was there.
INSERT_WRITE = _WRITE_VALUES + " DO NOTHING"
UPSERT_WRITE = (
    _WRITE_VALUES + " DO UPDATE SET channel = excluded.channel, type = excluded.type,"
    " data = excluded.data, task_path = excluded.task_path"
)
PENDING_WRITES = (
    "SELECT task_id, channel, type, data FROM cairn_lg_writes"
    " WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
    " ORDER BY task_path, task_id, idx"
)
