//! Bearer API keys: a file of hashed keys, checked in constant time on every route but the
//! health checks.
//!
//! The file holds one key per line, `NAME SHA256-HEX [LIMIT…]` (blank lines and `#`
//! comments allowed), the limits being any of `concurrent=N`, `per_minute=N`,
//! `tokens_per_day=N` and `cost_per_day=USD` ([`Limits`]); [`Keys::generate`] makes a key
//! and the line to add. Only hashes are stored, so the file is no secret, and no key ever
//! appears in a response or a log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::protocol::openai;
use crate::runs::Limits;

/// Why a keys file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeysError {
    /// The file could not be read.
    #[error("cannot read the keys file {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not `NAME SHA256-HEX [LIMIT…]`.
    #[error("{path}:{line}: {problem}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line's number.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
}

/// The API keys a server accepts, by name (hashes only).
#[derive(Clone, Default)]
pub struct Keys {
    keys: Arc<Vec<(String, [u8; 32], Limits)>>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.keys.iter().map(|(n, _, _)| n.as_str()).collect();
        f.debug_struct("Keys").field("names", &names).finish()
    }
}

impl Keys {
    /// Reads the keys file at `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<Keys, KeysError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| KeysError::Io {
            path: path.to_owned(),
            source,
        })?;
        Keys::parse(&text).map_err(|(line, problem)| KeysError::Malformed {
            path: path.to_owned(),
            line,
            problem,
        })
    }

    /// Parses a keys file's text; `Err` names the first malformed line and what is wrong.
    pub fn parse(text: &str) -> Result<Keys, (usize, String)> {
        let mut keys = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(name), Some(hex)) = (parts.next(), parts.next()) else {
                return Err((i + 1, "expected `NAME SHA256-HEX [LIMIT…]`".into()));
            };
            let hash = decode_hex(hex)
                .ok_or_else(|| (i + 1, "the hash is not 64 hex digits".to_owned()))?;
            let limits =
                Limits::parse(parts).map_err(|word| (i + 1, format!("unknown limit {word}")))?;
            keys.push((name.to_owned(), hash, limits));
        }
        Ok(Keys {
            keys: Arc::new(keys),
        })
    }

    /// Accepts `key` under `name` with `limits` (for servers built in code; the key is
    /// hashed at once).
    pub fn with_key(self, name: impl Into<String>, key: &str, limits: Limits) -> Keys {
        let mut keys = (*self.keys).clone();
        keys.push((name.into(), hash(key), limits));
        Keys {
            keys: Arc::new(keys),
        }
    }

    /// A new random key for `name`: the key (shown once) and the line for the keys file.
    pub fn generate(name: &str) -> (String, String) {
        let key = format!(
            "ak_{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let line = format!("{name} {}", encode_hex(&hash(&key)));
        (key, line)
    }

    /// Each key's limits, by name.
    pub fn limits(&self) -> std::collections::HashMap<String, Limits> {
        self.keys
            .iter()
            .map(|(name, _, limits)| (name.clone(), *limits))
            .collect()
    }

    /// Whether no key is configured (every route is then open).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The name of the key `presented`, if it is one. Every stored hash is compared, in
    /// constant time, whatever matches.
    pub fn check(&self, presented: &str) -> Option<&str> {
        let presented = hash(presented);
        let mut found = None;
        for (name, stored, _) in self.keys.iter() {
            if bool::from(stored.ct_eq(&presented)) {
                found = Some(name.as_str());
            }
        }
        found
    }
}

/// The name of the key a request was authenticated with (in the request's extensions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyName(pub Option<String>);

/// The key a request presents: `Authorization: Bearer KEY` or `X-Api-Key: KEY`.
fn presented(headers: &HeaderMap) -> Option<&str> {
    if let Some(value) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        let value = value.trim();
        if value.len() > 7 && value[..7].eq_ignore_ascii_case("bearer ") {
            return Some(value[7..].trim());
        }
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The middleware: a request without a valid key gets a 401 (in the OpenAI shape on its
/// routes); health checks pass.
pub(crate) async fn authenticate(
    State(keys): State<Keys>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    // The chat page is a static file holding no data: it asks for a key and sends it with
    // each API call (a browser cannot send a header when it opens a page).
    let open =
        path == "/healthz" || path == "/readyz" || (path == "/" && request.method() == "GET");
    if keys.is_empty() || open {
        request.extensions_mut().insert(KeyName(None));
        return next.run(request).await;
    }
    match presented(request.headers()).and_then(|k| keys.check(k)) {
        Some(name) => {
            let name = KeyName(Some(name.to_owned()));
            request.extensions_mut().insert(name);
            next.run(request).await
        }
        None if path.starts_with("/v1/") => {
            openai::OpenAiError(ApiError::unauthorized()).into_response()
        }
        None => ApiError::unauthorized().into_response(),
    }
}

fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_is_accepted_by_its_line_and_others_are_not() {
        let (key, line) = Keys::generate("ci");
        let keys = Keys::parse(&format!("# keys\n\n{line}\n")).unwrap();
        assert_eq!(keys.check(&key), Some("ci"));
        assert_eq!(keys.check("ak_wrong"), None);
        assert_eq!(keys.check(""), None);
        assert!(!format!("{keys:?}").contains(&key));
    }

    #[test]
    fn malformed_lines_are_named_and_limits_read() {
        let line = |text: &str| Keys::parse(text).err().map(|(line, _)| line);
        assert_eq!(line("ok 00\n"), Some(1));
        assert_eq!(line("\nname\n"), Some(2));
        let (_, problem) = Keys::parse(&format!("a {} extra", "0".repeat(64))).unwrap_err();
        assert!(problem.contains("extra"), "{problem}");
        assert!(Keys::parse(&format!("a {}", "é".repeat(32))).is_err());
        let keys = Keys::parse(&format!(
            "a {} concurrent=2 tokens_per_day=9",
            "0".repeat(64)
        ))
        .unwrap();
        let limits = keys.limits()["a"];
        assert_eq!(limits.concurrent_runs, Some(2));
        assert_eq!(limits.tokens_per_day, Some(9));
    }
}
