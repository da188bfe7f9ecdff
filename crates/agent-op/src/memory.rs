//! Agent memory: entries, the [`MemoryBackend`] trait and the [`EmbeddingProvider`] trait.
//!
//! Backends (in-memory, SQLite) live in `agent-memory`; embedding clients in `agent-provider`.
//! Programs reach memory through the `remember`, `recall` and `forget` operations.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cause::Cause;
use crate::future::BoxFuture;
use crate::provider::ProviderError;
use crate::trace::Timestamp;

/// Identifies a stored memory. Backends choose the format; callers treat it as opaque.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(pub String);

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for MemoryId {
    fn from(s: &str) -> MemoryId {
        MemoryId(s.to_owned())
    }
}

/// A label on a memory, for retrieval by topic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Tag(pub String);

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Tag {
    fn from(s: &str) -> Tag {
        Tag(s.to_owned())
    }
}

impl From<String> for Tag {
    fn from(s: String) -> Tag {
        Tag(s)
    }
}

/// Something an agent learned, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryEntry {
    /// Its id.
    pub id: MemoryId,
    /// What was learned.
    pub content: String,
    /// How and why it was learned.
    pub context: String,
    /// Its labels.
    pub tags: Vec<Tag>,
    /// When it was stored.
    pub created_at: Timestamp,
    /// When it was last recalled (or stored).
    pub accessed_at: Timestamp,
    /// How often it was recalled.
    pub access_count: u64,
}

/// A memory to store; the backend assigns its id and times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewMemory {
    /// What was learned.
    pub content: String,
    /// How and why it was learned.
    pub context: String,
    /// Its labels.
    pub tags: Vec<Tag>,
}

/// A search hit: an entry and how well it matched (higher is better; backends document the
/// scale).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoredMemory {
    /// The entry.
    pub entry: MemoryEntry,
    /// How well it matched the query.
    pub score: f32,
}

/// A hit of [`MemoryBackend::search_candidates`]: what [`MemoryBackend::search`] would
/// return, with the cosine similarity of the query's and the entry's embeddings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// The hit, scored as `search` scores it.
    pub hit: ScoredMemory,
    /// The cosine similarity of the query's and the entry's embeddings, in [-1, 1]; 0 when
    /// either is all-zero; `None` when the backend cannot tell.
    pub similarity: Option<f32>,
}

/// How a search runs and which entries it may return: [`MemoryBackend::search_with`].
///
/// The restrictions apply *inside* the search — a backend with an approximate index walks it
/// with the filter, so asking for 10 hits among the entries tagged `"ops"` gives the 10 best
/// such entries, not the best 10 overall cut down to the few that carry the tag. An entry
/// must pass every restriction that is set. The default restricts nothing and lets the
/// backend choose exact or approximate vector search.
///
/// ```
/// use agent_op::{SearchOptions, Tag};
///
/// let options = SearchOptions::new().tag("ops").exact(true);
/// assert_eq!(options.tags, vec![Tag::from("ops")]);
/// assert!(options.exact && !options.is_unrestricted());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SearchOptions {
    /// Only entries carrying every one of these tags (compared exactly).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<Tag>,
    /// Only entries created at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_after: Option<Timestamp>,
    /// Only entries created strictly before this time. With [`created_after`] at or past
    /// it, the range is empty and a search returns no hits (never an error).
    ///
    /// [`created_after`]: SearchOptions::created_after
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before: Option<Timestamp>,
    /// Compare the query with every candidate vector instead of walking an approximate
    /// index: slower on large stores, recall exactly 1. Backends without an index always
    /// search exactly.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
}

impl SearchOptions {
    /// No restrictions; the backend picks exact or approximate search.
    pub const fn new() -> SearchOptions {
        SearchOptions {
            tags: Vec::new(),
            created_after: None,
            created_before: None,
            exact: false,
        }
    }

    /// Only entries carrying `tag` (and every other tag asked for).
    pub fn tag(mut self, tag: impl Into<Tag>) -> SearchOptions {
        self.tags.push(tag.into());
        self
    }

    /// Only entries created at or after `time`.
    pub fn created_after(mut self, time: Timestamp) -> SearchOptions {
        self.created_after = Some(time);
        self
    }

    /// Only entries created strictly before `time`.
    pub fn created_before(mut self, time: Timestamp) -> SearchOptions {
        self.created_before = Some(time);
        self
    }

