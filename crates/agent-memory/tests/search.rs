//! Search numerics and tokenization, on both backends: vectors of any finite scale and of
//! very high dimension, scores within their documented range, and keyword search of text
//! with combining marks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use agent_memory::{HashingEmbedder, InMemoryBackend, SqliteBackend, ZeroEmbedder};
use agent_op::{BoxFuture, EmbeddingError, EmbeddingProvider, MemoryBackend, NewMemory};

fn memory(content: &str) -> NewMemory {
    NewMemory {
        content: content.to_owned(),
        context: String::new(),
        tags: vec![],
    }
}

/// Returns the vector registered for a text (the zero vector for any other text).
struct Lookup {
    dimensions: usize,
    model: String,
    vectors: Mutex<HashMap<String, Vec<f32>>>,
}

impl Lookup {
    fn new(dimensions: usize, model: &str) -> Lookup {
        Lookup {
            dimensions,
            model: model.to_owned(),
            vectors: Mutex::new(HashMap::new()),
        }
    }

    fn set(&self, text: &str, vector: Vec<f32>) {
        self.vectors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(text.to_owned(), vector);
    }
}

impl EmbeddingProvider for Lookup {
    fn model(&self) -> &str {
        &self.model
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
        Box::pin(async move {
            Ok(self
                .vectors
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(text)
                .cloned()
                .unwrap_or_else(|| vec![0.0; self.dimensions]))
        })
    }
}

