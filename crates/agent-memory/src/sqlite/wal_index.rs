//! Whether anything was committed to the database since a moment, without a query.
//!
//! A search first brings the vector copy up to date ([`cache::sync`](super::cache::sync)): a
//! read transaction and two queries, each a round trip to sqlx's connection thread, about
//! 0.2 ms together, which is more than the approximate search itself. Most searches follow no
//! write at all. In WAL mode every commit, by any connection of any process, updates the
//! *wal-index header* at the start of the `-shm` file before other connections can see it:
//! SQLite's readers compare that header to decide whether their snapshot is current
//! (format: <https://www.sqlite.org/walformat.html>, "The WAL-Index Header"). The header
//! changes with every commit (`mxFrame` grows, `iChange` counts, a WAL reset draws new
//! salts), so an unchanged header means nothing was committed: reading 96 bytes replaces
//! the transaction.
//!
//! The check is conservative: a header that cannot be read, is not initialized, or whose two
//! copies differ (a writer mid-update) counts as changed. The journal mode cannot leave WAL
//! while this handle's connections are open (that needs the only connection), so commits
//! cannot bypass the header.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Bytes of one copy of the wal-index header.
const HEADER: usize = 48;
/// `iVersion`, the header's first field (native byte order): the one wal-index version.
const VERSION: u32 = 3_007_000;
/// Offset of `isInit` (1 once the header is valid).
const IS_INIT: usize = 12;

/// The wal-index header as read at one moment: equal marks mean no commit in between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark([u8; HEADER]);

/// Where the wal-index of the database at `db` lives: `<db>-shm`.
pub(crate) fn shm_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-shm");
    PathBuf::from(name)
}

/// The header of the wal-index at `shm` now; `None` when it cannot be told (no such file,
/// too short, not initialized, another version, or caught mid-update).
pub(crate) fn mark(shm: &Path) -> Option<Mark> {
    let mut bytes = [0u8; 2 * HEADER];
    std::fs::File::open(shm).ok()?.read_exact(&mut bytes).ok()?;
    let (first, second) = bytes.split_at(HEADER);
    let version = u32::from_ne_bytes(first[..4].try_into().ok()?);
    if first != second || version != VERSION || first[IS_INIT] != 1 {
        return None;
    }
    let mut mark = [0u8; HEADER];
    mark.copy_from_slice(first);
    Some(Mark(mark))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(change: u32, frames: u32) -> Vec<u8> {
        let mut copy = vec![0u8; HEADER];
        copy[..4].copy_from_slice(&VERSION.to_ne_bytes());
        copy[8..12].copy_from_slice(&change.to_ne_bytes());
        copy[IS_INIT] = 1;
        copy[16..20].copy_from_slice(&frames.to_ne_bytes());
        let mut both = copy.clone();
        both.extend_from_slice(&copy);
        both.extend_from_slice(&[0u8; 40]);
        both
    }

    #[test]
    fn only_a_whole_initialized_header_is_a_mark() {
        let dir = tempfile::tempdir().unwrap();
        let shm = shm_path(&dir.path().join("m.db"));
        assert_eq!(shm.file_name().unwrap(), "m.db-shm");
        assert_eq!(mark(&shm), None, "no file");
        std::fs::write(&shm, header(1, 10)).unwrap();
        let one = mark(&shm).expect("a valid header");
        assert_eq!(mark(&shm), Some(one), "unchanged");
        std::fs::write(&shm, header(2, 11)).unwrap();
        assert_ne!(mark(&shm), Some(one), "a commit changes it");

        let mut torn = header(3, 12);
        torn[HEADER + 16] ^= 1;
        std::fs::write(&shm, &torn).unwrap();
        assert_eq!(mark(&shm), None, "copies differ: a writer is mid-update");
        let mut fresh = header(3, 12);
        fresh[IS_INIT] = 0;
        fresh[HEADER + IS_INIT] = 0;
        std::fs::write(&shm, &fresh).unwrap();
        assert_eq!(mark(&shm), None, "not initialized");
        std::fs::write(&shm, &header(3, 12)[..50]).unwrap();
        assert_eq!(mark(&shm), None, "too short");
        let mut other = header(3, 12);
        other[0] ^= 0xff;
        other[HEADER] ^= 0xff;
        std::fs::write(&shm, &other).unwrap();
        assert_eq!(mark(&shm), None, "another version");
    }
}