    /// Exact vector search (`true`) or the backend's choice (`false`, the default).
    pub const fn exact(mut self, exact: bool) -> SearchOptions {
        self.exact = exact;
        self
    }

    /// Whether these options restrict which entries may be returned (tags or times).
    pub fn is_unrestricted(&self) -> bool {
        self.tags.is_empty() && self.created_after.is_none() && self.created_before.is_none()
    }

    /// Whether `entry` passes every restriction.
    pub fn admits(&self, entry: &MemoryEntry) -> bool {
        self.created_after.is_none_or(|t| entry.created_at >= t)
            && self.created_before.is_none_or(|t| entry.created_at < t)
            && self.tags.iter().all(|tag| entry.tags.contains(tag))
    }
}

/// What [`MemoryBackend::prune`] removes. Every rule that is set applies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PrunePolicy {
    /// Keep at most this many entries, evicting the least accessed first (fewest recalls, then
    /// the longest unused).
    pub max_entries: Option<u64>,
    /// Remove entries not accessed for longer than this.
    pub max_age: Option<Duration>,
    /// Merge entries whose embeddings have at least this cosine similarity into the older one.
    pub merge_similarity: Option<f32>,
}

impl PrunePolicy {
    /// A policy with no rules (prunes nothing); add rules with the methods below.
    pub const fn new() -> PrunePolicy {
        PrunePolicy {
            max_entries: None,
            max_age: None,
            merge_similarity: None,
        }
    }

    /// Keep at most `n` entries, evicting the least accessed first.
    pub const fn max_entries(mut self, n: u64) -> PrunePolicy {
        self.max_entries = Some(n);
        self
    }

    /// Remove entries not accessed for longer than `age`.
    pub const fn max_age(mut self, age: Duration) -> PrunePolicy {
        self.max_age = Some(age);
        self
    }

    /// Merge entries whose embeddings have at least this cosine similarity.
    pub const fn merge_similarity(mut self, threshold: f32) -> PrunePolicy {
        self.merge_similarity = Some(threshold);
        self
    }
}

/// What a prune did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneReport {
    /// Entries removed by the size and age rules.
    pub removed: u64,
    /// Entries merged into a near-duplicate.
    pub merged: u64,
}

/// Storage for memories. Every backend passes the same conformance suite in `agent-memory`.
///
/// # Cancellation
///
/// Every operation is cancellation-safe: its future may be dropped at any await point (a
/// `timeout`, a lost `race` and an abort all do that) and the store stays whole and usable.
/// A dropped operation has either taken effect entirely or not at all; it leaves no lock
/// held, no transaction open and no connection in a bad state, so the next operation on the
/// same handle, or on another handle to the same store, proceeds normally. The conformance
/// suite checks this for each operation, dropped after each of its await points in turn.
pub trait MemoryBackend: Send + Sync {
    /// Stores a memory and returns its new id.
    fn store(&self, memory: NewMemory) -> BoxFuture<'_, Result<MemoryId, MemoryError>>;

    /// The `k` entries most similar to `query`, best first. Recalled entries get their access
    /// time and count updated.
    fn search<'a>(
        &'a self,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<ScoredMemory>, MemoryError>>;

    /// The `n` most recently stored entries, newest first.
    fn recent(&self, n: usize) -> BoxFuture<'_, Result<Vec<MemoryEntry>, MemoryError>>;

    /// Entries carrying every one of `tags`, newest first.
    fn by_tags<'a>(
        &'a self,
        tags: &'a [Tag],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>>;

