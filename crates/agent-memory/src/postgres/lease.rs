//! Connections lent to one operation, and what a dropped operation leaves running.
//!
//! A statement sent to the server runs to its end whatever the client does: dropping an
//! operation's future while its `COMMIT` (or a single-statement write) is in flight cannot
//! take the write back — it lands a moment later. Then the handle's next operation could
//! see the store before the write, and the one after it, after: a `recent` and a `count`
//! run in a row would disagree. So every operation takes its connection through a [`Lease`]:
//! one dropped before the operation finished becomes an *orphan*, which a task drains (waits
//! for the statement in flight and the `ROLLBACK` sqlx queued for an unfinished
//! transaction, with a `ping`) before the connection goes back to the pool; and every
//! operation of the handle first waits until no orphan is left ([`Orphans::settled`]). A
//! dropped operation has thus taken effect entirely or not at all by the time the same
//! handle does anything else; live operations never wait for each other.
//!
//! Transactions are opened and committed here ([`Lease::begin`], [`Lease::commit`]), not
//! with sqlx's `Transaction`: in sqlx 0.8, a `begin` whose future is dropped after `BEGIN`
//! was sent but before its answer arrived leaves the connection inside the transaction while
//! sqlx counts none open (its guard queues a `ROLLBACK` only for a counted transaction), and
//! the pool hands that connection out again — later statements then ran inside a
//! transaction nobody committed, holding their locks (seen as a prune waiting out its
//! statement timeout on `LOCK TABLE`). A lease remembers that it may be in a transaction
//! from the moment it sends `BEGIN` until `COMMIT` has answered, and the drain of an orphan
//! that may be rolls it back.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, Postgres};
use sqlx::{Connection, Executor};
use tokio::sync::Notify;

/// The orphans of one handle (shared by its clones).
#[derive(Debug, Default)]
pub(super) struct Orphans {
    pending: AtomicUsize,
    settled: Notify,
}

impl Orphans {
    /// Waits until every orphan has been drained.
    pub(super) async fn settled(&self) {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            // Registered before the check, so a drain finishing in between still wakes us.
            notified.as_mut().enable();
            if self.pending.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One orphan, counted while it exists.
struct Ticket(Arc<Orphans>);

impl Ticket {
    fn new(orphans: &Arc<Orphans>) -> Ticket {
        orphans.pending.fetch_add(1, Ordering::AcqRel);
        Ticket(Arc::clone(orphans))
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

/// A pooled connection lent to one operation: [`finish`](Lease::finish) returns it;
/// dropped unfinished, it becomes an orphan (see the module docs).
pub(super) struct Lease {
    conn: Option<PoolConnection<Postgres>>,
    orphans: Arc<Orphans>,
    /// `BEGIN` may have run and `COMMIT` has not answered yet.
    in_transaction: bool,
}

impl Lease {
    /// Waits for the handle's orphans, then takes a connection from `pool`.
    pub(super) async fn acquire(
        pool: &PgPool,
        orphans: &Arc<Orphans>,
    ) -> Result<Lease, sqlx::Error> {
        orphans.settled().await;
        let conn = pool.acquire().await?;
        Ok(Lease {
            conn: Some(conn),
            orphans: Arc::clone(orphans),
            in_transaction: false,
        })
    }

    /// Opens a transaction (read committed).
    pub(super) async fn begin(&mut self) -> Result<(), sqlx::Error> {
        self.in_transaction = true;
        self.conn().execute("BEGIN").await?;
        Ok(())
    }

    /// Commits the transaction.
    pub(super) async fn commit(&mut self) -> Result<(), sqlx::Error> {
        self.conn().execute("COMMIT").await?;
        self.in_transaction = false;
        Ok(())
    }

    /// The connection.
    pub(super) fn conn(&mut self) -> &mut PgConnection {
        match self.conn.as_mut() {
            Some(conn) => conn,
            // Taken only by `finish` and `drop`, which consume the lease.
            None => unreachable!("a lease's connection is only taken when it ends"),
        }
    }

    /// The operation is done with the connection: back to the pool as usual.
    pub(super) fn finish(mut self) {
        self.conn.take();
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        // Without a runtime nothing can be drained; sqlx closes the connection instead.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let ticket = Ticket::new(&self.orphans);
        let in_transaction = self.in_transaction;
        runtime.spawn(async move {
            // Waits for what is in flight; then ends the transaction the operation may have
            // left open (after a `COMMIT` that did answer, this only draws a warning). A
            // broken connection fails here and is closed by the pool.
            let drained = conn.ping().await.is_ok()
                && (!in_transaction || conn.execute("ROLLBACK").await.is_ok());
            if !drained {
                // Never hand out a connection in an unknown state.
                conn.close_on_drop();
            }
            drop(conn);
            drop(ticket);
        });
    }
}
