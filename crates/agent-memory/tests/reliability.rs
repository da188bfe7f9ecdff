//! Reliability of the SQLite backend under concurrent writers, a second process writing the
//! same file, a writer killed with SIGKILL, and the locks SQLite holds on its shared memory.
//!
//! A custom harness (`harness = false`): the test binary re-executes itself as the second
//! process, selected by the `AGENT_MEMORY_CHILD` environment variable. Run with a name
//! filter as the first argument to run only matching tests.

use std::io::{BufRead, BufReader, Write};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitCode, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use agent_memory::SqliteBackend;
use agent_op::{MemoryBackend, MemoryId, NewMemory, Tag};

const CHILD_ENV: &str = "AGENT_MEMORY_CHILD";
const PATH_ENV: &str = "AGENT_MEMORY_CHILD_DB";
const COUNT_ENV: &str = "AGENT_MEMORY_CHILD_COUNT";

/// Writers in these tests wait at most 1 ms inside SQLite for a lock, so contention surfaces
/// as SQLITE_BUSY and must be absorbed by the backend's retries, not by SQLite's busy
/// handler.
const TINY_BUSY_TIMEOUT: Duration = Duration::from_millis(1);

/// The longest wait for one line of a child's output before the test fails (instead of
/// hanging CI on a stalled child).
const LINE_TIMEOUT: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn open(path: &Path) -> SqliteBackend {
    SqliteBackend::builder(path)
        .busy_timeout(TINY_BUSY_TIMEOUT)
        .open()
        .await
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()))
}

fn memory(content: String, tag: &str) -> NewMemory {
    NewMemory {
        content,
        context: "reliability test".to_owned(),
        tags: vec![Tag::from(tag)],
    }
}

/// The content the SIGKILL child writes as its `n`th entry (64 KiB, checkable).
fn killed_content(n: u64) -> String {
    let line = format!("entry {n} of the killed writer; ");
    line.repeat(64 * 1024 / line.len() + 1)
}

// ---------------------------------------------------------------------------------------
// Child processes

