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
//! handle does anything else; live operations never wait for each other. A drain waits for
//! the server at most the statement timeout and [`DRAIN_GRACE`] (see [`Orphans::new`]), so
//! an operation a caller gave up on (dropped by its own timeout) frees the handle even when
//! the server went silent.
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
//!
//! A lease that finishes does not give its connection back to sqlx's pool, which pings every
//! connection given back (a round trip on a task of its own: three per search, 0.3 ms of a
//! 1.5 ms search on two cores, where they compete with the search's own statements). It
//! keeps it [`Warm`], still checked out, for the handle's next operation. One idle for
//! [`PING_AFTER_IDLE`] is pinged before it is used, as the pool checks its own, and the
//! others, idle longer, go back to the pool; a connection that left the pool
//! [`BACK_TO_THE_POOL_AFTER`] ago goes back the next time it is finished with or taken, so
//! the pool's maximum lifetime still applies to busy connections. Between operations a
//! handle thus holds the connections its last operations used (at most its pool size, out
//! of reach of the pool's idle timeout) until its next operation,
//! [`close`](super::PostgresBackend::close) or the drop of its last clone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, Postgres};
use sqlx::{Connection, Executor};
use tokio::runtime::Handle;
use tokio::sync::Notify;

/// How long a connection may sit idle and still be used without a ping: a warm one idle
/// that long is pinged before use, and the others under it go back to the pool, which pings
/// them before lending them again (`before_acquire` in `open`).
pub(super) const PING_AFTER_IDLE: Duration = Duration::from_millis(500);

/// How long a connection is kept warm, busy or not, after it left the pool: the first time
/// it is finished with or taken after that, it goes back, so the pool's checks (a ping,
/// `max_lifetime`) see a busy connection at least this often.
pub(super) const BACK_TO_THE_POOL_AFTER: Duration = Duration::from_secs(10);

/// Connections of one handle (shared by its clones) that operations finished with moments
/// ago, still checked out of the pool (see the module docs).
#[derive(Debug)]
pub(super) struct Warm {
    state: Mutex<WarmState>,
    /// The runtime the handle was opened on: sqlx spawns a task for every pooled connection
    /// it gets back, so warm connections dropped outside any runtime are dropped inside this
    /// one.
    runtime: Option<Handle>,
    /// Leases waiting for the pool: a connection that finishes then goes to the pool, not
    /// here, or they could wait for ever (once every connection is checked out).
    waiting: AtomicUsize,
    /// Leases served warm, for tests.
    #[cfg(test)]
    pub(super) served: AtomicUsize,
}

#[derive(Debug, Default)]
struct WarmState {
    /// Oldest first: (connection, when it left the pool, when its last operation ended).
    conns: Vec<(PoolConnection<Postgres>, Instant, Instant)>,
    /// Closed: every connection goes back to the pool.
    closed: bool,
}

impl Warm {
    /// An empty set for a handle opened on `runtime`.
    pub(super) fn new(runtime: Option<Handle>) -> Warm {
        Warm {
            state: Mutex::default(),
            runtime,
            waiting: AtomicUsize::new(0),
            #[cfg(test)]
            served: AtomicUsize::new(0),
        }
    }

