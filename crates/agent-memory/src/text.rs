//! Tokenizing text: words for the hashing embedder, terms for the keyword queries of the
//! SQLite and PostgreSQL backends.

use unicode_segmentation::UnicodeSegmentation;

/// The words of `text`, lowercased: Unicode (UAX #29) word boundaries, keeping only words
/// that contain a letter or digit. Punctuation, quotes, `*` and the like never appear in a
/// token. This is how [`HashingEmbedder`](crate::HashingEmbedder) reads text.
///
/// ```
/// let words: Vec<String> = agent_memory::tokenize("Don't PANIC: 42 towels!").collect();
/// assert_eq!(words, ["don't", "panic", "42", "towels"]);
/// ```
pub fn tokenize(text: &str) -> impl Iterator<Item = String> + '_ {
    text.unicode_words().map(str::to_lowercase)
}

/// The most distinct terms taken from one query for keyword search.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) const MAX_QUERY_TERMS: usize = 64;

/// Keyword-search terms of `query`: its runs of letters and digits with the combining marks
/// that go with them, lowercased, distinct, in order of first appearance, at most
/// [`MAX_QUERY_TERMS`]. Everything else — quotes, `*`, `:`, `^`, parentheses, SQL
/// punctuation — separates terms and never reaches FTS5.
///
/// Each term is quoted for FTS5, whose `unicode61` tokenizer then splits it into tokens
/// exactly as it split the indexed text, so a term matches as long as it never cuts *into*
/// one of its tokens: a term spanning several tokens is a phrase of them, which matches the
/// same text. `unicode61` tokens are runs of letters, digits (and private-use characters),
/// continuing through combining diacritics (`e` + U+0301 in NFD text, folded away by
/// `remove_diacritics`). So terms are runs of grapheme clusters that contain a letter,
/// digit or private-use character — a cluster keeps its combining marks — and are split at
/// every other cluster. (Splitting at the marks, as a plain test of each character would,
/// turned the NFD `re\u{301}sume\u{301}` into `re` and `sume`, which match nothing;
/// [`tokenize`]'s word boundaries would instead cut `東京`, one `unicode61` token, in two.)
/// Any character of the cluster counts, not just its first: a cluster can start with a
/// Prepend character such as U+0600 (a `unicode61` separator) before a digit, and dropping
/// it whole would cut into the token it starts (`\u{600}123` gave `23`, which does not
/// match `123`). The separator kept in the term is harmless: FTS5 splits it off again.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // used by the SQLite backend
pub(crate) fn fts_terms(query: &str) -> Vec<String> {
    terms(query, true)
}

/// The terms of [`fts_terms`] with their case kept (distinct as written), for PostgreSQL:
/// its text-search parser lowercases query terms exactly as it lowercased the indexed text
/// (by the database's `LC_CTYPE`), which lowercasing here could disagree with — under the C
/// locale PostgreSQL lowercases ASCII only, so a term lowercased here (`été`) would miss
/// the indexed `Été`.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))] // used by the PostgreSQL backend
pub(crate) fn cased_terms(query: &str) -> Vec<String> {
    terms(query, false)
}

#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
fn terms(query: &str, lowercase: bool) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    let mut run = String::new();
    let mut clusters = query.graphemes(true);
    loop {
        let cluster = clusters.next();
        if let Some(c) = cluster {
            if c.chars().any(is_token_char) {
                run.push_str(c);
                continue;
            }
        }
        if !run.is_empty() {
            let term = if lowercase {
                run.to_lowercase()
            } else {
                run.clone()
            };
            run.clear();
            if !terms.contains(&term) {
                terms.push(term);
                if terms.len() == MAX_QUERY_TERMS {
                    break;
                }
            }
        }
        if cluster.is_none() {
            break;
        }
    }
    terms
}

/// Whether `c` is part of an FTS5 `unicode61` token: a letter or digit (Rust's alphanumeric,
/// a superset of the tokenizer's `L*` and `N*` categories) or a private-use character
/// (`Co`).
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
fn is_token_char(c: char) -> bool {
    c.is_alphanumeric()
        || matches!(c, '\u{e000}'..='\u{f8ff}' | '\u{f0000}'..='\u{ffffd}' | '\u{100000}'..='\u{10fffd}')
}

