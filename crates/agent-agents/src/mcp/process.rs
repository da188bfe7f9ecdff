//! The process group of a spawned MCP server, killed as a whole on every way out.
//!
//! A server is often a launcher (`npx`, `uvx`, a shell script) whose real work runs in a
//! grandchild; killing the direct child alone leaves that grandchild running. So each server
//! starts as the leader of its own process group, and the group is killed with `SIGKILL`
//! when the last holder of its [`ProcessGroup`] lets go: the handshake timing out or failing,
//! the future that was starting it being dropped (a Ctrl-C during startup), or the server and
//! every toolbox made from it being dropped. The kill is a synchronous system call, so it
//! happens even when the runtime is shutting down. [`kill_spawned_servers`] covers the one
//! way out that runs no destructor: `std::process::exit`.

use std::sync::{Mutex, MutexGuard};

/// The groups spawned and not yet killed, for [`kill_spawned_servers`].
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<i32>> {
    // A panic while holding the lock leaves the list itself intact.
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A server's process group; killed when dropped.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    /// The group's id: the leader's pid (`None` where groups are not used).
    id: Option<i32>,
}

impl ProcessGroup {
    /// The group led by the child with process id `leader`.
    pub(crate) fn led_by(leader: Option<u32>) -> ProcessGroup {
        let id = leader.and_then(|pid| i32::try_from(pid).ok());
        if let Some(id) = id {
            live().push(id);
        }
        ProcessGroup { id }
    }

    /// The group's id, which is its leader's process id.
    pub(crate) fn id(&self) -> Option<u32> {
        self.id.and_then(|id| u32::try_from(id).ok())
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            live().retain(|&g| g != id);
            kill_group(id);
        }
    }
}

/// Kills the process group of every MCP server this process spawned that is still running.
///
/// Dropping a server (and the toolboxes made from it) does this for that server; call this
/// before `std::process::exit`, which runs no destructors.
pub fn kill_spawned_servers() {
    let groups = std::mem::take(&mut *live());
    for id in groups {
        kill_group(id);
    }
}

#[cfg(unix)]
fn kill_group(id: i32) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    // The leader is not reaped until rmcp's own cleanup waits for it, so its id (the group's)
    // cannot have been reused by another group. ESRCH (already gone) is the usual answer.
    let _ = killpg(Pid::from_raw(id), Signal::SIGKILL);
}

#[cfg(not(unix))]
fn kill_group(_id: i32) {
    // Without process groups the SDK's own cleanup kills the child it spawned.
}

/// Makes `command`'s child the leader of a new process group.
pub(crate) fn own_group(command: &mut tokio::process::Command) {
    #[cfg(unix)]
    command.process_group(0);
    #[cfg(not(unix))]
    let _ = command;
}
