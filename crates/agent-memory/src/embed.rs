//! Embedders that need no model server: [`HashingEmbedder`] (the default) and
//! [`ZeroEmbedder`] (for tests).
//!
//! Model-backed embedders (OpenAI, Ollama) live in `agent-provider`; every embedder
//! implements [`agent_op::EmbeddingProvider`], so backends take any of them.

use agent_op::{BoxFuture, EmbeddingError, EmbeddingProvider};

use crate::text::tokenize;

/// The dimension of [`HashingEmbedder::new`] (and of the small sentence-embedding models it
/// stands in for).
pub const DEFAULT_DIMENSIONS: usize = 384;

/// Weight of a word feature.
const WORD_WEIGHT: f32 = 1.0;
/// Weight of an adjacent-word-pair feature: phrases count, but less than their words.
const PAIR_WEIGHT: f32 = 0.5;

/// A local, deterministic embedder: feature hashing of words and adjacent word pairs.
///
/// It needs no model server and no network, so semantic recall works offline out of the box;
/// it is the default embedder of both backends. It captures shared words and phrases, not
/// meaning: "car" and "automobile" are unrelated to it. Use a model-backed embedder
/// (`agent_provider::OpenAiEmbedder`, `agent_provider::OllamaEmbedder`) when synonyms matter.
///
/// How a text becomes a vector:
///
/// 1. split into words with [`tokenize`](crate::tokenize) (Unicode word boundaries,
///    lowercased);
/// 2. every word `w` is the feature `"w:" + w` with weight 1, every adjacent pair `a b` the
///    feature `"p:" + a + " " + b` with weight 0.5;
/// 3. each feature is hashed with 64-bit FNV-1a followed by the SplitMix64 finalizer (fixed
///    constants, no per-process randomness); the hash modulo the dimension picks the
///    component, its top bit the sign (signed feature hashing, which keeps collisions from
///    piling up in one direction), and the weight is added there;
/// 4. the vector is L2-normalized. A text with no words (empty, punctuation only) gives the
///    all-zero vector, never NaN.
///
/// The output depends only on the text and the dimension: the same on every run, machine
/// and platform. Its [model name](EmbeddingProvider::model) is `hashing-v1-<dimensions>`
/// (`hashing-v1-384` by default); stores record it, and a change to the algorithm would get
/// a new name (`hashing-v2-…`) so old stores refuse the new vectors instead of mixing them.
///
/// ```
/// use agent_memory::HashingEmbedder;
/// use agent_op::EmbeddingProvider;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let embedder = HashingEmbedder::new();
/// assert_eq!(embedder.model(), "hashing-v1-384");
/// let a = embedder.embed("The cat sat on the mat").await.unwrap();
/// let b = embedder.embed("the CAT sat on the mat!").await.unwrap();
/// assert_eq!(a, b); // case and punctuation do not matter
/// let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
/// assert!((norm - 1.0).abs() < 1e-5);
/// # });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashingEmbedder {
    dimensions: usize,
    model: String,
}

impl HashingEmbedder {
    /// A hashing embedder with [`DEFAULT_DIMENSIONS`] (384) dimensions.
    pub fn new() -> HashingEmbedder {
        HashingEmbedder {
            dimensions: DEFAULT_DIMENSIONS,
            model: model_name(DEFAULT_DIMENSIONS),
        }
    }

    /// A hashing embedder with `dimensions` dimensions (more dimensions, fewer collisions).
    /// Fails on zero.
    pub fn with_dimensions(dimensions: usize) -> Result<HashingEmbedder, EmbeddingError> {
        if dimensions == 0 {
            return Err(EmbeddingError::InvalidConfig(
                "a hashing embedder needs at least one dimension".to_owned(),
            ));
        }
        Ok(HashingEmbedder {
            dimensions,
            model: model_name(dimensions),
        })
    }

    /// Embeds `text` synchronously (what [`EmbeddingProvider::embed`] returns).
    pub fn embed_now(&self, text: &str) -> Vec<f32> {
        let mut vector = vec![0.0f32; self.dimensions];
        let mut previous: Option<String> = None;
        let mut feature = String::new();
        for word in tokenize(text) {
            feature.clear();
            feature.push_str("w:");
            feature.push_str(&word);
            self.add(&mut vector, &feature, WORD_WEIGHT);
            if let Some(prev) = &previous {
                feature.clear();
                feature.push_str("p:");
                feature.push_str(prev);
                feature.push(' ');
                feature.push_str(&word);
                self.add(&mut vector, &feature, PAIR_WEIGHT);
            }
            previous = Some(word);
        }
        normalize(&mut vector);
        vector
    }

    fn add(&self, vector: &mut [f32], feature: &str, weight: f32) {
        let hash = splitmix64(fnv1a64(feature.as_bytes()));
        // Lossless: the remainder is below `dimensions`, a usize.
        let index = (hash % self.dimensions as u64) as usize;
        let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
        vector[index] += sign * weight;
    }
}

impl Default for HashingEmbedder {
    fn default() -> HashingEmbedder {
        HashingEmbedder::new()
    }
}

impl EmbeddingProvider for HashingEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
        Box::pin(async move { Ok(self.embed_now(text)) })
    }

    fn embed_batch<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbeddingError>> {
        Box::pin(async move { Ok(texts.iter().map(|t| self.embed_now(t)).collect()) })
    }
}

fn model_name(dimensions: usize) -> String {
    format!("hashing-v1-{dimensions}")
}

/// 64-bit FNV-1a.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The SplitMix64 finalizer: spreads FNV's weak high bits over the whole word.
fn splitmix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Scales `vector` to unit length; leaves an all-zero vector as it is.
fn normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 && norm.is_finite() {
        for x in vector {
            *x /= norm;
        }
    }
}

/// An embedder that maps every text to the all-zero vector. For tests: stores work, but
/// vector similarity carries no information (it is 0 for every pair), so only keyword search
/// (SQLite) can find anything. Its model name is `zero-<dimensions>`.
///
/// ```
/// use agent_memory::ZeroEmbedder;
/// use agent_op::EmbeddingProvider;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let embedder = ZeroEmbedder::new(4);
/// assert_eq!(embedder.embed("anything").await.unwrap(), vec![0.0; 4]);
/// assert_eq!(embedder.model(), "zero-4");
/// # });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZeroEmbedder {
    dimensions: usize,
    model: String,
}

impl ZeroEmbedder {
    /// A zero embedder of `dimensions` dimensions.
    pub fn new(dimensions: usize) -> ZeroEmbedder {
        ZeroEmbedder {
            dimensions,
            model: format!("zero-{dimensions}"),
        }
    }
}

impl EmbeddingProvider for ZeroEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn embed<'a>(&'a self, _text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
        Box::pin(async move { Ok(vec![0.0; self.dimensions]) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_reference_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn empty_text_is_the_zero_vector() {
        let e = HashingEmbedder::new();
        for text in ["", "   ", "!!! ... ***", "\"'"] {
            let v = e.embed_now(text);
            assert_eq!(v.len(), 384);
            assert!(
                v.iter().all(|x| *x == 0.0),
                "{text:?} gave a non-zero vector"
            );
        }
    }

    #[test]
    fn zero_dimensions_are_refused() {
        assert!(HashingEmbedder::with_dimensions(0).is_err());
        assert_eq!(
            HashingEmbedder::with_dimensions(16).map(|e| e.model),
            Ok("hashing-v1-16".to_owned())
        );
    }
}
