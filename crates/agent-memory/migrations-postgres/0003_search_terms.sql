-- agent-memory schema for PostgreSQL, version 3: a search's words as rows whose number a
-- plan does not depend on. See docs/MEMORY.md ("The PostgreSQL backend", keyword search).
--
-- The keyword read (`read_terms` in src/postgres/keywords.rs) is a prepared statement. For
-- its first five runs PostgreSQL plans it with the values bound, then keeps a generic plan
-- only if that one's estimated cost is no higher than the bound plans' average. With the
-- words as `unnest($1)`, a bound plan counts the array's words and the generic one guesses
-- 10, so for queries of fewer words the generic plan looked dearer and every search was
-- planned anew: 0.15-0.3 ms of a 1 ms keyword read at 100,000 entries. Read through this
-- function, every plan assumes the same 8 words (PL/pgSQL is never inlined, so its ROWS
-- estimate stands), the plans cost the same, and the generic one is kept. It is the same
-- plan: one index lookup per word.
CREATE FUNCTION memory_search_terms(terms text[]) RETURNS TABLE (i bigint, term text)
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE ROWS 8 AS $$
BEGIN
    RETURN QUERY SELECT u.i, u.term FROM unnest(terms) WITH ORDINALITY AS u(term, i);
END
$$;