/// `writer`: writes COUNT entries tagged "child" from 2 tasks (searching now and then),
/// printing `id <id>` after each commit, `ready` once open and `done` at the end.
/// `loop`: writes 64 KiB entries forever, printing `id <id> <n>` after each commit.
/// `dms`: opens no store; prints which process holds SQLite's lock on the database's shared
/// memory (see [`dms_holder`]).
fn child(mode: &str) -> ExitCode {
    let path = PathBuf::from(std::env::var(PATH_ENV).unwrap_or_default());
    #[cfg(unix)]
    if mode == "dms" {
        return match dms_holder(&path) {
            Ok(holder) => {
                println!(
                    "{}",
                    holder.map_or("free".to_owned(), |pid| pid.to_string())
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("child failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let rt = runtime();
    let result = rt.block_on(async move {
        let store = open(&path).await;
        let mut out = std::io::stdout();
        writeln!(out, "ready")?;
        out.flush()?;
        match mode {
            "writer" => {
                let count: usize = std::env::var(COUNT_ENV)
                    .ok()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(100);
                let tasks: Vec<_> = (0..2)
                    .map(|t| {
                        let store = store.clone();
                        tokio::spawn(async move {
                            for i in (t..count).step_by(2) {
                                let id = store
                                    .store(memory(format!("child fact {i} about rivers"), "child"))
                                    .await?;
                                println!("id {id}");
                                if i % 10 == 0 {
                                    store.search("fact about rivers", 5).await?;
                                }
                            }
                            Ok::<_, agent_op::MemoryError>(())
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await
                        .map_err(std::io::Error::other)?
                        .map_err(std::io::Error::other)?;
                }
                println!("done");
            }
            "loop" => {
                for n in 0u64.. {
                    let id = store
                        .store(memory(killed_content(n), "killed"))
                        .await
                        .map_err(std::io::Error::other)?;
                    // Printed only after the commit returned.
                    println!("id {id} {n}");
                }
            }
            other => return Err(std::io::Error::other(format!("unknown child mode {other}"))),
        }
        Ok::<_, std::io::Error>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("child failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The process holding a lock that conflicts with taking the "DMS" byte of `<db>-shm` for
/// writing, if any. Every process with the database open in WAL mode holds a read lock on
/// that byte (offset 128: SQLite's `UNIX_SHM_DMS`); a process that can take it for writing
/// believes it is alone and reinitializes the shared memory (under any live mapping
/// elsewhere: SIGBUS). Asked from another process, since a process's own POSIX locks
/// never conflict with each other.
#[cfg(unix)]
fn dms_holder(db: &Path) -> Result<Option<i32>, std::io::Error> {
    use nix::fcntl::{FcntlArg, fcntl};
    use nix::libc;
    let mut shm = db.as_os_str().to_owned();
    shm.push("-shm");
    let file = match std::fs::File::open(PathBuf::from(shm)) {
        Ok(file) => file,
        // No shared memory at all (the last connection removed it): nobody has it mapped.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut lock = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 128,
        l_len: 1,
        l_pid: 0,
    };
    fcntl(&file, FcntlArg::F_GETLK(&mut lock))?;
    Ok((lock.l_type != libc::F_UNLCK as libc::c_short).then_some(lock.l_pid))
}

/// A child process, killed if the test panics before it is waited for.
struct ChildProcess {
    child: Child,
}

impl ChildProcess {
    /// Sends SIGKILL and reaps the child; its exit status.
    fn kill(&mut self) -> std::process::ExitStatus {
        self.child.kill().expect("kill the child");
        self.child.wait().expect("wait for the child")
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().expect("wait for the child")
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // Already reaped, or killed now: either way nothing is left running.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn spawn_child(mode: &str, path: &Path, count: usize) -> (ChildProcess, ChildLines) {
    let mut child = Command::new(std::env::current_exe().expect("test binary path"))
        .env(CHILD_ENV, mode)
        .env(PATH_ENV, path)
        .env(COUNT_ENV, count.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child process");
    let stdout = child.stdout.take().expect("child stdout");
    (ChildProcess { child }, ChildLines::read(stdout))
}

/// A child's stdout, read line by line on a thread of its own so that every wait for a line
/// has a timeout. Only complete lines (ending in a newline) are passed on: a line cut off by
/// a kill is not trusted.
struct ChildLines {
    lines: mpsc::Receiver<String>,
}

impl ChildLines {
    fn read(stdout: ChildStdout) -> ChildLines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let Some(line) = buf.strip_suffix(b"\n") else {
                            break;
                        };
                        if tx.send(String::from_utf8_lossy(line).into_owned()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        ChildLines { lines: rx }
    }

    /// The next line; `None` once the child closed its output. Panics if no line comes
    /// within [`LINE_TIMEOUT`].
    fn next(&self, what: &str) -> Option<String> {
        match self.lines.recv_timeout(LINE_TIMEOUT) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                panic!("{what}: the child printed nothing for {LINE_TIMEOUT:?}")
            }
        }
    }

    /// Every line until the child closes its output (it has exited or been killed).
    fn rest(&self, what: &str) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(line) = self.next(what) {
            out.push(line);
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Tests

/// 8 tasks, each with its own handle (its own write connection) on one file, all writing at
/// once with a 1 ms busy timeout: every entry lands, no "database is locked" reaches them.
fn eight_handles_write_concurrently() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    runtime().block_on(async {
        let first = open(&path).await;
        let mut tasks = Vec::new();
        for t in 0..8 {
            let path = path.clone();
            tasks.push(tokio::spawn(async move {
                let store = open(&path).await;
                let mut ids = Vec::new();
                for i in 0..40 {
                    let content = format!("handle {t} wrote fact {i} about mountains");
                    match store.store(memory(content, &format!("h{t}"))).await {
                        Ok(id) => ids.push(id),
                        Err(e) => return Err(format!("handle {t}, store {i}: {e}")),
                    }
                    if i % 8 == 0 {
                        store
                            .search("fact about mountains", 5)
                            .await
                            .map_err(|e| e.to_string())?;
                    }
                }
                Ok(ids)
            }));
        }
        let mut all: Vec<MemoryId> = Vec::new();
        for task in tasks {
            let ids = task
                .await
                .expect("task panicked")
                .unwrap_or_else(|e| panic!("{e}"));
            all.extend(ids);
        }
        assert_eq!(all.len(), 320);
        assert_eq!(first.count().await.expect("count"), 320);
        for id in &all {
            assert!(
                first.get(id).await.expect("get").is_some(),
                "{id} is missing"
            );
        }
        for t in 0..8 {
            let tagged = first
                .by_tags(&[Tag::from(format!("h{t}"))])
                .await
                .expect("by_tags");
            assert_eq!(tagged.len(), 40);
        }
        assert!(first.integrity_check().await.expect("integrity").is_sound());
    });
}

/// This process and a child process write the same file at the same time (1 ms busy
/// timeout on both sides): all entries of both land and both see them.
fn two_processes_write_one_file() {
    const EACH: usize = 150;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let rt = runtime();
    let store = rt.block_on(open(&path));
    let (mut child, lines) = spawn_child("writer", &path, EACH);
    let first = lines.next("starting the writer");
    assert_eq!(first.as_deref(), Some("ready"), "the child did not start");
    let reader = std::thread::spawn(move || lines.rest("the writer child"));

    let mine: Vec<MemoryId> = rt.block_on(async {
        let tasks: Vec<_> = (0..4)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut ids = Vec::new();
                    for i in (t..EACH).step_by(4) {
                        let content = format!("parent fact {i} about rivers");
                        ids.push(store.store(memory(content, "parent")).await?);
                        if i % 10 == 0 {
                            store.search("fact about rivers", 5).await?;
                        }
                    }
                    Ok::<_, agent_op::MemoryError>(ids)
                })
            })
            .collect();
        let mut ids = Vec::new();
        for task in tasks {
            ids.extend(
                task.await
                    .expect("task panicked")
                    .unwrap_or_else(|e| panic!("parent: {e}")),
            );
        }
        ids
    });
    let output = reader.join().expect("reader thread");
    let status = child.wait();
    assert!(
        status.success(),
        "the child failed ({status}); its stderr is above"
    );
    assert_eq!(output.last().map(String::as_str), Some("done"));
    let theirs: Vec<MemoryId> = output
        .iter()
        .filter_map(|l| l.strip_prefix("id "))
        .map(MemoryId::from)
        .collect();
    assert_eq!(theirs.len(), EACH);
    assert_eq!(mine.len(), EACH);
    rt.block_on(async {
        assert_eq!(store.count().await.expect("count"), 2 * EACH as u64);
        for id in mine.iter().chain(&theirs) {
            assert!(
                store.get(id).await.expect("get").is_some(),
                "{id} is missing"
            );
        }
        assert_eq!(
            store
                .by_tags(&[Tag::from("child")])
                .await
                .expect("by_tags")
                .len(),
            EACH
        );
        assert_eq!(
            store
                .by_tags(&[Tag::from("parent")])
                .await
                .expect("by_tags")
                .len(),
            EACH
        );
        // The child's vectors reached this process's search through the change log.
        let hits = store
            .search("child fact 7 about rivers", 3)
            .await
            .expect("search");
        assert_eq!(
            hits[0].entry.content, "child fact 7 about rivers",
            "{hits:#?}"
        );
        assert!(store.integrity_check().await.expect("integrity").is_sound());
    });
}

/// Two child processes create the same new file at the same moment (WAL switch and schema
/// migration race) and write into it: both succeed and every entry lands.
fn two_processes_create_one_file_at_once() {
    const EACH: usize = 30;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("new.db");
    let children: Vec<_> = (0..2).map(|_| spawn_child("writer", &path, EACH)).collect();
    let mut ids = Vec::new();
    for (mut child, output) in children {
        let lines = output.rest("a creating child");
        let status = child.wait();
        assert!(
            status.success(),
            "a child failed ({status}); its stderr is above"
        );
        assert_eq!(lines.last().map(String::as_str), Some("done"));
        ids.extend(
            lines
                .iter()
                .filter_map(|l| l.strip_prefix("id "))
                .map(MemoryId::from),
        );
    }
    assert_eq!(ids.len(), 2 * EACH);
    runtime().block_on(async {
        let store = open(&path).await;
        assert_eq!(store.count().await.expect("count"), 2 * EACH as u64);
        for id in &ids {
            assert!(
                store.get(id).await.expect("get").is_some(),
                "{id} is missing"
            );
        }
        assert!(store.integrity_check().await.expect("integrity").is_sound());
    });
}

/// Searches, stores and another handle's close never release the locks SQLite holds on the
/// database's shared memory: another process still sees this one holding the DMS byte (so
/// it cannot reinitialize the memory this one has mapped). Opening and closing a descriptor
/// of a file SQLite has open drops all of the process's POSIX locks on it; an earlier
/// version read the `-shm` header that way and a second process then crashed this one with
/// SIGBUS.
#[cfg(unix)]
fn searches_keep_sqlite_s_shared_memory_locks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("locks.db");
    let holder = || {
        let (mut child, lines) = spawn_child("dms", &path, 0);
        let line = lines.next("asking for the DMS lock");
        assert!(child.wait().success(), "the dms child failed");
        line.expect("the dms child printed nothing")
    };
    let rt = runtime();
    let store = rt.block_on(open(&path));
    let other = rt.block_on(open(&path));
    let me = std::process::id().to_string();
    assert_eq!(holder(), me, "held once open");
    rt.block_on(async {
        for i in 0..3 {
            let content = format!("lock fact {i} about rivers");
            store.store(memory(content, "locks")).await.expect("store");
            store.search("fact about rivers", 5).await.expect("search");
            other.search("fact about rivers", 5).await.expect("search");
        }
        store.search("fact about rivers", 5).await.expect("search");
    });
    assert_eq!(holder(), me, "still held after stores and searches");
    rt.block_on(async {
        other.close().await;
        store.search("fact about rivers", 5).await.expect("search");
    });
    assert_eq!(holder(), me, "still held after another handle closed");
    rt.block_on(store.close());
    assert_eq!(holder(), "free", "released once every handle closed");
}

/// The id and sequence number of an `id <id> <n>` line of the `loop` child.
fn committed_line(line: &str) -> Option<(MemoryId, u64)> {
    let mut parts = line.strip_prefix("id ")?.split(' ');
    let id = MemoryId::from(parts.next()?);
    let n = parts.next()?.parse().ok()?;
    Some((id, n))
}

/// A child writing 64 KiB entries in a loop is killed with SIGKILL, three times over. Each
/// time every entry it reported committed — including those reported after the test stopped
/// waiting, read from the pipe after the kill — is there, byte for byte; the file passes the
/// integrity check; and every entry in the file, whatever the child was doing when it died,
/// reads back whole.
fn sigkill_mid_write_loses_nothing_committed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.db");
    let rt = runtime();
    rt.block_on(async { open(&path).await.close().await });
    let mut committed: Vec<(MemoryId, u64)> = Vec::new();
    let mut after_kill: Vec<(MemoryId, String)> = Vec::new();
    for round in 0..3 {
        let (mut child, lines) = spawn_child("loop", &path, 0);
        let what = format!("round {round}");
        let mut seen = 0;
        while seen < 40 {
            let Some(line) = lines.next(&what) else {
                panic!(
                    "{what}: the child stopped early (status {:?})",
                    child.wait()
                );
            };
            if let Some(done) = committed_line(&line) {
                committed.push(done);
                seen += 1;
            }
        }
        // SIGKILL while it is in the middle of its next writes.
        let status = child.kill();
        assert!(!status.success(), "{what}: the child was not killed");
        // Whatever it printed before dying was committed too.
        let late: Vec<(MemoryId, u64)> = lines
            .rest(&what)
            .iter()
            .filter_map(|line| committed_line(line))
            .collect();
        committed.extend(late);
        rt.block_on(async {
            let store = open(&path).await;
            assert!(
                store.integrity_check().await.expect("integrity").is_sound(),
                "{what}"
            );
            assert!(
                store
                    .corrupt_embeddings()
                    .await
                    .expect("corrupt")
                    .is_empty(),
                "{what}"
            );
            for (id, n) in &committed {
                let entry = store
                    .get(id)
                    .await
                    .expect("get")
                    .unwrap_or_else(|| panic!("{what}: committed entry {id} is gone"));
                assert!(
                    entry.content == killed_content(*n),
                    "{what}: entry {id} is damaged"
                );
            }
            // Every row in the file reads back whole: the killed writer's entries are
            // complete 64 KiB texts, the others exactly what was stored.
            let all = store.recent(usize::MAX).await.expect("scan every entry");
            assert_eq!(all.len() as u64, store.count().await.expect("count"));
            for entry in &all {
                if entry.tags == [Tag::from("killed")] {
                    let n: u64 = entry
                        .content
                        .strip_prefix("entry ")
                        .and_then(|rest| rest.split(' ').next())
                        .and_then(|n| n.parse().ok())
                        .unwrap_or_else(|| panic!("{what}: entry {} is damaged", entry.id));
                    assert!(
                        entry.content == killed_content(n),
                        "{what}: entry {} is damaged",
                        entry.id
                    );
                } else {
                    assert!(
                        after_kill.contains(&(entry.id.clone(), entry.content.clone())),
                        "{what}: unexpected entry {}: {:?}",
                        entry.id,
                        entry.tags
                    );
                }
            }
            for (id, _) in &committed {
                assert!(
                    all.iter().any(|e| &e.id == id),
                    "{what}: {id} not in the scan"
                );
            }
            // Still fully usable: write, search, prune.
            let content = format!("after kill {round}");
            let id = store
                .store(memory(content.clone(), "after"))
                .await
                .expect("store");
            after_kill.push((id, content));
            store
                .search("entry of the killed writer", 3)
                .await
                .expect("search");
            store
                .prune(&agent_op::PrunePolicy::new().max_entries(10_000))
                .await
                .expect("prune");
            store.close().await;
        });
    }
}

fn main() -> ExitCode {
    if let Ok(mode) = std::env::var(CHILD_ENV) {
        return child(&mode);
    }
    let tests: &[(&str, fn())] = &[
        (
            "eight_handles_write_concurrently",
            eight_handles_write_concurrently,
        ),
        ("two_processes_write_one_file", two_processes_write_one_file),
        (
            "two_processes_create_one_file_at_once",
            two_processes_create_one_file_at_once,
        ),
        (
            "sigkill_mid_write_loses_nothing_committed",
            sigkill_mid_write_loses_nothing_committed,
        ),
        #[cfg(unix)]
        (
            "searches_keep_sqlite_s_shared_memory_locks",
            searches_keep_sqlite_s_shared_memory_locks,
        ),
    ];
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let mut failed = Vec::new();
    let mut ran = 0;
    for &(name, test) in tests {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        ran += 1;
        let started = Instant::now();
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(test));
        let verdict = if outcome.is_ok() { "ok" } else { "FAILED" };
        println!("test {name} ... {verdict} ({:.1?})", started.elapsed());
        if outcome.is_err() {
            failed.push(name);
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed",
        if failed.is_empty() { "ok" } else { "FAILED" },
        ran - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
