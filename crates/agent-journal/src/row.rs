//! Reading an entry back from a database row (SQLite and PostgreSQL store the same columns).

use agent_op::Cause;
use agent_op::journal::{Entry, EntryKind, JournalError, Key, Sealed};

/// The columns every entry query selects, in this order.
pub(crate) const COLUMNS: &str =
    "position, branch, seq, kind, fingerprint, request, result, checksum";

/// The entry of a row (the `index`th of its query) whose [`COLUMNS`] `number` and `text`
/// read, checked against its checksum. Bytes read from a database are never trusted: a
/// column of the wrong type, invalid text or a number out of range is
/// [`JournalError::Malformed`] naming the row.
pub(crate) fn entry_of(
    journal: &str,
    index: usize,
    number: impl Fn(usize) -> Result<i64, Cause>,
    text: impl Fn(usize) -> Result<String, Cause>,
) -> Result<Entry, JournalError> {
    let at = match number(0) {
        Ok(position) => format!("row {position}"),
        Err(_) => format!("entry {} (its position unreadable)", index + 1),
    };
    let bad = |cause: Cause| JournalError::Malformed {
        journal: journal.to_owned(),
        at: at.clone(),
        cause,
    };
    let other = |what: String| bad(Cause::new(std::io::Error::other(what)));
    let text = |i: usize| text(i).map_err(bad);
    let number = |i: usize| number(i).map_err(bad);
    let kind = text(3)?;
    let kind = EntryKind::parse(&kind).ok_or_else(|| other(format!("unknown kind `{kind}`")))?;
    let seq = number(2)?;
    let checksum = number(7)?;
    let sealed = Sealed {
        key: Key {
            branch: text(1)?,
            seq: u64::try_from(seq).map_err(|_| other(format!("negative seq {seq}")))?,
        },
        kind,
        fingerprint: text(4)?,
        request: text(5)?,
        result: text(6)?,
        checksum: u32::try_from(checksum)
            .map_err(|_| other(format!("checksum {checksum} out of range")))?,
    };
    sealed.open(journal, &at)
}

/// [`entry_of`] a row sqlx read.
#[cfg(feature = "postgres")]
pub(crate) fn entry_of_sqlx<R>(journal: &str, index: usize, row: &R) -> Result<Entry, JournalError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    entry_of(
        journal,
        index,
        |i| row.try_get::<i64, _>(i).map_err(Cause::new),
        |i| row.try_get::<String, _>(i).map_err(Cause::new),
    )
}