    /// How many connections are warm, for tests.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.state().conns.len()
    }

    /// The runtime to give connections back on: the current one, else the handle's.
    fn runtime(&self) -> Option<Handle> {
        Handle::try_current().ok().or_else(|| self.runtime.clone())
    }

    fn state(&self) -> MutexGuard<'_, WarmState> {
        // Nothing panics while the lock is held, and the state is valid after any step.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The connection used last, when it left the pool, and whether it has been idle for
    /// [`PING_AFTER_IDLE`] (then the others, idle longer still, go back to the pool, which
    /// checks them before lending them again). One that left the pool
    /// [`BACK_TO_THE_POOL_AFTER`] ago goes back too, and the next is taken.
    fn take(&self) -> Option<(PoolConnection<Postgres>, Instant, bool)> {
        let mut back = Vec::new();
        let mut state = self.state();
        let taken = loop {
            let Some((conn, from_pool, ended)) = state.conns.pop() else {
                break None;
            };
            if from_pool.elapsed() >= BACK_TO_THE_POOL_AFTER {
                back.push(conn);
                continue;
            }
            let idle = ended.elapsed() >= PING_AFTER_IDLE;
            if idle {
                back.extend(state.conns.drain(..).map(|(conn, ..)| conn));
            }
            break Some((conn, from_pool, idle));
        };
        drop(state);
        drop(back);
        taken
    }

    /// Keeps `conn`, which left the pool at `from_pool`, for the next operation; or gives it
    /// back to the pool when the set is closed, the connection is due back, or an operation
    /// waits for the pool.
    fn put(&self, conn: PoolConnection<Postgres>, from_pool: Instant) {
        if from_pool.elapsed() >= BACK_TO_THE_POOL_AFTER {
            return;
        }
        let mut state = self.state();
        if state.closed {
            return;
        }
        state.conns.push((conn, from_pool, Instant::now()));
        drop(state);
        // After the push (SeqCst): a lease that registered as waiting after this load
        // looks here again before it waits (`Lease::acquire`).
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let conns = std::mem::take(&mut self.state().conns);
            drop(conns);
        }
    }

    /// Registers a lease about to wait for the pool, until the guard is dropped.
    fn waiting(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(self)
    }

    /// Gives every warm connection back to the pool, and every later one as it finishes.
    pub(super) fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        let conns = std::mem::take(&mut state.conns);
        drop(state);
        drop(conns);
    }
}

/// A warm connection being pinged: closed, not given back to the pool, if dropped before
/// it answered (the future cancelled, or the deadline passed: a peer gone silent never
/// answers), since the pool's own ping would wait for the lost answer.
struct Checking(Option<PoolConnection<Postgres>>);

impl Checking {
    /// The connection, if it answers a ping by `deadline`.
    async fn alive_by(
        mut self,
        deadline: tokio::time::Instant,
    ) -> Option<PoolConnection<Postgres>> {
        let conn = self.0.as_mut()?;
        let pinged = tokio::time::timeout_at(deadline, conn.ping()).await;
        if matches!(pinged, Ok(Ok(()))) {
            self.0.take()
        } else {
            None
        }
    }
}

impl Drop for Checking {
    fn drop(&mut self) {
        if let Some(conn) = self.0.as_mut() {
            conn.close_on_drop();
        }
    }
}

/// A lease waiting for the pool (see [`Warm::waiting`]).
struct Waiting<'a>(&'a Warm);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        let conns = std::mem::take(&mut self.state().conns);
        if conns.is_empty() {
            return;
        }
        let runtime = self.runtime();
        let _inside = runtime.as_ref().map(Handle::enter);
        drop(conns);
    }
}

/// How much longer than the statement timeout an orphan's drain waits for the server's
/// answers before it gives the connection up: the server cancels the statement in flight at
/// its timeout, so a server that answers at all has answered by then.
pub(super) const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// The orphans of one handle (shared by its clones).
#[derive(Debug, Default)]
pub(super) struct Orphans {
    pending: AtomicUsize,
    settled: Notify,
    /// How long a drain may wait for the server (see [`Orphans::new`]).
    drain_within: Option<Duration>,
}

