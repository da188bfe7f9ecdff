//! The local embedders: deterministic output, normalization, and what they capture.

use agent_memory::{HashingEmbedder, ZeroEmbedder};
use agent_op::{EmbeddingProvider, check_embedding};

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn hashing_output_is_pinned() {
    // These values must never change for `hashing-v1-*`: stores hold vectors made by it.
    // A different output needs a new model name (`hashing-v2-…`).
    let small = HashingEmbedder::with_dimensions(8).expect("embedder");
    assert_eq!(
        small.embed_now("Hello, world!"),
        [0.0, -1.0 / 3.0, 0.0, 0.0, -2.0 / 3.0, 0.0, 2.0 / 3.0, 0.0]
    );
    let default = HashingEmbedder::new();
    let v = default.embed_now("Hello, world!");
    let nonzero: Vec<(usize, f32)> = v
        .iter()
        .enumerate()
        .filter(|(_, x)| **x != 0.0)
        .map(|(i, x)| (i, *x))
        .collect();
    assert_eq!(
        nonzero,
        [(129, -1.0 / 3.0), (164, -2.0 / 3.0), (262, 2.0 / 3.0)]
    );
}

#[tokio::test]
async fn embeddings_are_unit_length_deterministic_and_valid() {
    let e = HashingEmbedder::new();
    assert_eq!(e.model(), "hashing-v1-384");
    assert_eq!(e.dimensions(), 384);
    let texts = [
        "The capital of France is Paris",
        "Größe, naïveté and 東京 — unicode words",
        "x",
        &"repeat ".repeat(10_000),
    ];
    for text in texts {
        let v = e.embed(text).await.expect("embed");
        check_embedding(&v, 384).expect("a valid vector");
        let norm = cosine(&v, &v).sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{text:?}: norm {norm}");
        assert_eq!(v, e.embed_now(text), "the same text gives the same vector");
    }
    let batch = e
        .embed_batch(&["a b".to_owned(), "b a".to_owned()])
        .await
        .expect("batch");
    assert_eq!(batch[0], e.embed_now("a b"));
    // Word order matters through the pair features, but only partly.
    let order = cosine(&batch[0], &batch[1]);
    assert!(order < 0.99 && order > 0.5, "{order}");
}

#[test]
fn similarity_follows_shared_words_and_phrases() {
    let e = HashingEmbedder::new();
    let q = e.embed_now("When is the team meeting?");
    let related = e.embed_now("The team meeting is on Friday at noon");
    let unrelated = e.embed_now("Bananas are rich in potassium");
    assert!(cosine(&q, &related) > 0.4, "{}", cosine(&q, &related));
    assert!(
        cosine(&q, &unrelated).abs() < 0.2,
        "{}",
        cosine(&q, &unrelated)
    );
    assert_eq!(
        e.embed_now("TEAM Meeting!"),
        e.embed_now("team meeting"),
        "case and punctuation are ignored"
    );
}

#[tokio::test]
async fn the_zero_embedder_is_all_zeros() {
    let e = ZeroEmbedder::new(16);
    assert_eq!(e.model(), "zero-16");
    assert_eq!(e.dimensions(), 16);
    let v = e.embed("anything").await.expect("embed");
    assert_eq!(v, vec![0.0; 16]);
    let batch = e
        .embed_batch(&["a".to_owned(), "b".to_owned()])
        .await
        .expect("batch");
    assert_eq!(batch.len(), 2);
}
