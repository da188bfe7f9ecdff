-- agent-memory schema for PostgreSQL, version 3: a search's words, numbered, as rows whose
-- count every plan estimates alike (PL/pgSQL is never inlined, so ROWS 8 stands), so that
-- PostgreSQL keeps the keyword read's generic plan. See docs/MEMORY.md ("The PostgreSQL
-- backend", keyword postings) and `read_terms` in src/postgres/keywords.rs.
CREATE FUNCTION memory_search_terms(terms text[]) RETURNS TABLE (i bigint, term text)
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE ROWS 8 AS $$
BEGIN
    RETURN QUERY SELECT u.i, u.term FROM unnest(terms) WITH ORDINALITY AS u(term, i);
END
$$;
