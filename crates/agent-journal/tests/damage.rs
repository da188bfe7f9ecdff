//! A damaged journal never replays a different result: a recorded run (a `par`, a `race`
//! whose loser is cut off, a `timeout` that cuts a call off, model and tool calls,
//! `op::now`, `op::random`) is journaled to JSON Lines and to SQLite, then every byte of the
//! file is flipped (several bit patterns) and the file is cut at every offset. Each damaged
//! copy either opens and replays to the recorded value, under both interpreters, with no
//! provider and no tools configured, or is refused with a typed error: a `JournalError`
//! opening or reading it, or a run that stops with a divergence or a journal error. Never a
//! different value, never `Internal`, never a panic.
//!
//! A copy whose entries read back exactly as recorded replays as the undamaged journal did
//! (checked once); every other copy that opens is replayed. The copies are spread over two
//! threads, each writing its own file (in `/dev/shm` where there is one: the SQLite sweep
//! opens some sixty thousand databases).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_interp_seq::{Config, Outcome, RunError};
use agent_journal::{Entry, Fsync, Journal, JournalError, JsonlJournal, SqliteJournal};
use agent_op::{BoxFuture, FnTool, Op, Prompt, Response, ToolError, op};
use agent_provider::ScriptedProvider;
use serde_json::{Value, json};

fn ask(q: &'static str) -> Op<(), String> {
    op::infer_raw("m", Prompt::new().user(q)).map(|r| r.content)
}

/// The recorded run: one of each thing a journal holds that decides a result.
fn program() -> Op<(), String> {
    agent_op::op! {
        let t <- op::now();
        let r <- op::random();
        let plan <- ask("plan");
        let doubled <- op::tool("double", json!({"n": 21}));
        let both <- op::par(vec![
            ask("left"),
            op::tool("double", json!({"n": 2})).map(|r| format!("{r:?}")),
        ]);
        // The concurrent interpreter records the fast branch winning and the slow one cut
        // off mid-call; the sequential one records the slow branch winning.
        let won <- op::race(vec![
            op::tool("double", json!({"n": 1, "ms": 150})).map(|r| format!("slow {r:?}")),
            ask("fast"),
        ]);
        let cut <- op::timeout(
            Duration::from_millis(20),
            op::tool("double", json!({"n": 5, "ms": 10_000})),
        );
        op::pure(format!("{t}|{r}|{plan}|{doubled:?}|{both:?}|{won}|{cut:?}"))
    }
}

/// What the recording runs with; replays get `Config::new()`.
fn live_config() -> Config {
    let provider = ScriptedProvider::from_fn(|_, prompt: &Prompt| {
        let last = prompt.messages.last().map(|m| m.content().to_owned());
        Ok(Response::text(format!(
            "reply to {}",
            last.unwrap_or_default()
        )))
    });
    let double = FnTool::new("double", "doubles n", json!({}), |args: Value| async move {
        tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0))).await;
        match args["n"].as_i64() {
            Some(n) => Ok(json!(n * 2)),
            None => Err(ToolError::invalid_arguments("n must be a number")),
        }
    });
    Config::new()
        .provider(provider)
        .tool(double)
        .trace_id("damaged-run-1")
}

/// How the damaged copies ended.
#[derive(Default, Debug)]
struct Tally {
    /// Refused with a `JournalError` when opened or read.
    refused_on_open: usize,
    /// Read back exactly as recorded (the damage was in bytes that hold nothing).
    unchanged: usize,
    /// Replays (two per copy) stopped with a divergence or a journal error.
    refused_on_replay: usize,
    /// Replays that gave the recorded value.
    replayed: usize,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.refused_on_open += other.refused_on_open;
        self.unchanged += other.unchanged;
        self.refused_on_replay += other.refused_on_replay;
        self.replayed += other.replayed;
    }
}

/// A journal of entries already read: what a damaged copy's replays read from.
struct Read(Vec<Entry>);

impl Journal for Read {
    fn describe(&self) -> String {
        "the damaged copy".to_owned()
    }

    fn entries(&self) -> BoxFuture<'_, Result<Vec<Entry>, JournalError>> {
        let entries = self.0.clone();
        Box::pin(async move { Ok(entries) })
    }

    fn append(&self, _: Vec<Entry>) -> BoxFuture<'_, Result<(), JournalError>> {
        unreachable!("a replay appends nothing")
    }
}

/// Replays `entries` under both interpreters with nothing configured: each must give
/// `expected` or stop with a divergence or a journal error.
async fn replay_both(entries: Vec<Entry>, expected: &str, what: &str, tally: &mut Tally) {
    let (config, journal) = (Config::new(), Read(entries));
    let seq = agent_interp_seq::replay(&config, &journal, (), program()).await;
    let par = agent_interp_par::replay(&config, &journal, (), program()).await;
    for (interpreter, outcome) in [("seq", seq), ("par", par)] {
        match check(outcome, expected) {
            Ok(true) => tally.replayed += 1,
            Ok(false) => tally.refused_on_replay += 1,
            Err(why) => panic!("{what}, replayed by {interpreter}: {why}"),
        }
    }
}

/// `Ok(true)`: the recorded value; `Ok(false)`: a typed refusal; `Err`: anything else.
fn check(outcome: Result<Outcome<(), String>, RunError>, expected: &str) -> Result<bool, String> {
    match outcome {
        Ok(outcome) if outcome.value == expected => Ok(true),
        Ok(outcome) => Err(format!(
            "replayed a different value without an error:\n  {}\n  recorded {expected}",
            outcome.value
        )),
        Err(e) if e.divergence().is_some() || e.journal_error().is_some() => Ok(false),
        Err(e) => Err(format!("an untyped refusal ({:?}): {e}", e.kind())),
    }
}