    /// Removes entries according to `policy`.
    fn prune<'a>(
        &'a self,
        policy: &'a PrunePolicy,
    ) -> BoxFuture<'a, Result<PruneReport, MemoryError>>;

    /// Deletes an entry; `false` if there was none with that id.
    fn delete<'a>(&'a self, id: &'a MemoryId) -> BoxFuture<'a, Result<bool, MemoryError>>;

    /// The entry with that id, if any (does not count as an access).
    fn get<'a>(
        &'a self,
        id: &'a MemoryId,
    ) -> BoxFuture<'a, Result<Option<MemoryEntry>, MemoryError>>;

    /// How many entries are stored.
    fn count(&self) -> BoxFuture<'_, Result<u64, MemoryError>>;

    /// Search hits for a caller that picks among them itself (a prompt-context builder, for
    /// example): the hits [`search`](MemoryBackend::search) would return, in the same order
    /// and with the same scores, each with the cosine similarity of the query's and the
    /// entry's embeddings ([`Candidate`]) — and **without** recording a recall. Call
    /// [`record_access`](MemoryBackend::record_access) for the entries actually used.
    ///
    /// The default calls `search`, so it records a recall of every hit and reports no
    /// similarity; the default `record_access` then records nothing more. Backends override
    /// both methods or neither.
    fn search_candidates<'a>(
        &'a self,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, MemoryError>> {
        Box::pin(async move {
            let hits = self.search(query, k).await?;
            Ok(hits
                .into_iter()
                .map(|hit| Candidate {
                    hit,
                    similarity: None,
                })
                .collect())
        })
    }

    /// [`search`](MemoryBackend::search) restricted and tuned by `options`: the `k` best
    /// entries among those that pass every restriction, with their recall recorded.
    ///
    /// The default is correct for any backend but slow on large stores: it asks
    /// [`search_candidates_with`](MemoryBackend::search_candidates_with) for the hits and
    /// records a recall of those returned. Backends with their own filtered search override
    /// both `*_with` methods.
    fn search_with<'a>(
        &'a self,
        query: &'a str,
        k: usize,
        options: &'a SearchOptions,
    ) -> BoxFuture<'a, Result<Vec<ScoredMemory>, MemoryError>> {
        Box::pin(async move {
            if options.is_unrestricted() {
                return self.search(query, k).await;
            }
            let hits = self.search_candidates_with(query, k, options).await?;
            let ids: Vec<MemoryId> = hits.iter().map(|c| c.hit.entry.id.clone()).collect();
            let mut updated: std::collections::HashMap<MemoryId, MemoryEntry> = self
                .record_access(&ids)
                .await?
                .into_iter()
                .map(|entry| (entry.id.clone(), entry))
                .collect();
            Ok(hits
                .into_iter()
                .filter_map(|c| {
                    let entry = updated.remove(&c.hit.entry.id)?;
                    Some(ScoredMemory {
                        entry,
                        score: c.hit.score,
                    })
                })
                .collect())
        })
    }

    /// [`search_candidates`](MemoryBackend::search_candidates) restricted and tuned by
    /// `options`; records nothing.
    ///
    /// The default ranks every stored entry with `search_candidates` and keeps the first `k`
    /// that pass the restrictions — correct, since nothing is cut before filtering, but it
    /// reads the whole store (and records a recall of every entry where `search_candidates`
    /// is itself the trait's default).
    fn search_candidates_with<'a>(
        &'a self,
        query: &'a str,
        k: usize,
        options: &'a SearchOptions,
    ) -> BoxFuture<'a, Result<Vec<Candidate>, MemoryError>> {
        Box::pin(async move {
            if options.is_unrestricted() {
                return self.search_candidates(query, k).await;
            }
            if k == 0 {
                return Ok(Vec::new());
            }
            let all = usize::try_from(self.count().await?).unwrap_or(usize::MAX);
            let mut hits = self.search_candidates(query, all).await?;
            hits.retain(|c| options.admits(&c.hit.entry));
            hits.truncate(k);
            Ok(hits)
        })
    }

    /// Records a recall of each entry in `ids`, as [`search`](MemoryBackend::search) does for
    /// its hits (access time set to now — never moved back — and count + 1; an id listed
    /// twice counts once), and returns those entries as updated, in the order of `ids`, each
    /// once. Unknown ids are skipped.
    ///
    /// The default records nothing (the default
    /// [`search_candidates`](MemoryBackend::search_candidates) already did) and returns the
    /// entries as [`get`](MemoryBackend::get) reads them.
    fn record_access<'a>(
        &'a self,
        ids: &'a [MemoryId],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(async move {
            let mut entries = Vec::with_capacity(ids.len());
            let mut seen = std::collections::HashSet::with_capacity(ids.len());
            for id in ids {
                if !seen.insert(id) {
                    continue;
                }
                if let Some(entry) = self.get(id).await? {
                    entries.push(entry);
                }
            }
            Ok(entries)
        })
    }
}

