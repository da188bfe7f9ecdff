//! `LocalEmbedder` with the real all-MiniLM-L6-v2 (fetched into `target/models/` on first
//! use, see `support/minilm.rs`): the same vectors as sentence-transformers, paraphrases
//! recalled far better than by the keyword-like hashing embedder, and model folders that
//! are missing a file or hold a broken one refused with an error naming the file.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use agent_memory::{HashingEmbedder, InMemoryBackend, LocalEmbedder, LocalModelError};
use agent_op::{EmbeddingProvider, MemoryBackend, NewMemory, check_embedding};
use serde_json::Value;

#[path = "support/minilm.rs"]
mod minilm;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// The model, loaded once for the binary; `None` when it cannot be fetched here.
fn embedder() -> Option<LocalEmbedder> {
    static EMBEDDER: OnceLock<Option<LocalEmbedder>> = OnceLock::new();
    EMBEDDER
        .get_or_init(|| minilm::dir().map(|dir| LocalEmbedder::load(dir).expect("the model loads")))
        .clone()
}

/// Cosine similarity, summed in f64 (in f32 a vector's cosine with itself can exceed 1).
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn assert_unit(v: &[f32]) {
    check_embedding(v, 384).expect("a valid vector");
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
}

#[tokio::test]
async fn vectors_match_sentence_transformers() {
    let Some(embedder) = embedder() else { return };
    assert_eq!(embedder.model(), "local:all-MiniLM-L6-v2");
    assert_eq!(embedder.dimensions(), 384);
    assert_eq!(embedder.max_seq_length(), 256);

    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{FIXTURES}/minilm_reference.json")).unwrap(),
    )
    .unwrap();
    let sentences = fixture["sentences"].as_array().unwrap();
    assert!(sentences.len() >= 5);
    let texts: Vec<String> = sentences
        .iter()
        .map(|s| s["text"].as_str().unwrap().to_owned())
        .collect();
    let batch = embedder.embed_batch(&texts).await.expect("embed the batch");
    assert_eq!(batch.len(), texts.len());
    for ((sentence, text), batched) in sentences.iter().zip(&texts).zip(&batch) {
        let reference: Vec<f32> = sentence["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        let single = embedder.embed(text).await.expect("embed one text");
        assert_unit(&single);
        let to_reference = cosine(&single, &reference);
        let to_batch = cosine(&single, batched);
        let shown: String = text.chars().take(40).collect();
        println!(
            "sentence-transformers vs ours: cosine {to_reference:.9} (1 - cosine {:.1e}), \
             largest difference {:.1e}; batch vs single: 1 - cosine {:.1e}: {shown:?}",
            1.0 - to_reference,
            max_difference(&single, &reference),
            1.0 - to_batch
        );
        assert!(to_reference >= 0.99, "{to_reference} for {text:?}");
        assert!(to_batch > 0.99999, "{to_batch} for {text:?}");
    }
}

fn corpus() -> Vec<String> {
    std::fs::read_to_string(format!("{FIXTURES}/paraphrase_corpus.txt"))
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

fn queries() -> Vec<(String, String)> {
    std::fs::read_to_string(format!("{FIXTURES}/paraphrase_queries.tsv"))
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (query, target) = l.split_once('\t').expect("query<TAB>target");
            (query.to_owned(), target.to_owned())
        })
        .collect()
}

/// The share of queries whose target is among the top 5 results.
async fn recall_at_5(
    embedder: Arc<dyn EmbeddingProvider>,
    corpus: &[String],
    queries: &[(String, String)],
) -> f64 {
    let store = InMemoryBackend::builder()
        .embedder(embedder)
        .build()
        .unwrap();
    let memories = corpus
        .iter()
        .map(|content| NewMemory {
            content: content.clone(),
            context: String::new(),
            tags: vec![],
        })
        .collect();
    store.store_batch(memories).await.expect("store the corpus");
    let mut found = 0;
    for (query, target) in queries {
        let hits = store.search(query, 5).await.expect("search");
        if hits.iter().any(|hit| hit.entry.content == *target) {
            found += 1;
        }
    }
    found as f64 / queries.len() as f64
}

#[tokio::test]
async fn paraphrases_are_recalled_far_better_than_by_keywords() {
    let Some(embedder) = embedder() else { return };
    let corpus = corpus();
    let queries = queries();
    assert!(corpus.len() >= 300 && queries.len() >= 40);
    for (_, target) in &queries {
        assert!(corpus.contains(target), "{target:?} is not in the corpus");
    }
    let semantic = recall_at_5(Arc::new(embedder), &corpus, &queries).await;
    let keyword = recall_at_5(Arc::new(HashingEmbedder::new()), &corpus, &queries).await;
    println!(
        "recall@5 over {} paraphrase queries and {} sentences: local:all-MiniLM-L6-v2 {semantic:.3}, hashing-v1-384 {keyword:.3}",
        queries.len(),
        corpus.len()
    );
    assert!(semantic >= 0.8, "semantic recall@5 {semantic}");
    assert!(
        semantic >= keyword + 0.3,
        "semantic {semantic} vs keyword {keyword}"
    );
}

#[tokio::test]
async fn empty_and_wordless_texts_are_the_embedding_of_the_special_tokens() {
    let Some(embedder) = embedder() else { return };
    let empty = embedder.embed("").await.expect("the empty text embeds");
    assert_unit(&empty);
    // Whitespace and control characters leave no token either: `[CLS] [SEP]` again.
    for text in ["   ", "\n\t", "\u{0}"] {
        let v = embedder.embed(text).await.expect("embeds");
        assert!(cosine(&v, &empty) > 0.99999, "{text:?}");
    }
    let words = embedder.embed("words").await.unwrap();
    assert!(cosine(&words, &empty) < 0.99);
}