impl Orphans {
    /// The orphans of a handle whose statements the server cancels after
    /// `statement_timeout`: a drain then waits at most that plus [`DRAIN_GRACE`]. A server
    /// gone silent (a partition, a host that vanished) never answers the drain's ping; the
    /// drain closes the connection at that deadline, so the handle's later operations wait
    /// that long at most instead of for ever. By then the server has cancelled the
    /// statement in flight unless it had already finished, so the dropped operation still
    /// took effect entirely or not at all. (A bulk load's statements run unlimited, but a
    /// load is a transaction: one whose `COMMIT` was never sent is rolled back when the
    /// server sees the connection gone.) With no statement timeout a drain waits however
    /// long the statement runs.
    pub(super) fn new(statement_timeout: Option<Duration>) -> Orphans {
        Orphans {
            drain_within: statement_timeout.map(|t| t.saturating_add(DRAIN_GRACE)),
            ..Orphans::default()
        }
    }

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
    /// When the connection left the pool.
    from_pool: Instant,
    orphans: Arc<Orphans>,
    warm: Arc<Warm>,
    /// `BEGIN` may have run and `COMMIT` has not answered yet.
    in_transaction: bool,
}

impl Lease {
    /// Waits for the handle's orphans, then takes a warm connection, or one from `pool`.
    pub(super) async fn acquire(
        pool: &PgPool,
        orphans: &Arc<Orphans>,
        warm: &Arc<Warm>,
    ) -> Result<Lease, sqlx::Error> {
        orphans.settled().await;
        // One deadline for the whole wait, as the pool's own acquire has.
        let timeout = pool.options().get_acquire_timeout();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut waiting = None;
        let (conn, from_pool) = loop {
            match warm.take() {
                Some((conn, from_pool, false)) => break (conn, from_pool),
                // Idle that long: checked as the pool checks its own (`before_acquire`).
                Some((conn, from_pool, true)) => {
                    if let Some(conn) = Checking(Some(conn)).alive_by(deadline).await {
                        break (conn, from_pool);
                    }
                }
                // Registered first, then one more look (see `Warm::put`).
                None if waiting.is_none() => waiting = Some(warm.waiting()),
                None => {
                    let acquired = tokio::time::timeout_at(deadline, pool.acquire())
                        .await
                        .map_err(|_| sqlx::Error::PoolTimedOut)??;
                    drop(waiting);
                    return Ok(Lease::new(acquired, Instant::now(), orphans, warm));
                }
            }
        };
        #[cfg(test)]
        warm.served.fetch_add(1, Ordering::Relaxed);
        Ok(Lease::new(conn, from_pool, orphans, warm))
    }

    fn new(
        conn: PoolConnection<Postgres>,
        from_pool: Instant,
        orphans: &Arc<Orphans>,
        warm: &Arc<Warm>,
    ) -> Lease {
        Lease {
            conn: Some(conn),
            from_pool,
            orphans: Arc::clone(orphans),
            warm: Arc::clone(warm),
            in_transaction: false,
        }
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

    /// The operation is done with the connection: kept warm for the next one (unless a
    /// transaction may be open: then it is drained as an orphan's is).
    pub(super) fn finish(mut self) {
        if self.in_transaction {
            return;
        }
        if let Some(conn) = self.conn.take() {
            self.warm.put(conn, self.from_pool);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        // Outside any runtime, the drain runs on the one the handle was opened on; with
        // neither (never expected: a handle is opened inside one), the connection is closed
        // without the pool, which needs a runtime to take it back.
        let Some(runtime) = self.warm.runtime() else {
            drop(conn.leak());
            return;
        };
        let ticket = Ticket::new(&self.orphans);
        let in_transaction = self.in_transaction;
        let drain_within = self.orphans.drain_within;
        runtime.spawn(async move {
            // Waits for what is in flight; then ends the transaction the operation may have
            // left open (after a `COMMIT` that did answer, this only draws a warning). A
            // broken connection fails here and is closed by the pool.
            let drain = async {
                conn.ping().await.is_ok()
                    && (!in_transaction || conn.execute("ROLLBACK").await.is_ok())
            };
            let drained = match drain_within {
                Some(limit) => tokio::time::timeout(limit, drain).await.unwrap_or(false),
                None => drain.await,
            };
            if !drained {
                // Never hand out a connection in an unknown state.
                conn.close_on_drop();
            }
            drop(conn);
            drop(ticket);
        });
    }
}