/// Why a memory operation failed.
///
/// [`Error::source`](std::error::Error::source) returns the underlying error where there is
/// one: the [`EmbeddingError`] of [`Embedding`](MemoryError::Embedding), and the storage
/// layer's own error (an `sqlx::Error`, an `std::io::Error`, a task's `JoinError`…) of
/// [`Storage`](MemoryError::Storage), which `downcast_ref` turns back into its type.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum MemoryError {
    /// The embedder failed or returned an unusable vector.
    Embedding(EmbeddingError),
    /// The store was built with a different embedder; its vectors are not comparable.
    EmbedderMismatch {
        /// The model recorded in the store.
        stored_model: String,
        /// The dimension recorded in the store.
        stored_dimensions: usize,
        /// The model given now.
        given_model: String,
        /// The dimension given now.
        given_dimensions: usize,
    },
    /// The request itself was unusable.
    InvalidInput(String),
    /// The storage layer failed (the database, the file system, a worker task).
    Storage {
        /// What the backend was doing, e.g. "storing a memory".
        operation: String,
        /// Which store: a file path or a server address, when the backend has one.
        location: Option<String>,
        /// The storage layer's error.
        cause: Cause,
    },
    /// The store holds data this backend did not write: another program's database, damaged
    /// metadata, or a schema from a newer version.
    UnexpectedData {
        /// What the backend was doing.
        operation: String,
        /// Which store, when the backend has a location.
        location: Option<String>,
        /// What was found.
        found: String,
    },
    /// The handle was closed; open the store again.
    Closed {
        /// Which store, when the backend has a location.
        location: Option<String>,
    },
}

impl MemoryError {
    /// A [`Storage`](MemoryError::Storage) error: `operation` on the store at `location`
    /// failed with `cause`.
    pub fn storage(
        operation: impl Into<String>,
        location: Option<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> MemoryError {
        MemoryError::Storage {
            operation: operation.into(),
            location,
            cause: Cause::new(cause),
        }
    }
}

/// ` (at LOCATION)` when there is one.
struct At<'a>(&'a Option<String>);

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(location) => write!(f, " ({location})"),
            None => Ok(()),
        }
    }
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryError::Embedding(e) => write!(f, "embedding failed: {e}"),
            MemoryError::EmbedderMismatch {
                stored_model,
                stored_dimensions,
                given_model,
                given_dimensions,
            } => write!(
                f,
                "memory store was built with embedder `{stored_model}` ({stored_dimensions} \
                 dimensions), but `{given_model}` ({given_dimensions} dimensions) was given"
            ),
            MemoryError::InvalidInput(message) => write!(f, "invalid memory request: {message}"),
            MemoryError::Storage {
                operation,
                location,
                cause,
            } => write!(
                f,
                "memory storage failed: {operation}{}: {cause}",
                At(location)
            ),
            MemoryError::UnexpectedData {
                operation,
                location,
                found,
            } => write!(
                f,
                "memory store holds unexpected data: {operation}{}: {found}",
                At(location)
            ),
            MemoryError::Closed { location } => {
                write!(f, "memory store{} is closed", At(location))
            }
        }
    }
}

impl std::error::Error for MemoryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MemoryError::Embedding(e) => Some(e),
            MemoryError::Storage { cause, .. } => Some(cause.get_ref()),
            _ => None,
        }
    }
}

impl From<EmbeddingError> for MemoryError {
    fn from(e: EmbeddingError) -> MemoryError {
        MemoryError::Embedding(e)
    }
}

/// Turns text into vectors for semantic search.
pub trait EmbeddingProvider: Send + Sync {
    /// The embedding model's name, recorded by stores so vectors are never mixed.
    fn model(&self) -> &str;

    /// The length of every vector it returns.
    fn dimensions(&self) -> usize;

    /// Embeds one text.
    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>>;

    /// Embeds many texts, in order. The default embeds them one at a time.
    fn embed_batch<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbeddingError>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(texts.len());
            for text in texts {
                out.push(self.embed(text).await?);
            }
            Ok(out)
        })
    }
}

/// Why embedding failed.
///
/// [`Error::source`](std::error::Error::source) returns the underlying error: the
/// [`ProviderError`] of [`Provider`](EmbeddingError::Provider), the error kept in
/// [`Request`](EmbeddingError::Request).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum EmbeddingError {
    /// The embedding service failed.
    Provider(ProviderError),
    /// A vector had the wrong length.
    DimensionMismatch {
        /// The embedder's declared dimension.
        expected: usize,
        /// What it returned.
        got: usize,
    },
    /// A vector held NaN or infinite values.
    NonFinite,
    /// The embedder returned another number of vectors than it was given texts.
    CountMismatch {
        /// Texts given.
        expected: usize,
        /// Vectors returned.
        got: usize,
    },
    /// The request could not be built (encoding it failed).
    Request(Cause),
    /// The embedder's configuration cannot work (a dimension of zero, say).
    InvalidConfig(String),
    /// Anything else, described (for embedders outside this workspace).
    Other(String),
}

