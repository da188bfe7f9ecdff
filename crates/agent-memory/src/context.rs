//! [`build_context`]: the memories worth putting in a prompt, within a token budget.

use std::collections::HashMap;
use std::time::Duration;

use agent_op::{Candidate, MemoryBackend, MemoryEntry, MemoryError, MemoryId, Timestamp};

/// How [`build_context`] picks and ranks memories.
///
/// Each candidate gets `score = recency_weight × recency + semantic_weight × similarity`,
/// where
/// - `similarity` is the cosine similarity of the query's and the entry's embeddings, in
///   [-1, 1], as the backend reports it with
///   [`search_candidates`](agent_op::MemoryBackend::search_candidates) — for both backends
///   of this crate. It is a property of the pair, not of the ranking: on
///   [`SqliteBackend`](crate::SqliteBackend) an entry found only by keyword gets its true
///   (possibly low) similarity, not its fused rank score;
/// - `recency` is `0.5 ^ (age / recency_half_life)`, where `age` is the time since the entry
///   was *created*. 1 for a new entry, 0.5 after one half-life.
///
/// **Candidates without a similarity** (`Candidate::similarity` is `None`) cannot be checked
/// against the threshold, and their search score is never taken for a similarity (it is on
/// the backend's own scale; on `SqliteBackend` a fused *rank* in (0, 1] that any keyword hit
/// can top). So such a candidate is
/// - dropped when `similarity_threshold` is positive;
/// - kept when it is ≤ 0 (the default 0 included: such a threshold only asks to drop
///   entries pointing away from the query), and ranked with its search score standing in
///   for the similarity in the blend and in [`ContextEntry::similarity`].
///
/// Who reports no similarity: a backend that keeps the trait's default `search_candidates`
/// reports none for any candidate. With such a backend a window with a positive threshold
/// therefore builds an empty context, and a threshold ≤ 0 keeps every candidate, ranked by
/// recency and the backend's search score. [`InMemoryBackend`](crate::InMemoryBackend)
/// always reports one; [`SqliteBackend`](crate::SqliteBackend) reports one for every entry
/// with a usable stored vector — only an entry whose vector is damaged
/// ([`SqliteBackend::corrupt_embeddings`](crate::SqliteBackend::corrupt_embeddings)) has
/// none.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextWindow {
    /// The token budget ([`estimate_tokens`] of the rendered lines).
    pub max_tokens: usize,
    /// Weight of recency in the score (≥ 0).
    pub recency_weight: f32,
    /// Weight of similarity in the score (≥ 0).
    pub semantic_weight: f32,
    /// Candidates whose similarity (cosine, see above) is below this are dropped; so are
    /// candidates without a similarity when this is positive (see above). Any finite value;
    /// at -1 or below no candidate with a similarity is dropped.
    pub similarity_threshold: f32,
    /// The age at which recency is 0.5 (must be positive).
    pub recency_half_life: Duration,
    /// How many entries to ask the backend for before ranking (the backend returns at most
    /// this many).
    pub candidates: usize,
}

impl ContextWindow {
    /// A window of `max_tokens` with the defaults: recency weight 0.3, semantic weight 0.7,
    /// similarity threshold 0 (drop only candidates pointing away from the query), half-life
    /// 7 days, 50 candidates.
    pub fn new(max_tokens: usize) -> ContextWindow {
        ContextWindow {
            max_tokens,
            recency_weight: 0.3,
            semantic_weight: 0.7,
            similarity_threshold: 0.0,
            recency_half_life: Duration::from_secs(7 * 24 * 3600),
            candidates: 50,
        }
    }

    fn validate(&self) -> Result<(), MemoryError> {
        let weights = [
            ("recency_weight", self.recency_weight),
            ("semantic_weight", self.semantic_weight),
        ];
        for (name, w) in weights {
            if !(w.is_finite() && w >= 0.0) {
                return Err(MemoryError::InvalidInput(format!(
                    "context window {name} must be a finite number ≥ 0, got {w}"
                )));
            }
        }
        if !self.similarity_threshold.is_finite() {
            return Err(MemoryError::InvalidInput(format!(
                "context window similarity_threshold must be finite, got {}",
                self.similarity_threshold
            )));
        }
        if self.recency_half_life.is_zero() {
            return Err(MemoryError::InvalidInput(
                "context window recency_half_life must be positive".to_owned(),
            ));
        }
        Ok(())
    }
}

/// One memory chosen for the context.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextEntry {
    /// The memory, with its access stats as updated by this recall.
    pub entry: MemoryEntry,
    /// Its similarity to the query (cosine; see [`ContextWindow`]) — or, for a candidate
    /// the backend reported no similarity for (kept only under a threshold ≤ 0), its
    /// `search_score`, which stood in for the similarity when it was ranked.
    pub similarity: f32,
    /// Its score in the backend's search ranking ([`agent_op::ScoredMemory::score`]: cosine
    /// similarity for [`InMemoryBackend`](crate::InMemoryBackend), the normalized fused rank
    /// in (0, 1] for [`SqliteBackend`](crate::SqliteBackend)).
    pub search_score: f32,
    /// Its recency in [0, 1].
    pub recency: f32,
    /// The blended score it was ranked by.
    pub score: f32,
    /// Its estimated tokens as rendered by [`BuiltContext::text`].
    pub tokens: usize,
}

/// The memories chosen by [`build_context`], best first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BuiltContext {
    /// The chosen memories, by blended score, best first.
    pub entries: Vec<ContextEntry>,
    /// Their estimated tokens in total (at most the window's `max_tokens`).
    pub tokens: usize,
}

