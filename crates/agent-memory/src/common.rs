//! Input checks and conversions both backends share, so they accept and refuse the same
//! things.

use std::collections::HashSet;

use agent_op::{
    EmbeddingError, EmbeddingProvider, MemoryError, MemoryId, NewMemory, Tag, check_embedding,
};

/// The largest `content` or `context` accepted, in bytes (8 MiB). Larger texts are refused
/// with [`MemoryError::InvalidInput`].
pub const MAX_TEXT_BYTES: usize = 8 * 1024 * 1024;

/// Checks a memory before it is embedded or stored: content must contain something other
/// than whitespace, and content and context must each fit in [`MAX_TEXT_BYTES`].
pub(crate) fn validate_new(memory: &NewMemory) -> Result<(), MemoryError> {
    if memory.content.trim().is_empty() {
        return Err(MemoryError::InvalidInput(
            "memory content is empty (nothing to remember)".to_owned(),
        ));
    }
    for (what, text) in [("content", &memory.content), ("context", &memory.context)] {
        if text.len() > MAX_TEXT_BYTES {
            return Err(MemoryError::InvalidInput(format!(
                "memory {what} is {} bytes; the limit is {MAX_TEXT_BYTES}",
                text.len()
            )));
        }
    }
    Ok(())
}

/// Checks a search query's size (the same limit as content).
pub(crate) fn validate_query(query: &str) -> Result<(), MemoryError> {
    if query.len() > MAX_TEXT_BYTES {
        return Err(MemoryError::InvalidInput(format!(
            "search query is {} bytes; the limit is {MAX_TEXT_BYTES}",
            query.len()
        )));
    }
    Ok(())
}

/// Tags as stored: a set, sorted, without duplicates.
pub(crate) fn normalize_tags(mut tags: Vec<Tag>) -> Vec<Tag> {
    tags.sort();
    tags.dedup();
    tags
}

/// Refuses an embedder that declares zero dimensions.
pub(crate) fn check_embedder(embedder: &dyn EmbeddingProvider) -> Result<(), MemoryError> {
    if embedder.dimensions() == 0 {
        return Err(MemoryError::InvalidInput(format!(
            "embedder `{}` declares 0 dimensions",
            embedder.model()
        )));
    }
    Ok(())
}

/// Embeds `text` and checks the vector: `dimensions` values (the store's dimension, fixed
/// when it was opened), all finite.
pub(crate) async fn embed_checked(
    embedder: &dyn EmbeddingProvider,
    dimensions: usize,
    text: &str,
) -> Result<Vec<f32>, MemoryError> {
    let vector = embedder.embed(text).await?;
    check_embedding(&vector, dimensions)?;
    Ok(vector)
}

/// Embeds `texts` in one batch and checks the count and every vector (as
/// [`embed_checked`]).
pub(crate) async fn embed_batch_checked(
    embedder: &dyn EmbeddingProvider,
    dimensions: usize,
    texts: &[String],
) -> Result<Vec<Vec<f32>>, MemoryError> {
    let vectors = embedder.embed_batch(texts).await?;
    if vectors.len() != texts.len() {
        return Err(EmbeddingError::CountMismatch {
            expected: texts.len(),
            got: vectors.len(),
        }
        .into());
    }
    for vector in &vectors {
        check_embedding(vector, dimensions)?;
    }
    Ok(vectors)
}

/// The id both backends give row `n`: its decimal form.
pub(crate) fn format_id(n: i64) -> MemoryId {
    MemoryId(n.to_string())
}

/// The row of an id made by [`format_id`]; `None` for anything else (such an id names no
/// entry).
pub(crate) fn parse_id(id: &MemoryId) -> Option<i64> {
    let s = id.0.as_str();
    if s.is_empty() || s.starts_with('+') || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse::<i64>().ok().filter(|n| *n > 0)
}

/// The row ids of `ids` in order, each once, unknown or malformed ids left out (for
/// `record_access`). A set, not `Vec::contains`: the list is the caller's, of any length.
pub(crate) fn distinct_ids(ids: &[MemoryId]) -> Vec<i64> {
    let mut seen = HashSet::with_capacity(ids.len());
    ids.iter()
        .filter_map(parse_id)
        .filter(|n| seen.insert(*n))
        .collect()
}

/// Rows × dimensions above which a scan moves off the async executor.
const BLOCKING_MIN_FLOATS: usize = 1_000_000;

/// Whether [`cpu`] runs work touching `floats` values of vector data on the calling thread.
pub(crate) fn runs_here(floats: usize) -> bool {
    floats < BLOCKING_MIN_FLOATS
}

/// Runs CPU-heavy `work` on tokio's blocking pool when `floats` (the amount of vector data
/// it touches) is large and a tokio runtime is present; inline otherwise.
pub(crate) async fn cpu<T: Send + 'static>(
    floats: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, MemoryError> {
    if runs_here(floats) {
        return Ok(work());
    }
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle
            .spawn_blocking(work)
            .await
            .map_err(|e| MemoryError::storage("scanning vectors", None, e)),
        Err(_) => Ok(work()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_positive_ids_parse() {
        assert_eq!(parse_id(&MemoryId::from("42")), Some(42));
        for bad in [
            "",
            "0",
            "-1",
            "+1",
            "042",
            "abc",
            "1.0",
            "99999999999999999999",
            " 1",
        ] {
            assert_eq!(parse_id(&MemoryId::from(bad)), None, "{bad:?}");
        }
        assert_eq!(parse_id(&format_id(i64::MAX)), Some(i64::MAX));
    }

    #[test]
    fn tags_become_a_sorted_set() {
        let tags = normalize_tags(vec!["b".into(), "a".into(), "b".into()]);
        assert_eq!(tags, vec![Tag::from("a"), Tag::from("b")]);
    }
}