/// Every damaged copy of `original`: each byte XORed with each of `patterns`, then the file
/// cut at every offset; numbered, so workers can share them out.
fn damages<'a>(
    original: &'a [u8],
    patterns: &'a [u8],
) -> impl Iterator<Item = (String, Vec<u8>)> + 'a {
    let flips = (0..original.len()).flat_map(move |offset| {
        patterns.iter().map(move |&pattern| {
            let mut damaged = original.to_vec();
            damaged[offset] ^= pattern;
            (format!("byte {offset} ^ {pattern:#04x}"), damaged)
        })
    });
    let cuts =
        (0..original.len()).map(|length| (format!("cut at {length}"), original[..length].to_vec()));
    flips.chain(cuts)
}

/// Writes `bytes` at `path` with no SQLite side files left from the copy before.
fn write_fresh(path: &Path, bytes: &[u8]) {
    for side in ["-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(side);
        let _ = std::fs::remove_file(name);
    }
    std::fs::write(path, bytes).unwrap();
}

/// A directory for the damaged copies: in memory where the machine has `/dev/shm`.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

/// Runs every damaged copy of `original` through `read` (which opens the copy at the path
/// it is given and reads its entries) and replays those that read back differently from
/// `recorded`, on two threads.
fn sweep<R, Fut>(
    original: &[u8],
    patterns: &[u8],
    recorded: &[Entry],
    expected: &str,
    read: R,
) -> Tally
where
    R: Fn(PathBuf) -> Fut + Sync,
    Fut: Future<Output = Result<Vec<Entry>, JournalError>>,
{
    const WORKERS: usize = 2;
    let read = &read;
    let tallies: Vec<Tally> = std::thread::scope(|threads| {
        let workers: Vec<_> = (0..WORKERS)
            .map(|worker| {
                threads.spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    let dir = scratch();
                    let path = dir.path().join("damaged");
                    let mut tally = Tally::default();
                    let mine = damages(original, patterns).skip(worker).step_by(WORKERS);
                    for (what, damaged) in mine {
                        write_fresh(&path, &damaged);
                        runtime.block_on(async {
                            match read(path.clone()).await {
                                Err(_) => tally.refused_on_open += 1,
                                Ok(entries) if entries == recorded => tally.unchanged += 1,
                                Ok(entries) => {
                                    replay_both(entries, expected, &what, &mut tally).await
                                }
                            }
                        });
                    }
                    tally
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let mut total = Tally::default();
    for tally in tallies {
        total.add(tally);
    }
    total
}

#[tokio::test]
async fn a_damaged_json_lines_journal_replays_the_recorded_value_or_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recorded.jsonl");
    let journal = Arc::new(JsonlJournal::open(&path, Fsync::Never).unwrap());
    let outcome = agent_interp_par::run_durable(&live_config(), journal.clone(), (), program())
        .await
        .unwrap();
    drop(journal);
    let expected = outcome.value;
    assert!(expected.contains("reply to fast"), "{expected}");
    assert!(expected.contains("Err(TimedOut"), "{expected}");
    let original = std::fs::read(&path).unwrap();
    // Undamaged, it replays with nothing configured (no provider, no tools).
    let recorded = JsonlJournal::read(&path).unwrap();
    let mut tally = Tally::default();
    replay_both(recorded.clone(), &expected, "undamaged", &mut tally).await;
    assert_eq!(tally.replayed, 2, "{tally:?}");

    const PATTERNS: [u8; 8] = [0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80];
    let tally = sweep(
        &original,
        &PATTERNS,
        &recorded,
        &expected,
        |path| async move { JsonlJournal::open(&path, Fsync::Never)?.entries().await },
    );
    eprintln!("JSON Lines, {} bytes: {tally:?}", original.len());
    // Every flip is caught when the file is read (by a checksum, the syntax or the header),
    // but those of the last newline, which make the last entry a torn line: dropped, so the
    // replay runs out of journal.
    let flips = original.len() * PATTERNS.len();
    assert_eq!(tally.refused_on_open, flips - PATTERNS.len(), "{tally:?}");
    assert_eq!(tally.replayed, 0, "{tally:?}");
}

#[tokio::test]
async fn a_damaged_sqlite_journal_replays_the_recorded_value_or_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recorded.db");
    let journal = Arc::new(SqliteJournal::open(&path).await.unwrap());
    let outcome = agent_interp_seq::run_durable(&live_config(), journal.clone(), (), program())
        .await
        .unwrap();
    let recorded = journal.entries().await.unwrap();
    Arc::try_unwrap(journal).unwrap().close().await.unwrap();
    let expected = outcome.value;
    assert!(expected.contains("slow Ok"), "{expected}");
    let original = std::fs::read(&path).unwrap();
    let mut tally = Tally::default();
    replay_both(recorded.clone(), &expected, "undamaged", &mut tally).await;
    assert_eq!(tally.replayed, 2, "{tally:?}");

    const PATTERNS: [u8; 2] = [0x01, 0xff];
    let tally = sweep(
        &original,
        &PATTERNS,
        &recorded,
        &expected,
        |path| async move {
            let journal = SqliteJournal::open(&path).await?;
            let entries = journal.entries().await;
            journal.close().await?;
            entries
        },
    );
    eprintln!("SQLite, {} bytes: {tally:?}", original.len());
    // Most of the file is free space, so most flips change nothing; the rest are refused.
    assert!(
        tally.unchanged > 0 && tally.refused_on_open > 0,
        "{tally:?}"
    );
}
