//! Every [`SearchOptions`] a caller can build, checked against an exact oracle.
//!
//! [`search_options_match_an_exact_oracle`] stores entries with known vectors
//! ([`BiasedEmbedder`]: every entry is similar to every query, so every entry a filter admits
//! is a possible hit), tags and creation times, then runs generated searches: zero to three
//! tags (some carried by no entry), time bounds before, inside, between, at and after the
//! stored times, equal, inverted and at the extremes of [`Timestamp`], `k` from 0 to more
//! than the store holds, exact or not. The oracle ranks the same entries itself. Each search
//! must succeed, return `min(k, admitted entries)` distinct hits, each admitted by the
//! options, and — when exact — the oracle's best hits; approximate searches must reach a
//! mean recall@10 of 0.95. Then the same kind of searches run while other tasks store and
//! delete entries: still no error, every hit admitted, and at least as many hits as the
//! entries that stayed throughout allow.
//!
//! [`inverted_time_ranges_find_nothing`] is the scenario that once panicked the in-memory
//! store: `created_after` past `created_before` over a store large enough to be indexed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use agent_op::{MemoryEntry, MemoryError, MemoryId, SearchOptions, Tag, Timestamp};
use chrono::{DateTime, TimeDelta, Utc};

use super::churn::{BiasedEmbedder, deleter};
use super::{Factory, Fixture, T0, fresh_with, memory, ok, settled};
use crate::clock::{Clock, ManualClock};

/// Entries stored with a bulk store (in batches of [`PER_STEP`], one creation time each),
/// or one at a time without one.
const BULK_ENTRIES: usize = 4_000;
const FEW_ENTRIES: usize = 400;
/// Entries that share a creation time; the clock then moves on by [`STEP`].
const PER_STEP: usize = 50;
const STEP: Duration = Duration::from_secs(10);
/// Generated searches on the quiet store, and while others store and delete.
const QUIET_CASES: usize = 160;
const CHURN_CASES: usize = 60;
/// Tags the entries carry (see [`tags_of`]) and one no entry carries.
const TAGS: [&str; 5] = ["a", "b", "c", "rare", "absent"];

/// The tags of entry `i`: `a` on about half the entries, `b` on a third, `c` on a seventh,
/// `rare` on one in 97, from a hash of `i` so that tags and creation times are unrelated.
fn tags_of(i: usize) -> Vec<&'static str> {
    let h = mix(i as u64);
    let mut tags = Vec::new();
    if h % 2 == 0 {
        tags.push("a");
    }
    if (h >> 8) % 3 == 0 {
        tags.push("b");
    }
    if (h >> 16) % 7 == 0 {
        tags.push("c");
    }
    if (h >> 24) % 97 == 0 {
        tags.push("rare");
    }
    tags
}

/// SplitMix64's finalizer.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An entry as the oracle knows it.
struct Known {
    id: MemoryId,
    vector: Vec<f64>,
    tags: Vec<Tag>,
    created_at: Timestamp,
}

impl Known {
    /// Whether `options` admit this entry, by the rules [`SearchOptions`] documents.
    fn admitted(&self, options: &SearchOptions) -> bool {
        options.created_after.is_none_or(|t| self.created_at >= t)
            && options.created_before.is_none_or(|t| self.created_at < t)
            && options.tags.iter().all(|tag| self.tags.contains(tag))
    }
}

/// `text`'s [`BiasedEmbedder`] vector at unit length, in f64.
fn unit(text: &str) -> Vec<f64> {
    let v: Vec<f64> = BiasedEmbedder::vector(text)
        .into_iter()
        .map(f64::from)
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The oracle's ranking of the entries `options` admit for `query`: (id, similarity), best
/// first.
fn ranked<'a>(
    known: &'a [Known],
    query: &[f64],
    options: &SearchOptions,
) -> Vec<(&'a MemoryId, f64)> {
    let mut ranked: Vec<(&MemoryId, f64)> = known
        .iter()
        .filter(|e| e.admitted(options))
        .map(|e| (&e.id, cosine(&e.vector, query)))
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked
}

