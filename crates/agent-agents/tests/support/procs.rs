//! Which processes are alive, read from `/proc` (Linux): for tests that check a spawned
//! server and its children are gone.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

/// Whether `pid` is a running process (a zombie, dead but not yet reaped, counts as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => state(&stat).is_some_and(|s| s != 'Z' && s != 'X'),
        Err(_) => false,
    }
}

/// The running processes whose process group is `group`.
pub fn group_members(group: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let fields: Vec<&str> = after_name(&stat)?.split_whitespace().collect();
                    // After the name: state, ppid, pgrp.
                    Some(fields.first()? != &"Z" && fields.get(2)?.parse::<u32>().ok()? == group)
                })
                .unwrap_or(false)
        })
        .collect()
}

/// Waits (up to a minute, which only catches hangs) until none of `pids` is running, and says
/// which still are if some stay.
pub fn wait_gone(pids: &[u32]) -> Result<(), Vec<u32>> {
    let start = Instant::now();
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err(left);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to a minute) for `file` to hold whitespace-separated pids, and reads them.
pub fn read_pids(file: &Path) -> Vec<u32> {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            let pids: Vec<u32> = text
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if text.ends_with('\n') && !pids.is_empty() {
                return pids;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} was never written",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A shell script that starts like an MCP server launcher and never answers: it starts a
/// child, writes its own pid and the child's to `pids`, says something on stderr, and waits.
pub fn silent_server_script(pids: &Path) -> String {
    format!(
        "sleep 300 & echo \"$$ $!\" > '{}.tmp'; mv '{0}.tmp' '{0}'; echo 'silent server starting' >&2; exec sleep 300",
        pids.display()
    )
}

fn after_name(stat: &str) -> Option<&str> {
    // The name is in parentheses and may itself hold spaces or parentheses.
    Some(&stat[stat.rfind(')')? + 1..])
}

fn state(stat: &str) -> Option<char> {
    after_name(stat)?.split_whitespace().next()?.chars().next()
}