/// An FTS5 `MATCH` expression: each term as a quoted string (`"` doubled, though terms from
/// [`fts_terms`] never contain one), joined with `OR`. Quoting makes every term a plain
/// string to FTS5, so operator words (`NEAR`, `AND`, `OR`, `NOT`) are searched for as words.
/// `None` for no terms.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // used by the SQLite backend
pub(crate) fn fts_match(terms: &[&str]) -> Option<String> {
    if terms.is_empty() {
        return None;
    }
    let mut out = String::new();
    for (i, term) in terms.iter().enumerate() {
        if i > 0 {
            out.push_str(" OR ");
        }
        out.push('"');
        out.push_str(&term.replace('"', "\"\""));
        out.push('"');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(text: &str) -> Option<String> {
        let terms = fts_terms(text);
        fts_match(&terms.iter().map(String::as_str).collect::<Vec<_>>())
    }

    #[test]
    fn operators_and_sql_become_quoted_words() {
        assert_eq!(
            query("NEAR(a b) * \"x\" '; DROP TABLE entries; --").as_deref(),
            Some("\"near\" OR \"a\" OR \"b\" OR \"x\" OR \"drop\" OR \"table\" OR \"entries\"")
        );
        assert_eq!(
            query("title:foo^ -bar").as_deref(),
            Some("\"title\" OR \"foo\" OR \"bar\"")
        );
        assert_eq!(query("*** \"\" ; '"), None);
        assert_eq!(query(""), None);
        // A double quote inside a word splits it.
        assert_eq!(query("צה\"ל").as_deref(), Some("\"צה\" OR \"ל\""));
        // Should a term ever hold a quote, it is doubled.
        assert_eq!(fts_match(&["a\"b"]).as_deref(), Some("\"a\"\"b\""));
    }

    #[test]
    fn terms_are_distinct_lowercase_and_capped() {
        assert_eq!(fts_terms("Don't don't DON'T été"), ["don", "t", "été"]);
        let long: String = (0..200).map(|i| format!("w{i} w{i} ")).collect();
        let terms = fts_terms(&long);
        assert_eq!(terms.len(), MAX_QUERY_TERMS);
        assert_eq!(terms[..2], ["w0", "w1"]);
        assert_eq!(cased_terms("Été été ÉTÉ été"), ["Été", "été", "ÉTÉ"]);
    }

    #[test]
    fn combining_marks_stay_in_their_term() {
        // NFD: each accent is a combining mark after its letter.
        assert_eq!(
            fts_terms("Re\u{301}sume\u{301} cafe\u{301}!"),
            ["re\u{301}sume\u{301}", "cafe\u{301}"]
        );
        assert_eq!(
            fts_terms("Tie\u{302}\u{301}ng Vie\u{323}\u{302}t"),
            ["tie\u{302}\u{301}ng", "vie\u{323}\u{302}t"]
        );
        // Ideographs stay one run, as `unicode61` keeps them one token.
        assert_eq!(fts_terms("東京 タワー"), ["東京", "タワー"]);
        // A mark after a separator does not start a term.
        assert_eq!(fts_terms("\"\u{301}x"), ["x"]);
        assert_eq!(fts_terms("\u{e000}\u{e001}"), ["\u{e000}\u{e001}"]);
        // A cluster that starts with a Prepend character (U+0600, a separator to FTS5)
        // before a digit: the digit's token is kept whole, not cut to `23`.
        assert_eq!(fts_terms("\u{600}123"), ["\u{600}123"]);
        assert_eq!(fts_terms("x \u{600}123 y"), ["x", "\u{600}123", "y"]);
        // A Prepend character before a separator is a separator.
        assert_eq!(fts_terms("a\u{600} b"), ["a", "b"]);
    }

    #[test]
    fn tokens_are_lowercased_unicode_words() {
        let words: Vec<String> = tokenize("Größe ÉTÉ naïve 東京").collect();
        assert_eq!(words, ["größe", "été", "naïve", "東", "京"]);
    }
}
