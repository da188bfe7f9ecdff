//! Closing a sqlx connection pool so that its connections are closed when the close returns.

use std::time::{Duration, Instant};

/// How long [`close`] waits for connections still checked out (or being given back).
const WAIT: Duration = Duration::from_secs(30);
/// How often [`close`] looks again meanwhile.
const POLL: Duration = Duration::from_millis(1);

/// Closes `pool`, returning once every one of its connections is closed (or after 30 s, if
/// one is held that long: it is closed when it comes back).
///
/// sqlx's `Pool::close` (0.8) can return with connections open (sqlx issue #3217): closing
/// an idle connection gives back a permit the connection had already given back, so the
/// wait for every permit can end while a connection is still out; and a connection being
/// given back as the close begins is checked on its thread first, then put back idle after
/// the close last looked for idle ones. For SQLite such a connection keeps the file open in
/// this process, so the WAL is not checkpointed and a handle opened on the file next shares
/// its stale view of the WAL. Nothing can be taken from a closed pool, so closing again until
/// the pool is empty closes those that come back.
pub(crate) async fn close<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) {
    let deadline = Instant::now() + WAIT;
    pool.close().await;
    while pool.size() > 0 && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        pool.close().await;
    }
}