impl fmt::Display for EmbeddingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmbeddingError::Provider(e) => fmt::Display::fmt(e, f),
            EmbeddingError::DimensionMismatch { expected, got } => {
                write!(f, "embedding has {got} dimensions, expected {expected}")
            }
            EmbeddingError::NonFinite => f.write_str("embedding contains non-finite values"),
            EmbeddingError::CountMismatch { expected, got } => {
                write!(f, "embedder returned {got} vectors for {expected} texts")
            }
            EmbeddingError::Request(cause) => {
                write!(f, "could not build the embedding request: {cause}")
            }
            EmbeddingError::InvalidConfig(message) => {
                write!(f, "unusable embedder configuration: {message}")
            }
            EmbeddingError::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for EmbeddingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent: the provider error's own source comes next.
            EmbeddingError::Provider(e) => e.source(),
            EmbeddingError::Request(cause) => Some(cause.get_ref()),
            _ => None,
        }
    }
}

impl From<ProviderError> for EmbeddingError {
    fn from(e: ProviderError) -> EmbeddingError {
        EmbeddingError::Provider(e)
    }
}

/// Checks that `vector` has `expected` finite components.
pub fn check_embedding(vector: &[f32], expected: usize) -> Result<(), EmbeddingError> {
    if vector.len() != expected {
        return Err(EmbeddingError::DimensionMismatch {
            expected,
            got: vector.len(),
        });
    }
    if vector.iter().any(|x| !x.is_finite()) {
        return Err(EmbeddingError::NonFinite);
    }
    Ok(())
}

/// A stable fingerprint of `text` (`sha256:<hex>`), recorded in trace events instead of the
/// text itself.
///
/// ```
/// assert_eq!(
///     agent_op::content_hash("abc"),
///     "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
/// );
/// ```
pub fn content_hash(text: &str) -> String {
    sha256_tagged(text.as_bytes())
}

/// `sha256:<hex>` of `bytes`: the form of every hash this library records.
pub(crate) fn sha256_tagged(bytes: &[u8]) -> String {
    TaggedHash::of(&Sha256::digest(bytes)).as_str().to_owned()
}

/// A SHA-256 digest as `sha256:<hex>`, on the stack: written into JSON as it is, it costs
/// no allocation.
pub(crate) struct TaggedHash([u8; 7 + 64]);

impl TaggedHash {
    /// The tagged form of a 32-byte `digest`.
    pub(crate) fn of(digest: &[u8]) -> TaggedHash {
        let mut out = [0u8; 7 + 64];
        out[..7].copy_from_slice(b"sha256:");
        for (i, byte) in digest.iter().take(32).enumerate() {
            out[7 + 2 * i] = HEX[usize::from(byte >> 4)];
            out[8 + 2 * i] = HEX[usize::from(byte & 0xf)];
        }
        TaggedHash(out)
    }

    /// The text.
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII is ever written into it.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// [`MemoryError`] and [`EmbeddingError`] as journals store them: their variants and fields,
/// causes as their messages. A deserialized error compares equal to the original (causes
/// compare by message).
mod stored {
    use serde::{Deserialize, Serialize};

    use super::{EmbeddingError, MemoryError};
    use crate::cause::Cause;
    use crate::provider::ProviderError;
    use crate::provider_error::RecordedCause;

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum StoredMemory {
        Embedding {
            error: EmbeddingError,
        },
        EmbedderMismatch {
            stored_model: String,
            stored_dimensions: usize,
            given_model: String,
            given_dimensions: usize,
        },
        InvalidInput {
            message: String,
        },
        Storage {
            operation: String,
            location: Option<String>,
            cause: String,
        },
        UnexpectedData {
            operation: String,
            location: Option<String>,
            found: String,
        },
        Closed {
            location: Option<String>,
        },
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum StoredEmbedding {
        Provider { error: ProviderError },
        DimensionMismatch { expected: usize, got: usize },
        NonFinite,
        CountMismatch { expected: usize, got: usize },
        Request { cause: String },
        InvalidConfig { message: String },
        Other { message: String },
    }

    fn cause(text: String) -> Cause {
        Cause::new(RecordedCause(text))
    }

    impl Serialize for MemoryError {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let stored = match self.clone() {
                MemoryError::Embedding(error) => StoredMemory::Embedding { error },
                MemoryError::EmbedderMismatch {
                    stored_model,
                    stored_dimensions,
                    given_model,
                    given_dimensions,
                } => StoredMemory::EmbedderMismatch {
                    stored_model,
                    stored_dimensions,
                    given_model,
                    given_dimensions,
                },
                MemoryError::InvalidInput(message) => StoredMemory::InvalidInput { message },
                MemoryError::Storage {
                    operation,
                    location,
                    cause,
                } => StoredMemory::Storage {
                    operation,
                    location,
                    cause: cause.to_string(),
                },
                MemoryError::UnexpectedData {
                    operation,
                    location,
                    found,
                } => StoredMemory::UnexpectedData {
                    operation,
                    location,
                    found,
                },
                MemoryError::Closed { location } => StoredMemory::Closed { location },
            };
            stored.serialize(serializer)
        }
    }