#[tokio::test]
async fn long_texts_are_cut_at_max_seq_length() {
    let Some(embedder) = embedder() else { return };
    // One token per word: 300 and 50,000 words both reach the model as their first 254.
    let short = "memory ".repeat(300);
    let long = "memory ".repeat(50_000);
    let vectors = embedder
        .embed_batch(&[short, long, "x".repeat(1_000_000)])
        .await
        .expect("long texts embed");
    for v in &vectors {
        assert_unit(v);
    }
    assert!(cosine(&vectors[0], &vectors[1]) > 0.99999);
}

#[test]
fn embedding_outside_a_runtime_works() {
    let Some(embedder) = embedder() else { return };
    let texts = vec![
        "a cat".to_owned(),
        "a kitten".to_owned(),
        "a tax form".to_owned(),
    ];
    let v = embedder
        .clone()
        .with_batch_size(2)
        .embed_batch_now(&texts)
        .expect("embeds");
    assert_eq!(v.len(), 3);
    assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]));
    let one_by_one = embedder.with_batch_size(1).embed_batch_now(&texts).unwrap();
    for (a, b) in v.iter().zip(&one_by_one) {
        assert!(cosine(a, b) > 0.99999);
    }
}

/// A copy of the model folder (files hard-linked when possible, so nothing large is
/// copied) inside `target/`, without `leave_out`.
fn copy_without(model: &Path, leave_out: &str) -> tempfile::TempDir {
    let scratch = model.parent().unwrap();
    let copy = tempfile::tempdir_in(scratch).unwrap();
    for file in [
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "modules.json",
        "sentence_bert_config.json",
        "1_Pooling/config.json",
    ] {
        if file == leave_out {
            continue;
        }
        let to = copy.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        if std::fs::hard_link(model.join(file), &to).is_err() {
            std::fs::copy(model.join(file), &to).unwrap();
        }
    }
    copy
}

fn load_error(dir: &Path) -> LocalModelError {
    LocalEmbedder::load(dir).expect_err("the folder must be refused")
}

#[test]
fn a_missing_file_is_named() {
    let Some(model) = minilm::dir() else { return };
    for file in [
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "1_Pooling/config.json",
    ] {
        let copy = copy_without(&model, file);
        let error = load_error(copy.path());
        assert!(
            matches!(&error, LocalModelError::MissingFile { path } if path == &copy.path().join(file)),
            "{error:?}"
        );
        assert!(error.to_string().contains(file), "{error}");
    }
    let nowhere = PathBuf::from("/nonexistent/model");
    assert_eq!(
        load_error(&nowhere),
        LocalModelError::MissingFile {
            path: nowhere.join("config.json")
        }
    );
}

#[test]
fn optional_files_may_be_missing() {
    let Some(model) = minilm::dir() else { return };
    // Without sentence_bert_config.json: the position embeddings' 512 tokens.
    let copy = copy_without(&model, "sentence_bert_config.json");
    let embedder = LocalEmbedder::load(copy.path()).expect("loads");
    assert_eq!(embedder.max_seq_length(), 512);
    // Without modules.json: mean pooling, no normalization (a plain transformer folder).
    let copy = copy_without(&model, "modules.json");
    let embedder = LocalEmbedder::load(copy.path()).expect("loads");
    let v = embedder
        .embed_batch_now(&["a plain model".to_owned()])
        .unwrap();
    check_embedding(&v[0], 384).unwrap();
    let norm = v[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() > 0.01, "not normalized: {norm}");
}

#[test]
fn broken_files_are_typed_errors() {
    let Some(model) = minilm::dir() else { return };
    let cases: [(&str, &[u8], &str); 6] = [
        ("config.json", b"{ not json", "invalid"),
        ("config.json", b"{\"model_type\": \"bert\"}", "invalid"),
        (
            "config.json",
            b"{\"model_type\": \"roberta\"}",
            "unsupported",
        ),
        ("tokenizer.json", b"{\"version\": \"1.0\"}", "invalid"),
        (
            "model.safetensors",
            b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ",
            "invalid",
        ),
        (
            "1_Pooling/config.json",
            b"{\"pooling_mode_mean_tokens\": true, \"pooling_mode_max_tokens\": true}",
            "unsupported",
        ),
    ];
    for (file, content, kind) in cases {
        // A new file, not one hard-linked to the model's.
        let copy = copy_without(&model, file);
        let path = copy.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        let error = load_error(copy.path());
        assert_eq!(error.path(), path, "{error:?}");
        match (kind, &error) {
            ("invalid", LocalModelError::InvalidFile { .. })
            | ("unsupported", LocalModelError::Unsupported { .. }) => {}
            _ => panic!("{file} holding {content:?}: {error:?}"),
        }
        assert!(error.to_string().contains(file), "{error}");
    }

    // Weights cut short: the header promises more than the file holds.
    let copy = copy_without(&model, "model.safetensors");
    let weights = std::fs::read(model.join("model.safetensors")).unwrap();
    std::fs::write(
        copy.path().join("model.safetensors"),
        &weights[..weights.len() / 2],
    )
    .unwrap();
    let error = load_error(copy.path());
    assert!(
        matches!(error, LocalModelError::InvalidFile { cause: Some(_), .. }),
        "{error:?}"
    );
    assert!(std::error::Error::source(&error).is_some());
}