impl BuiltContext {
    /// The memories as prompt text: one `- content` line each, best first.
    pub fn text(&self) -> String {
        self.entries
            .iter()
            .map(|e| line(&e.entry.content))
            .collect()
    }
}

fn line(content: &str) -> String {
    format!("- {content}\n")
}

/// Estimated tokens of `text`: one per 4 characters (Unicode scalar values), rounded up —
/// the usual rule of thumb for English with BPE tokenizers. Not exact for any model; use a
/// budget with some slack.
///
/// ```
/// assert_eq!(agent_memory::estimate_tokens(""), 0);
/// assert_eq!(agent_memory::estimate_tokens("abcd"), 1);
/// assert_eq!(agent_memory::estimate_tokens("abcde"), 2);
/// ```
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// The memories to put in a prompt about `query`: asks `backend` for
/// [`window.candidates`](ContextWindow::candidates) search hits with their similarity to the
/// query ([`MemoryBackend::search_candidates`]), drops those below the similarity
/// threshold (and those without a similarity if the threshold is positive: see
/// [`ContextWindow`]), ranks the rest by the blended score of [`ContextWindow`] (ties: more
/// similar, then better search score, then newer, first), and fills
/// [`max_tokens`](ContextWindow::max_tokens) greedily in that order — an entry that does not
/// fit is skipped and smaller ones after it may still fit.
///
/// Only the chosen entries count as recalled ([`MemoryBackend::record_access`]: access time
/// and count update, and the returned entries show it); candidates dropped by the threshold
/// or the budget are left untouched. (With a backend that keeps the trait's defaults, the
/// search itself records a recall of every candidate.) An entry deleted between the search
/// and the recall is left out.
///
/// Errors: an invalid window (negative or non-finite weights, NaN threshold, zero
/// half-life) is [`MemoryError::InvalidInput`]; backend errors pass through.
///
/// ```
/// use agent_memory::{ContextWindow, InMemoryBackend, build_context};
/// use agent_op::{MemoryBackend, NewMemory};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let memory = InMemoryBackend::new();
/// for fact in ["Paris is the capital of France", "Rust has no garbage collector"] {
///     memory.store(NewMemory { content: fact.into(), context: String::new(), tags: vec![] }).await?;
/// }
/// let window = ContextWindow { similarity_threshold: 0.2, ..ContextWindow::new(100) };
/// let context = build_context(&memory, &window, "capital of France").await?;
/// assert_eq!(context.text(), "- Paris is the capital of France\n");
/// # Ok::<(), agent_op::MemoryError>(())
/// # }).unwrap();
/// ```
pub async fn build_context(
    backend: &dyn MemoryBackend,
    window: &ContextWindow,
    query: &str,
) -> Result<BuiltContext, MemoryError> {
    build_context_at(backend, window, query, chrono::Utc::now()).await
}

/// [`build_context`] with recency measured at `now` instead of the current time.
pub async fn build_context_at(
    backend: &dyn MemoryBackend,
    window: &ContextWindow,
    query: &str,
    now: Timestamp,
) -> Result<BuiltContext, MemoryError> {
    window.validate()?;
    if window.max_tokens == 0 || window.candidates == 0 {
        return Ok(BuiltContext::default());
    }
    let candidates = backend.search_candidates(query, window.candidates).await?;
    let half_life = window.recency_half_life.as_secs_f64();
    let mut ranked: Vec<ContextEntry> = candidates
        .into_iter()
        .filter_map(|Candidate { hit, similarity }| {
            let similarity = match similarity {
                Some(similarity) if similarity < window.similarity_threshold => return None,
                Some(similarity) => similarity,
                // Unknown: it cannot be shown to meet a positive threshold, and the search
                // score is no similarity (on SQLite a fused rank that any keyword hit can
                // top), so it never stands in for the threshold test. Under a threshold
                // ≤ 0 it is kept and only ranks by its search score.
                None if window.similarity_threshold > 0.0 => return None,
                None => hit.score,
            };
            let age = (now - hit.entry.created_at)
                .to_std()
                .map_or(0.0, |d| d.as_secs_f64());
            let recency = 0.5f64.powf(age / half_life) as f32;
            let score = window.recency_weight * recency + window.semantic_weight * similarity;
            let tokens = estimate_tokens(&line(&hit.entry.content));
            Some(ContextEntry {
                similarity,
                search_score: hit.score,
                recency,
                score,
                tokens,
                entry: hit.entry,
            })
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.similarity.total_cmp(&a.similarity))
            .then(b.search_score.total_cmp(&a.search_score))
            .then(b.entry.created_at.cmp(&a.entry.created_at))
            .then(a.entry.id.cmp(&b.entry.id))
    });
    let mut chosen = Vec::new();
    let mut tokens = 0;
    for candidate in ranked {
        if tokens + candidate.tokens <= window.max_tokens {
            tokens += candidate.tokens;
            chosen.push(candidate);
        }
    }
    if chosen.is_empty() {
        return Ok(BuiltContext::default());
    }
    // Only what goes into the prompt counts as recalled.
    let ids: Vec<MemoryId> = chosen.iter().map(|c| c.entry.id.clone()).collect();
    let mut recalled: HashMap<MemoryId, MemoryEntry> = backend
        .record_access(&ids)
        .await?
        .into_iter()
        .map(|e| (e.id.clone(), e))
        .collect();
    let mut built = BuiltContext::default();
    for mut candidate in chosen {
        // Deleted since the search: left out.
        if let Some(entry) = recalled.remove(&candidate.entry.id) {
            candidate.entry = entry;
            built.tokens += candidate.tokens;
            built.entries.push(candidate);
        }
    }
    Ok(built)
}
