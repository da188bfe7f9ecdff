//! Tokenizing text: words for the hashing embedder, terms for the SQLite keyword query.

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
pub(crate) const MAX_QUERY_TERMS: usize = 64;

/// Keyword-search terms of `query`: its runs of letters and digits (the characters SQLite's
/// `unicode61` tokenizer keeps), lowercased, distinct, in order of first appearance, at
/// most [`MAX_QUERY_TERMS`]. Everything else — quotes, `*`, `:`, `^`, parentheses, SQL
/// punctuation — separates terms and never reaches FTS5.
pub(crate) fn fts_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for run in query.split(|c: char| !c.is_alphanumeric()) {
        if run.is_empty() {
            continue;
        }
        let term = run.to_lowercase();
        if !terms.contains(&term) {
            terms.push(term);
            if terms.len() == MAX_QUERY_TERMS {
                break;
            }
        }
    }
    terms
}

/// An FTS5 `MATCH` expression: each term as a quoted string (`"` doubled, though terms from
/// [`fts_terms`] never contain one), joined with `OR`. Quoting makes every term a plain
/// string to FTS5, so operator words (`NEAR`, `AND`, `OR`, `NOT`) are searched for as words.
/// `None` for no terms.
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
    }

    #[test]
    fn tokens_are_lowercased_unicode_words() {
        let words: Vec<String> = tokenize("Größe ÉTÉ naïve 東京").collect();
        assert_eq!(words, ["größe", "été", "naïve", "東", "京"]);
    }
}
