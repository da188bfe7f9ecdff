//! The pgvector extension: finding it in the database, creating it when it is missing, and
//! what its version allows.

use std::fmt;

use sqlx::PgConnection;

use super::retry::DbError;

/// The oldest pgvector with HNSW indexes.
const MIN_VERSION: Version = Version(0, 5, 0);

/// The first pgvector with iterative index scans (`hnsw.iterative_scan`), which keep a
/// filtered HNSW scan going until enough rows pass the filter.
const ITERATIVE_SCAN_VERSION: Version = Version(0, 8, 0);

/// Why the pgvector extension (`vector`) cannot be used: the cause of the
/// [`MemoryError::Storage`](agent_op::MemoryError::Storage) that
/// [`PostgresBuilder::connect`](super::PostgresBuilder::connect) returns (reach it with
/// [`source`](std::error::Error::source) and `downcast_ref`).
#[derive(Debug)]
#[non_exhaustive]
pub enum PgvectorError {
    /// The server has no pgvector: `vector` is not among its available extensions.
    NotInstalled {
        /// The database connected to.
        database: String,
    },
    /// pgvector is installed on the server but not created in the database, and creating
    /// it failed — typically because the role may not create extensions (pgvector is not a
    /// trusted extension: it takes a superuser, or the database owner where an
    /// administrator allowed it).
    CannotCreate {
        /// The database connected to.
        database: String,
        /// What `CREATE EXTENSION vector` answered.
        cause: sqlx::Error,
    },
    /// The database has a pgvector older than 0.5.0, which has no HNSW index.
    TooOld {
        /// The installed version.
        version: String,
    },
}

impl fmt::Display for PgvectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgvectorError::NotInstalled { database } => write!(
                f,
                "the PostgreSQL server of database `{database}` has no pgvector extension \
                 (`vector`): install pgvector {MIN_VERSION} or later on the server (for \
                 example the postgresql-<version>-pgvector package)"
            ),
            PgvectorError::CannotCreate { database, .. } => write!(
                f,
                "the pgvector extension (`vector`) is installed on the server but not \
                 created in database `{database}`, and this role could not create it: run \
                 `CREATE EXTENSION vector;` in that database as a superuser"
            ),
            PgvectorError::TooOld { version } => write!(
                f,
                "pgvector {version} is too old: HNSW indexes need {MIN_VERSION} or later \
                 (upgrade it on the server, then run `ALTER EXTENSION vector UPDATE;`)"
            ),
        }
    }
}

impl std::error::Error for PgvectorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PgvectorError::CannotCreate { cause, .. } => Some(cause),
            _ => None,
        }
    }
}

/// pgvector as found in the database.
#[derive(Clone, Debug)]
pub(super) struct Pgvector {
    /// The schema holding its type and operators (it must be on every connection's
    /// `search_path`).
    pub(super) schema: String,
    /// Its version (`extversion`).
    pub(super) version: String,
}

impl Pgvector {
    /// Whether HNSW scans can continue until enough rows pass a filter.
    pub(super) fn has_iterative_scan(&self) -> bool {
        Version::parse(&self.version) >= ITERATIVE_SCAN_VERSION
    }
}

/// Finds pgvector in the database `conn` is connected to, creating it if the server has it
/// but the database does not; refuses versions without HNSW.
pub(super) async fn ensure(conn: &mut PgConnection, database: &str) -> Result<Pgvector, DbError> {
    let found = match created(conn).await? {
        Some(found) => found,
        None => {
            let available: Option<(Option<String>,)> = sqlx::query_as(
                "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'",
            )
            .fetch_optional(&mut *conn)
            .await?;
            if available.is_none() {
                return Err(PgvectorError::NotInstalled {
                    database: database.to_owned(),
                }
                .into());
            }
            if let Err(cause) = sqlx::query("CREATE EXTENSION IF NOT EXISTS vector")
                .execute(&mut *conn)
                .await
            {
                // Another connection may have created it meanwhile.
                if created(conn).await?.is_none() {
                    return Err(PgvectorError::CannotCreate {
                        database: database.to_owned(),
                        cause,
                    }
                    .into());
                }
            }
            created(conn).await?.ok_or_else(|| {
                DbError::Corrupt("CREATE EXTENSION vector succeeded but left no extension".into())
            })?
        }
    };
    if Version::parse(&found.version) < MIN_VERSION {
        return Err(PgvectorError::TooOld {
            version: found.version,
        }
        .into());
    }
    Ok(found)
}

/// pgvector as created in the database, if it is.
async fn created(conn: &mut PgConnection) -> Result<Option<Pgvector>, DbError> {
    let row: Option<(String, String)> = sqlx::query_as(
        "SELECT n.nspname::text, e.extversion FROM pg_extension e \
         JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'",
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|(schema, version)| Pgvector { schema, version }))
}

/// A version as `major.minor.patch`; missing or unreadable parts count as 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u32, u32, u32);

impl Version {
    fn parse(text: &str) -> Version {
        let mut parts = text.split('.').map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().unwrap_or(0)
        });
        Version(
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        )
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(Version::parse("0.8.2"), Version(0, 8, 2));
        assert!(Version::parse("0.10.0") > Version::parse("0.8.2"));
        assert!(Version::parse("0.4.4") < MIN_VERSION);
        assert!(Version::parse("0.5.0") >= MIN_VERSION);
        assert_eq!(Version::parse("1.0.0-rc1"), Version(1, 0, 0));
        assert_eq!(Version::parse("garbage"), Version(0, 0, 0));
        let old = Pgvector {
            schema: "public".into(),
            version: "0.7.4".into(),
        };
        assert!(!old.has_iterative_scan());
        let new = Pgvector {
            version: "0.8.0".into(),
            ..old
        };
        assert!(new.has_iterative_scan());
    }
}