/// The time bounds a generated search picks from, given the first and last creation times.
fn time_points(first: Timestamp, last: Timestamp) -> Vec<Timestamp> {
    let step = TimeDelta::from_std(STEP).unwrap_or(TimeDelta::MAX);
    let span = last - first;
    let at = |offset: TimeDelta| first.checked_add_signed(offset).unwrap_or(first);
    vec![
        DateTime::<Utc>::MIN_UTC,
        DateTime::<Utc>::UNIX_EPOCH,
        at(-TimeDelta::days(3650)),
        at(-TimeDelta::seconds(1)),
        first,
        at(TimeDelta::nanoseconds(1)),
        at(step),
        at(span / 3),
        // Between two creation times, and a hair after one.
        at(span / 3 + step / 2),
        at(span / 2 + TimeDelta::nanoseconds(999)),
        at(span * 2 / 3),
        last,
        at(span + TimeDelta::nanoseconds(1)),
        at(span + TimeDelta::seconds(1)),
        at(span + TimeDelta::days(3650)),
        DateTime::<Utc>::MAX_UTC,
    ]
}

/// One generated search: its options and `k`.
fn generate(
    rng: &mut fastrand::Rng,
    points: &[Timestamp],
    entries: usize,
) -> (SearchOptions, usize) {
    let mut options = SearchOptions::new().exact(rng.u8(..4) == 0);
    for _ in 0..rng.usize(..4) {
        options = options.tag(TAGS[rng.usize(..TAGS.len())]);
    }
    let pick = |rng: &mut fastrand::Rng| points[rng.usize(..points.len())];
    match rng.u8(..6) {
        0 => {}
        1 => options = options.created_after(pick(rng)),
        2 => options = options.created_before(pick(rng)),
        // Equal bounds: an empty range.
        3 => {
            let t = pick(rng);
            options = options.created_after(t).created_before(t);
        }
        // Any two bounds: about half of them inverted.
        _ => options = options.created_after(pick(rng)).created_before(pick(rng)),
    }
    let k = match rng.u8(..8) {
        0 => 0,
        1 => 1,
        2 => rng.usize(2..10),
        3 | 4 => 10,
        5 => rng.usize(11..=entries / 4),
        6 => entries + rng.usize(1..100),
        _ => usize::MAX,
    };
    (options, k)
}

/// A fresh backend holding `bulk` known entries ([`FEW_ENTRIES`] without a bulk store), its
/// background indexing done.
async fn known_store(factory: &impl Factory, bulk: usize) -> (Fixture, ManualClock, Vec<Known>) {
    let (f, clock) = fresh_with(factory, Arc::new(BiasedEmbedder)).await;
    let entries = if f.has_bulk_store() {
        bulk
    } else {
        FEW_ENTRIES
    };
    let known = store_known(&f, &clock, entries).await;
    settled(&f).await;
    (f, clock, known)
}

/// Stores the entries the checks search: returns them as the oracle knows them.
async fn store_known(f: &Fixture, clock: &ManualClock, entries: usize) -> Vec<Known> {
    let mut known = Vec::with_capacity(entries);
    for step in 0..entries.div_ceil(PER_STEP) {
        let range = step * PER_STEP..((step + 1) * PER_STEP).min(entries);
        let memories = range
            .clone()
            .map(|i| memory(&format!("n{i}x"), &tags_of(i)))
            .collect::<Vec<_>>();
        let ids = ok(f.store_many(memories).await, "store");
        let created_at = clock.now();
        for (i, id) in range.zip(ids) {
            known.push(Known {
                id,
                vector: unit(&format!("n{i}x")),
                tags: tags_of(i).into_iter().map(Tag::from).collect(),
                created_at,
            });
        }
        clock.advance(STEP);
    }
    known
}

/// Describes a failed case so it can be rerun by hand.
fn case(n: usize, query: &str, k: usize, options: &SearchOptions) -> String {
    format!("case {n}: search_with({query:?}, {k}, {options:?})")
}

