//! Journals written by earlier releases of this format version keep working: the files in
//! `tests/fixtures` were recorded (under the concurrent interpreter) before entries kept
//! their request and result as raw JSON text, and must still read, replay and resume to the
//! value they recorded, under both interpreters, with nothing configured. Written again,
//! their entries come out byte for byte as they were.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_interp_seq::{Config, Outcome};
use agent_journal::{Entry, Fsync, Journal, JsonlJournal, SqliteJournal};
use agent_op::{Op, Prompt, op};
use serde_json::json;

fn ask(q: &'static str) -> Op<(), String> {
    op::infer_raw("m", Prompt::new().user(q)).map(|r| r.content)
}

/// The program the fixtures recorded (a `par`, a `race` whose slow branch was cut off, a
/// `timeout` that cut a tool call off, model and tool calls, `op::now`, `op::random`, a
/// checkpoint).
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
        let won <- op::race(vec![
            op::tool("double", json!({"n": 1, "ms": 150})).map(|r| format!("slow {r:?}")),
            ask("fast"),
        ]);
        let cut <- op::timeout(
            Duration::from_millis(20),
            op::tool("double", json!({"n": 5, "ms": 10_000})),
        );
        op::checkpoint("end");
        op::pure(format!("{t}|{r}|{plan}|{doubled:?}|{both:?}|{won}|{cut:?}"))
    }
}

const JSONL_VALUE: &str = "2026-11-27 13:26:55.995320647 UTC|6282048087646919264|reply to plan|\
                           Ok(Number(42))|[\"reply to left\", \"Ok(Number(4))\"]|reply to fast|\
                           Err(TimedOut { limit: 20ms })";
const SQLITE_VALUE: &str = "2026-11-27 13:26:56.049256872 UTC|502122245300553939|reply to plan|\
                            Ok(Number(42))|[\"reply to left\", \"Ok(Number(4))\"]|reply to fast|\
                            Err(TimedOut { limit: 20ms })";

/// Entries in each fixture: the run, the clock, the random value, five calls, the race's
/// winner, the cut-off call and the checkpoint.
const ENTRIES: usize = 11;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A copy of the fixture `name` in `dir`: opening a journal may write beside it.
fn copy(name: &str, dir: &Path) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(fixture(name), &to).unwrap();
    to
}

/// What replaying `journal` gives under both interpreters, with nothing configured.
async fn replay_both(journal: &dyn Journal) -> [Outcome<(), String>; 2] {
    let config = Config::new();
    let seq = agent_interp_seq::replay(&config, journal, (), program()).await;
    let par = agent_interp_par::replay(&config, journal, (), program()).await;
    [seq.unwrap(), par.unwrap()]
}

/// The effects a replay of a fixture answers from it: the clock, the random value, five
/// calls and the cut-off call (the race's winner decides a fork, not an effect).
const REPLAYED: u64 = 8;

fn check(outcomes: [Outcome<(), String>; 2], expected: &str) {
    for outcome in outcomes {
        assert_eq!(outcome.value, expected);
        assert_eq!(outcome.journal.unwrap().replayed, REPLAYED);
    }
}

#[tokio::test]
async fn an_earlier_json_lines_journal_replays_and_is_written_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy("journal-v2.jsonl", dir.path());
    let entries = JsonlJournal::read(&path).unwrap();
    assert_eq!(entries.len(), ENTRIES);
    let journal = JsonlJournal::open(&path, Fsync::Never).unwrap();
    check(replay_both(&journal).await, JSONL_VALUE);

    let again = dir.path().join("again.jsonl");
    let rewritten = JsonlJournal::open(&again, Fsync::Never).unwrap();
    rewritten.append(entries).await.unwrap();
    drop(rewritten);
    assert_eq!(
        std::fs::read_to_string(&again).unwrap(),
        std::fs::read_to_string(fixture("journal-v2.jsonl")).unwrap()
    );
}

#[tokio::test]
async fn an_earlier_sqlite_journal_replays_resumes_and_copies_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy("journal-v2.db", dir.path());
    let journal = Arc::new(SqliteJournal::open(&path).await.unwrap());
    let entries = journal.entries().await.unwrap();
    assert_eq!(entries.len(), ENTRIES);
    check(replay_both(&*journal).await, SQLITE_VALUE);
    // Resuming the finished run answers everything from it and commits nothing new.
    let resumed = agent_interp_par::resume(&Config::new(), journal.clone(), (), program())
        .await
        .unwrap();
    assert_eq!(resumed.value, SQLITE_VALUE);
    assert_eq!(resumed.journal.unwrap().live, 0);
    assert_eq!(journal.entries().await.unwrap(), entries);

    // Its entries, written to a new journal of each kind, read back as they were.
    let copied = SqliteJournal::open(dir.path().join("copy.db"))
        .await
        .unwrap();
    copied.append(entries.clone()).await.unwrap();
    assert_eq!(copied.entries().await.unwrap(), entries);
    let lines = JsonlJournal::open(dir.path().join("copy.jsonl"), Fsync::Never).unwrap();
    lines.append(entries.clone()).await.unwrap();
    drop(lines);
    let read: Vec<Entry> = JsonlJournal::read(dir.path().join("copy.jsonl")).unwrap();
    assert_eq!(read, entries);
}