    impl<'de> Deserialize<'de> for MemoryError {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            Ok(match StoredMemory::deserialize(deserializer)? {
                StoredMemory::Embedding { error } => MemoryError::Embedding(error),
                StoredMemory::EmbedderMismatch {
                    stored_model,
                    stored_dimensions,
                    given_model,
                    given_dimensions,
                } => MemoryError::EmbedderMismatch {
                    stored_model,
                    stored_dimensions,
                    given_model,
                    given_dimensions,
                },
                StoredMemory::InvalidInput { message } => MemoryError::InvalidInput(message),
                StoredMemory::Storage {
                    operation,
                    location,
                    cause: text,
                } => MemoryError::Storage {
                    operation,
                    location,
                    cause: cause(text),
                },
                StoredMemory::UnexpectedData {
                    operation,
                    location,
                    found,
                } => MemoryError::UnexpectedData {
                    operation,
                    location,
                    found,
                },
                StoredMemory::Closed { location } => MemoryError::Closed { location },
            })
        }
    }

    impl Serialize for EmbeddingError {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let stored = match self.clone() {
                EmbeddingError::Provider(error) => StoredEmbedding::Provider { error },
                EmbeddingError::DimensionMismatch { expected, got } => {
                    StoredEmbedding::DimensionMismatch { expected, got }
                }
                EmbeddingError::NonFinite => StoredEmbedding::NonFinite,
                EmbeddingError::CountMismatch { expected, got } => {
                    StoredEmbedding::CountMismatch { expected, got }
                }
                EmbeddingError::Request(c) => StoredEmbedding::Request {
                    cause: c.to_string(),
                },
                EmbeddingError::InvalidConfig(message) => {
                    StoredEmbedding::InvalidConfig { message }
                }
                EmbeddingError::Other(message) => StoredEmbedding::Other { message },
            };
            stored.serialize(serializer)
        }
    }

    impl<'de> Deserialize<'de> for EmbeddingError {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            Ok(match StoredEmbedding::deserialize(deserializer)? {
                StoredEmbedding::Provider { error } => EmbeddingError::Provider(error),
                StoredEmbedding::DimensionMismatch { expected, got } => {
                    EmbeddingError::DimensionMismatch { expected, got }
                }
                StoredEmbedding::NonFinite => EmbeddingError::NonFinite,
                StoredEmbedding::CountMismatch { expected, got } => {
                    EmbeddingError::CountMismatch { expected, got }
                }
                StoredEmbedding::Request { cause: text } => EmbeddingError::Request(cause(text)),
                StoredEmbedding::InvalidConfig { message } => {
                    EmbeddingError::InvalidConfig(message)
                }
                StoredEmbedding::Other { message } => EmbeddingError::Other(message),
            })
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn memory_errors_round_trip_through_json_with_causes_as_text() {
            let errors = vec![
                MemoryError::Storage {
                    operation: "search".into(),
                    location: Some("memory.db".into()),
                    cause: Cause::new(std::io::Error::other("disk full")),
                },
                MemoryError::Embedding(EmbeddingError::Provider(ProviderError::other("down"))),
                MemoryError::Embedding(EmbeddingError::Request(Cause::new(std::io::Error::other(
                    "reset",
                )))),
                MemoryError::InvalidInput("empty query".into()),
                MemoryError::Closed { location: None },
            ];
            for error in errors {
                let json = serde_json::to_value(&error).unwrap();
                let back: MemoryError = serde_json::from_value(json.clone()).unwrap();
                assert_eq!(back, error, "{json}");
            }
        }
    }
}
