//! Credentials that must never be shown: API keys and secret header values.
//!
//! A [`Secret`] prints as `[redacted]` in `Debug` output; a [`Redactor`] knows every secret of a
//! client and scrubs them from any text (response bodies, headers, transport messages) before
//! that text becomes part of a [`ProviderError`](agent_op::ProviderError).

use std::fmt;

/// What secrets are replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

/// A credential. Its `Debug` output never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for putting on the wire.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Scrubs a fixed set of secrets from text.
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<Secret>,
}

impl Redactor {
    /// A redactor for `secrets`; empty values are ignored.
    pub(crate) fn new(secrets: impl IntoIterator<Item = Secret>) -> Redactor {
        let mut secrets: Vec<Secret> = secrets
            .into_iter()
            .filter(|s| !s.expose().is_empty())
            .collect();
        // Longer secrets first, so a secret containing another is removed whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.expose().len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `text` with every secret replaced by `[redacted]`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.expose()) {
                out = out.replace(secret.expose(), REDACTED);
            }
        }
        out
    }
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("sk-very-secret");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(s.expose(), "sk-very-secret");
    }

    #[test]
    fn redacts_every_occurrence_longest_first() {
        let r = Redactor::new([Secret::new("abc"), Secret::new("abcdef"), Secret::new("")]);
        assert_eq!(
            r.redact("key abcdef and abc and abcdef"),
            "key [redacted] and [redacted] and [redacted]"
        );
        assert_eq!(r.redact("nothing here"), "nothing here");
    }
}