/// Checks what every search must give, whatever runs beside it: success, distinct hits,
/// each admitted by `options`, best first, at most `k`.
fn check_hits(hits: &[MemoryEntry], k: usize, options: &SearchOptions, what: &str) {
    assert!(hits.len() <= k, "{what}: {} hits for k = {k}", hits.len());
    let distinct: HashSet<&MemoryId> = hits.iter().map(|e| &e.id).collect();
    assert_eq!(distinct.len(), hits.len(), "{what}: a hit is repeated");
    for entry in hits {
        assert!(
            options.admits(entry),
            "{what}: hit {} (tags {:?}, created {}) is not admitted",
            entry.id,
            entry.tags,
            entry.created_at
        );
    }
}

/// Generated [`SearchOptions`] against an exact oracle, on a quiet store and beside stores
/// and deletes (see the [module](self) docs).
pub async fn search_options_match_an_exact_oracle(factory: &impl Factory) {
    let (f, clock, known) = known_store(factory, BULK_ENTRIES).await;
    let entries = known.len();
    let first = DateTime::from_timestamp(T0, 0).unwrap_or_default();
    let last = known.last().map_or(first, |e| e.created_at);
    let points = time_points(first, last);
    let b = f.backend().clone();
    let mut rng = fastrand::Rng::with_seed(44);
    let (mut recall_sum, mut recall_cases) = (0.0, 0usize);
    for n in 0..QUIET_CASES {
        let (options, k) = generate(&mut rng, &points, entries);
        // Words no entry has: a hybrid backend's ranking is its vector ranking.
        let query = format!("q{n}z");
        let what = case(n, &query, k, &options);
        let entries_hit: Vec<MemoryEntry> = b
            .search_candidates_with(&query, k, &options)
            .await
            .unwrap_or_else(|e| panic!("{what} failed: {e}"))
            .into_iter()
            .map(|c| c.hit.entry)
            .collect();
        check_hits(&entries_hit, k, &options, &what);
        let oracle = ranked(&known, &unit(&query), &options);
        assert_eq!(
            entries_hit.len(),
            k.min(oracle.len()),
            "{what}: {} hits, but {} entries are admitted",
            entries_hit.len(),
            oracle.len()
        );
        // Recall@10 with ties: a hit counts when the oracle scores it at least as high as
        // its own 10th best (less a rounding margin).
        let top = k.min(10).min(oracle.len());
        if top == 0 {
            continue;
        }
        let floor = oracle[top - 1].1 - 1e-5;
        // Every hit is admitted (checked above), so the oracle's ranking scores it.
        let scores: HashMap<&MemoryId, f64> = oracle.iter().copied().collect();
        let found = entries_hit[..top]
            .iter()
            .filter(|e| scores.get(&e.id).is_some_and(|s| *s >= floor))
            .count();
        let recall = found as f64 / top as f64;
        if options.exact {
            assert_eq!(
                found, top,
                "{what}: an exact search missed the oracle's best hits"
            );
        } else {
            recall_sum += recall;
            recall_cases += 1;
        }
    }
    if recall_cases > 0 {
        let mean = recall_sum / recall_cases as f64;
        assert!(
            mean >= 0.95,
            "approximate searches: mean recall@10 {mean:.3} over {recall_cases} cases (want ≥ 0.95)"
        );
    }
    searches_beside_churn(&f, &clock, &known, &points, entries).await;
}

