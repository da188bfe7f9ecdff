-- agent-memory schema, version 1. See docs/MEMORY.md ("Schema").
--
-- Every statement is idempotent (IF NOT EXISTS) so two processes creating the same new
-- database at once cannot fail on "already exists"; the loser of the race retries and sees
-- the migration applied.

-- Facts about the store itself: the embedding model and dimension every stored vector was
-- made with, and the change-log floor (see `changes`).
CREATE TABLE IF NOT EXISTS store_meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- One row per memory. Times are Unix microseconds (UTC). AUTOINCREMENT: ids are never
-- reused, so a deleted id can never come back as a different memory.
CREATE TABLE IF NOT EXISTS entries (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    content      TEXT    NOT NULL,
    context      TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    accessed_at  INTEGER NOT NULL,
    access_count INTEGER NOT NULL DEFAULT 0 CHECK (access_count >= 0)
);
-- Only creation time is indexed: recall updates access time and count of up to k rows per
-- search, and every index on them would multiply those writes. Prune, which orders by
-- them, is rare and scans.
CREATE INDEX IF NOT EXISTS entries_by_created ON entries (created_at, id);

-- Tags: a set per entry.
CREATE TABLE IF NOT EXISTS entry_tags (
    entry_id INTEGER NOT NULL REFERENCES entries (id) ON DELETE CASCADE,
    tag      TEXT    NOT NULL,
    PRIMARY KEY (entry_id, tag)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entry_tags_by_tag ON entry_tags (tag, entry_id);

-- Embeddings, kept apart from `entries` so scans of entries never read vectors. `vector`
-- holds the embedder's output as little-endian f32, exactly `embedding_dimensions` of them.
CREATE TABLE IF NOT EXISTS embeddings (
    entry_id INTEGER PRIMARY KEY NOT NULL REFERENCES entries (id) ON DELETE CASCADE,
    vector   BLOB    NOT NULL
);

-- Keyword index over content and context (external content: the text lives in `entries`).
CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5 (
    content,
    context,
    content = 'entries',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS entries_fts_insert AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts (rowid, content, context) VALUES (new.id, new.content, new.context);
END;
CREATE TRIGGER IF NOT EXISTS entries_fts_delete AFTER DELETE ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, content, context)
        VALUES ('delete', old.id, old.content, old.context);
END;
CREATE TRIGGER IF NOT EXISTS entries_fts_update AFTER UPDATE OF content, context ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, content, context)
        VALUES ('delete', old.id, old.content, old.context);
    INSERT INTO entries_fts (rowid, content, context) VALUES (new.id, new.content, new.context);
END;

-- Change log of the vector set, written by triggers. Every open handle keeps the vectors in
-- memory for search and replays this log (rows after the last `seq` it applied) before each
-- search, so writes by other handles and other processes are seen. op: 1 = vector upserted,
-- 0 = entry deleted. Prune trims old rows and raises `store_meta.changes_floor`; a handle
-- whose position is below the floor reloads every vector instead.
CREATE TABLE IF NOT EXISTS changes (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    entry_id INTEGER NOT NULL,
    op       INTEGER NOT NULL CHECK (op IN (0, 1))
);
CREATE TRIGGER IF NOT EXISTS embeddings_log_insert AFTER INSERT ON embeddings BEGIN
    INSERT INTO changes (entry_id, op) VALUES (new.entry_id, 1);
END;
CREATE TRIGGER IF NOT EXISTS embeddings_log_update AFTER UPDATE OF vector ON embeddings BEGIN
    INSERT INTO changes (entry_id, op) VALUES (new.entry_id, 1);
END;
CREATE TRIGGER IF NOT EXISTS entries_log_delete AFTER DELETE ON entries BEGIN
    INSERT INTO changes (entry_id, op) VALUES (old.id, 0);
END;
