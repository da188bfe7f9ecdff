//! Local embedding throughput: `embed.local_minilm`, sentences per second of
//! `LocalEmbedder` running all-MiniLM-L6-v2 on this machine's CPU, 320 generated English
//! sentences of 6–28 words in batches of 32 (the median of 3 rounds after a warm-up).
//!
//! The model is fetched into `target/models/` on first use by the project's fetcher
//! (`xtask/src/model.rs`, as `cargo xtask model fetch` does); where it cannot be had, one
//! `SKIPPED:` line goes to stderr and nothing is reported.
//!
//! No baseline (`null`): the same model through Python (sentence-transformers) needs torch,
//! a 6 GB install with its CUDA libraries, far from cheap enough to set up for a benchmark.
//! `docs/MEMORY.md` gives its figure, measured once on this machine on the same sentences.

use std::path::PathBuf;
use std::time::Duration;

use agent_memory::LocalEmbedder;

#[path = "../../../xtask/src/model.rs"]
mod model;

const NAME: &str = "embed.local_minilm";
const SENTENCES: usize = 320;
const BATCH: usize = 32;
const ROUNDS: usize = 3;

const SUBJECTS: &[&str] = &[
    "the engineer",
    "our neighbour",
    "a small child",
    "the old dog",
    "my manager",
    "the city council",
    "a tired nurse",
    "the new student",
    "the pilot",
    "her grandmother",
];
const VERBS: &[&str] = &[
    "repaired",
    "forgot about",
    "carefully examined",
    "wrote a report on",
    "complained about",
    "paid for",
    "photographed",
    "argued over",
    "quickly sold",
    "painted",
];
const OBJECTS: &[&str] = &[
    "the broken heating system",
    "a red bicycle",
    "the quarterly budget",
    "an unexpected letter from the bank",
    "the garden fence",
    "the late train to the coast",
    "a cheap second-hand laptop",
    "the noisy washing machine",
    "the results of the blood test",
    "a recipe for lemon cake",
];
const TAILS: &[&str] = &[
    "before the storm arrived",
    "while everyone else was asleep",
    "because the deadline was tomorrow",
    "after a long and difficult week at work",
    "without telling anyone in the family",
    "during the school holidays",
    "on a cold Monday morning in January",
    "although nobody had asked them to",
    "as the sun went down over the harbour",
    "",
];

/// `n` sentences from a fixed xorshift sequence: the same text on every run.
fn sentences(n: usize) -> Vec<String> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut pick = |options: &[&'static str]| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        options[(state % options.len() as u64) as usize]
    };
    (0..n)
        .map(|i| {
            let mut s = format!("{} {} {}", pick(SUBJECTS), pick(VERBS), pick(OBJECTS));
            let tail = pick(TAILS);
            if !tail.is_empty() {
                s.push(' ');
                s.push_str(tail);
            }
            if i % 3 == 0 {
                s.push_str(", and then ");
                s.push_str(pick(SUBJECTS));
                s.push(' ');
                s.push_str(pick(VERBS));
                s.push(' ');
                s.push_str(pick(OBJECTS));
            }
            s.push('.');
            s
        })
        .collect()
}

fn main() {
    if !bench_kit::enabled(NAME) {
        return;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = match model::fetch(&target) {
        Ok(dir) => dir,
        Err(model::FetchError::Unavailable(why) | model::FetchError::Failed(why)) => {
            eprintln!("SKIPPED: {NAME} needs the model all-MiniLM-L6-v2: {why}");
            return;
        }
    };
    let embedder = LocalEmbedder::load(&dir)
        .expect("the fetched model loads")
        .with_batch_size(BATCH);
    let texts = sentences(SENTENCES);
    let run = || -> Duration {
        let (elapsed, vectors) = bench_kit::time(|| embedder.embed_batch_now(&texts));
        assert_eq!(vectors.expect("embeds").len(), SENTENCES);
        elapsed
    };
    run();
    let samples: Vec<Duration> = (0..ROUNDS).map(|_| run()).collect();
    let seconds = bench_kit::median_per(&samples, SENTENCES as f64, bench_kit::secs);
    bench_kit::report(NAME, 1.0 / seconds, "sentences/s", f64::NAN);
}
