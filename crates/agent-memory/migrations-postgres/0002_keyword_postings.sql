-- agent-memory schema for PostgreSQL, version 2: postings for keyword search. See
-- docs/MEMORY.md ("The PostgreSQL backend", keyword search).
--
-- A keyword search needs, for each word of the query, how many entries hold it (to pick the
-- words and weigh them), then each holding entry's `ts_rank` for that word. Counting through
-- the GIN index and ranking with `ts_rank` at query time reads every matching row: tens of
-- milliseconds at 100,000 entries. These tables keep both answers ready, written by
-- statement-level triggers on `entries` in the writing transaction, so they are exactly as
-- committed as the entries themselves. Entries' texts never change after insert, so
-- inserts and deletes are all the triggers see.
--
-- Counts are striped: a writer adds to the rows of its own stripe (its server process id
-- modulo 16) and a reader sums a lexeme's stripes. A single counter per lexeme would be a
-- row every writer locks until it commits — every entry holds common words — so concurrent
-- writers would queue on it; with stripes two writers meet only when their stripes do.
-- Lock order, to keep concurrent writers from deadlocking: `keyword_docs` rows by lexeme,
-- then the writer's `keyword_totals` row. (PostgreSQL still detects a deadlock between
-- transactions of several writing statements, and the backend retries those.)

-- Writers wait while the postings of the entries already stored are written (below), so
-- none is missed between that and the triggers.
LOCK TABLE entries IN SHARE ROW EXCLUSIVE MODE;

-- The tsquery of one lexeme, exactly as `phraseto_tsquery('simple', w)` builds it for a word
-- `w` whose only lexeme it is: a quoted operand, quotes and backslashes doubled.
CREATE FUNCTION memory_lexeme_query(lexeme text) RETURNS tsquery
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT ('''' || replace(replace(lexeme, chr(92), chr(92) || chr(92)), '''', '''''')
        || '''')::tsquery
$$;

-- The lexeme a query word stands for when it is a single one (one token, one position, as
-- `phraseto_tsquery('simple', word)` would read it); NULL otherwise (a phrase of several
-- tokens, or none), which searches the slow way, through `entries.search`.
CREATE FUNCTION memory_single_lexeme(word text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN count(*) = 1 AND sum(cardinality(w.positions)) = 1 THEN min(w.lexeme) END
    FROM unnest(to_tsvector('simple', word)) AS w
$$;

-- An entry's `ts_rank` for one of its lexemes alone: weights D 0.1, C 0.2, B (context) 0.5,
-- A (content) 1, normalization 1 (divided by 1 + the log of the document's length). The
-- same constants as `WEIGHTS` in `src/postgres/keywords.rs`, which ranks phrases with them.
CREATE FUNCTION memory_keyword_rank(search tsvector, lexeme text) RETURNS real
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT ts_rank('{0.1, 0.2, 0.5, 1.0}', search, memory_lexeme_query(lexeme), 1)
$$;

-- One row per (lexeme, entry holding it), with `memory_keyword_rank` of the entry for it.
CREATE TABLE keyword_postings (
    lexeme   text   NOT NULL,
    entry_id bigint NOT NULL,
    rank     real   NOT NULL,
    PRIMARY KEY (lexeme, entry_id) INCLUDE (rank)
);

-- How many entries hold each lexeme: the sum over its stripes (a stripe may be negative
-- when entries were deleted by another stripe's writer; rows may reach 0 and stay).
-- `docs` is not in the index and pages keep room, so an update of a count is a HOT update
-- that adds no index entry.
CREATE TABLE keyword_docs (
    lexeme text     NOT NULL,
    stripe smallint NOT NULL,
    docs   bigint   NOT NULL,
    PRIMARY KEY (lexeme, stripe)
) WITH (fillfactor = 70);

-- How many entries there are, the sum over the stripes: the N of the inverse document
-- frequency.
CREATE TABLE keyword_totals (
    stripe  smallint PRIMARY KEY,
    entries bigint   NOT NULL
) WITH (fillfactor = 50);

-- The stripe of this connection's writes.
CREATE FUNCTION memory_keyword_stripe() RETURNS smallint
LANGUAGE sql STABLE PARALLEL RESTRICTED AS $$
    SELECT (pg_backend_pid() % 16)::smallint
$$;

-- Keeps the postings and counts of the entries a statement inserted or deleted (`changed`,
-- the statement's transition table under both triggers).
CREATE FUNCTION memory_keywords_changed() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    sign CONSTANT integer := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    -- A statement that touched no entry (an age rule with nothing to remove) locks no
    -- counter.
    IF NOT EXISTS (SELECT 1 FROM changed) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO keyword_postings (lexeme, entry_id, rank)
        SELECT w.lexeme, c.id, memory_keyword_rank(c.search, w.lexeme)
        FROM changed c, unnest(c.search) AS w
        ORDER BY 1, 2;
    ELSE
        DELETE FROM keyword_postings p
        USING (SELECT w.lexeme, c.id FROM changed c, unnest(c.search) AS w) r
        WHERE p.lexeme = r.lexeme AND p.entry_id = r.id;
    END IF;
    INSERT INTO keyword_docs AS d (lexeme, stripe, docs)
    SELECT w.lexeme, memory_keyword_stripe(), sign * count(*)
    FROM changed c, unnest(c.search) AS w GROUP BY 1 ORDER BY 1
    ON CONFLICT (lexeme, stripe) DO UPDATE SET docs = d.docs + excluded.docs;
    INSERT INTO keyword_totals AS t (stripe, entries)
    SELECT memory_keyword_stripe(), sign * count(*) FROM changed
    ON CONFLICT (stripe) DO UPDATE SET entries = t.entries + excluded.entries;
    RETURN NULL;
END
$$;

-- The entries stored before this version.
INSERT INTO keyword_postings (lexeme, entry_id, rank)
SELECT w.lexeme, e.id, memory_keyword_rank(e.search, w.lexeme)
FROM entries e, unnest(e.search) AS w
ORDER BY 1, 2;
INSERT INTO keyword_docs (lexeme, stripe, docs)
SELECT lexeme, 0, count(*) FROM keyword_postings GROUP BY 1;
INSERT INTO keyword_totals (stripe, entries) SELECT 0, count(*) FROM entries;

CREATE TRIGGER entries_keywords_added AFTER INSERT ON entries
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION memory_keywords_changed();
CREATE TRIGGER entries_keywords_removed AFTER DELETE ON entries
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION memory_keywords_changed();