async fn both(
    embedder: Arc<dyn EmbeddingProvider>,
    dir: &tempfile::TempDir,
) -> [(&'static str, Box<dyn MemoryBackend>); 2] {
    let memory = InMemoryBackend::builder()
        .embedder(embedder.clone())
        .build()
        .expect("in-memory backend");
    let sqlite = SqliteBackend::builder(dir.path().join("m.db"))
        .embedder(embedder)
        .open()
        .await
        .expect("sqlite backend");
    [
        ("in-memory", Box::new(memory)),
        ("sqlite", Box::new(sqlite)),
    ]
}

#[tokio::test]
async fn vectors_of_any_finite_scale_are_found() {
    // Finite, non-zero vectors whose f32 squared norm underflows (1e-25) or overflows (1e20,
    // 3e30) used to normalize to zero: nothing could find them.
    let hashing = HashingEmbedder::new();
    let stored = "the deploy key is in the vault";
    let related = "where is the deploy key";
    // Shares no word with the stored text: only the vector ranking can find it.
    let vector_only = "somewhere secret";
    for scale in [1e-30f32, 1e-25, 1e-18, 1.0, 1e20, 3e30, 1e37] {
        let embedder = Arc::new(Lookup::new(384, "scaled"));
        let scaled = |text: &str| -> Vec<f32> {
            hashing.embed_now(text).iter().map(|x| x * scale).collect()
        };
        embedder.set(stored, scaled(stored));
        embedder.set(related, scaled(related));
        embedder.set(vector_only, scaled(stored));
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, backend) in both(embedder.clone(), &dir).await {
            let id = backend.store(memory(stored)).await.expect("store");
            for query in [stored, related, vector_only] {
                let hits = backend.search(query, 3).await.expect("search");
                assert_eq!(
                    hits.first().map(|h| &h.entry.id),
                    Some(&id),
                    "{name}, scale {scale:e}: {query:?} found nothing"
                );
            }
            let candidates = backend
                .search_candidates(vector_only, 3)
                .await
                .expect("search_candidates");
            let similarity = candidates.first().and_then(|c| c.similarity);
            assert!(
                similarity.is_some_and(|s| s > 0.9999 && s <= 1.0),
                "{name}, scale {scale:e}: similarity {similarity:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_match_is_found_in_140_000_dimensions() {
    // 127² × 140,000 > i32::MAX: the int8 filter's integer dot product used to overflow
    // (a panic in debug builds, a lost exact match in release builds).
    let d = 140_000;
    let embedder = Arc::new(Lookup::new(d, "big"));
    embedder.set("a", vec![1.0; d]);
    embedder.set(
        "b",
        (0..d).map(|i| if i % 2 == 0 { 1.0 } else { 0.9 }).collect(),
    );
    let backend = InMemoryBackend::builder()
        .embedder(embedder)
        .build()
        .expect("backend");
    backend.store(memory("a")).await.expect("store");
    backend.store(memory("b")).await.expect("store");
    let hits = backend.search("a", 2).await.expect("search");
    let contents: Vec<&str> = hits.iter().map(|h| h.entry.content.as_str()).collect();
    assert_eq!(contents, ["a", "b"]);
    assert!(hits[0].score > 0.9999 && hits[0].score <= 1.0);
}

#[tokio::test]
async fn scores_stay_within_zero_and_one() {
    // f32 rounding puts the self-similarity of some unit vectors a few ulps above 1
    // ("The team meeting is at noon on Friday" scored 1.000000238); scores are documented
    // to lie in (0, 1].
    let mut texts: Vec<String> = vec![
        "The team meeting is at noon on Friday".to_owned(),
        "The quarterly report is due on the first Monday of April".to_owned(),
        "Ana prefers concise answers with code examples".to_owned(),
    ];
    texts.extend(
        (0..40).map(|i| format!("note {i}: the build {} failed on runner {}", i * 7, i % 13)),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, backend) in both(Arc::new(HashingEmbedder::new()), &dir).await {
        for text in &texts {
            backend.store(memory(text)).await.expect("store");
        }
        for text in &texts {
            for hit in backend.search(text, 5).await.expect("search") {
                assert!(
                    hit.score > 0.0 && hit.score <= 1.0,
                    "{name}: {text:?} scored {} for {:?}",
                    hit.score,
                    hit.entry.content
                );
            }
            for agent_op::Candidate { hit, similarity } in backend
                .search_candidates(text, 5)
                .await
                .expect("candidates")
            {
                let s = similarity.expect("both backends report the similarity");
                assert!(
                    (-1.0..=1.0).contains(&s),
                    "{name}: {s} for {:?}",
                    hit.entry.content
                );
            }
        }
    }
}

#[tokio::test]
async fn keyword_search_matches_decomposed_text() {
    // NFD text: accents as combining marks. FTS5's unicode61 keeps them inside tokens (and
    // folds them away), so query terms must not be cut at them.
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteBackend::builder(dir.path().join("m.db"))
        .embedder(Arc::new(ZeroEmbedder::new(8)))
        .open()
        .await
        .expect("open");
    let nfd = store
        .store(memory("Cafe\u{301} re\u{301}sume\u{301} notes"))
        .await
        .expect("store");
    let nfc = store
        .store(memory("Café résumé notes (NFC)"))
        .await
        .expect("store");
    let vietnamese = store.store(memory("Tiếng Việt")).await.expect("store");
    let tokyo = store.store(memory("東京タワー")).await.expect("store");
    let found = |hits: Vec<agent_op::ScoredMemory>| {
        let mut ids: Vec<_> = hits.into_iter().map(|h| h.entry.id).collect();
        ids.sort();
        ids
    };
    let mut both = vec![nfd.clone(), nfc.clone()];
    both.sort();
    for query in [
        "re\u{301}sume\u{301}",
        "résumé",
        "resume",
        "RE\u{301}SUME\u{301}",
    ] {
        assert_eq!(
            found(store.search(query, 5).await.expect("search")),
            both,
            "{query:?}"
        );
    }
    for query in ["Tie\u{302}\u{301}ng", "Tiếng", "tieng"] {
        assert_eq!(
            found(store.search(query, 5).await.expect("search")),
            std::slice::from_ref(&vietnamese),
            "{query:?}"
        );
    }
    assert_eq!(
        found(store.search("東京タワー", 5).await.expect("search")),
        [tokyo]
    );
    // U+0600 (a Prepend character) joins the grapheme cluster of the digit after it; the
    // term must still hold the whole token `123`, not `23`.
    let invoice = store
        .store(memory("invoice 123 was paid"))
        .await
        .expect("store");
    for query in ["\u{600}123", "paid \u{600}123"] {
        assert_eq!(
            found(store.search(query, 5).await.expect("search")),
            std::slice::from_ref(&invoice),
            "{query:?}"
        );
    }
}