/// The churn half of [`search_options_match_an_exact_oracle`]: generated searches while a
/// task stores batches, another single entries and a third deletes what they stored. The
/// entries stored before stay throughout, so a search returns at least as many hits as
/// those admit (up to `k`).
async fn searches_beside_churn(
    f: &Fixture,
    clock: &ManualClock,
    known: &[Known],
    points: &[Timestamp],
    entries: usize,
) {
    // The newcomers are created after every known entry, at one time.
    clock.advance(Duration::from_secs(3600));
    let b = f.backend().clone();
    let stop = Arc::new(AtomicBool::new(false));
    let stored = Arc::new(AtomicUsize::new(0));
    let fresh: Arc<std::sync::Mutex<Vec<MemoryId>>> = Arc::default();
    let mut tasks = Vec::new();
    for writer in 0..2usize {
        let (b, stop, stored, fresh) = (b.clone(), stop.clone(), stored.clone(), fresh.clone());
        let batch = if writer == 0 { 20 } else { 1 };
        tasks.push(tokio::spawn(async move {
            let mut j = 0usize;
            while !stop.load(Ordering::Acquire) {
                for _ in 0..batch {
                    let i = entries + writer * 1_000_000 + j;
                    j += 1;
                    let id = b.store(memory(&format!("m{i}x"), &tags_of(i))).await?;
                    stored.fetch_add(1, Ordering::AcqRel);
                    fresh
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(id);
                }
                tokio::task::yield_now().await;
            }
            Ok::<(), MemoryError>(())
        }));
    }
    {
        let stop = stop.clone();
        tasks.push(deleter(b.clone(), fresh.clone(), 45, move || {
            !stop.load(Ordering::Acquire)
        }));
    }
    let mut rng = fastrand::Rng::with_seed(46);
    let mut outcome = Ok(());
    for n in 0..CHURN_CASES {
        let (options, k) = generate(&mut rng, points, entries);
        let query = format!("r{n}z");
        let what = format!(
            "beside stores and deletes, {}",
            case(n, &query, k, &options)
        );
        let before = stored.load(Ordering::Acquire);
        let result = b.search_with(&query, k, &options).await;
        let after = stored.load(Ordering::Acquire);
        let hits: Vec<MemoryEntry> = match result {
            Ok(hits) => hits.into_iter().map(|h| h.entry).collect(),
            Err(e) => {
                outcome = Err(format!("{what} failed: {e}"));
                break;
            }
        };
        let stayed = known.iter().filter(|e| e.admitted(&options)).count();
        let checked = std::panic::catch_unwind(|| {
            check_hits(&hits, k, &options, &what);
            assert!(
                hits.len() >= k.min(stayed),
                "{what}: {} hits, though {stayed} entries admitted stayed throughout",
                hits.len()
            );
            assert!(
                hits.len() <= k.min(stayed + after),
                "{what}: {} hits, more than the {stayed} + {after} entries admitted \
                 ({before} stored when it started)",
                hits.len()
            );
        });
        if let Err(panic) = checked {
            stop.store(true, Ordering::Release);
            std::panic::resume_unwind(panic);
        }
    }
    stop.store(true, Ordering::Release);
    for task in tasks {
        match task.await {
            Ok(result) => ok(result, "a store or delete beside the searches"),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a churn task failed: {e}"),
        }
    }
    if let Err(message) = outcome {
        panic!("{message}");
    }
}

/// A time range whose start is past its end (and one whose ends are equal) finds nothing,
/// alone or with a tag, over a store large enough to be indexed: never a panic, never an
/// error.
pub async fn inverted_time_ranges_find_nothing(factory: &impl Factory) {
    let (f, _clock, known) = known_store(factory, 22_000).await;
    let b = f.backend().as_ref();
    let t10 = known[known.len() / 10].created_at;
    let t20 = known[known.len() / 5].created_at;
    let inside = SearchOptions::new().created_after(t10).created_before(t20);
    let hits = ok(b.search_with("probe", 10, &inside).await, "search in range");
    assert_eq!(
        hits.len(),
        10,
        "the range the inverted ones turn around is not empty"
    );
    for options in [
        SearchOptions::new().created_after(t20).created_before(t10),
        SearchOptions::new().created_after(t20).created_before(t20),
        SearchOptions::new()
            .tag("a")
            .created_after(t20)
            .created_before(t10),
        SearchOptions::new()
            .created_after(DateTime::<Utc>::MAX_UTC)
            .created_before(DateTime::<Utc>::MIN_UTC),
        SearchOptions::new()
            .created_after(t20)
            .created_before(t10)
            .exact(true),
    ] {
        for k in [1, 10, usize::MAX] {
            let hits = ok(b.search_with("probe", k, &options).await, "search");
            assert!(
                hits.is_empty(),
                "{options:?} with k = {k} found {} hits",
                hits.len()
            );
            let candidates = ok(
                b.search_candidates_with("probe", k, &options).await,
                "search_candidates_with",
            );
            assert!(
                candidates.is_empty(),
                "{options:?}: {} candidates",
                candidates.len()
            );
        }
    }
}
