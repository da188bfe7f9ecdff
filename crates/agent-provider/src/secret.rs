//! Credentials that must never be shown: API keys, credential header values and the user
//! information of URLs.
//!
//! A [`Secret`] prints as `[redacted]` in `Debug` output; a [`Redactor`] knows every secret of a
//! client and scrubs them from any text (response bodies, headers, transport messages) before
//! that text becomes part of a [`ProviderError`](agent_op::ProviderError).
//!
//! Values shorter than [`MIN_SECRET_BYTES`] are never scrubbed from text: replacing every
//! occurrence of a two-character value would mangle bodies and headers (and `Retry-After`)
//! while protecting nothing. They are still kept out of `Debug` output.

use std::fmt;
use std::ops::Range;

use reqwest::Url;

/// What secrets are replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

/// The shortest value a [`Redactor`] scrubs from text.
pub(crate) const MIN_SECRET_BYTES: usize = 8;

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
    /// Longest first, each at least [`MIN_SECRET_BYTES`] long.
    secrets: Vec<Secret>,
}

impl Redactor {
    /// A redactor for `secrets`; values shorter than [`MIN_SECRET_BYTES`] are ignored.
    pub(crate) fn new(secrets: impl IntoIterator<Item = Secret>) -> Redactor {
        let mut secrets: Vec<Secret> = secrets
            .into_iter()
            .filter(|s| s.expose().len() >= MIN_SECRET_BYTES)
            .collect();
        // Longer secrets first, so a secret containing another is removed whole.
        secrets.sort_by(|a, b| b.expose().len().cmp(&a.expose().len()).then(a.0.cmp(&b.0)));
        secrets.dedup();
        Redactor { secrets }
    }

    /// Where secrets occur in `text`: leftmost first, the longest secret at each position,
    /// never overlapping.
    fn spans(&self, text: &str) -> Vec<Range<usize>> {
        let mut found: Vec<Range<usize>> = Vec::new();
        for secret in &self.secrets {
            let needle = secret.expose().as_bytes();
            found.extend(
                memchr::memmem::find_iter(text.as_bytes(), needle)
                    .map(|start| start..start + needle.len()),
            );
        }
        // By start, longer first; then keep each span that starts after the last one kept.
        found.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        let mut spans: Vec<Range<usize>> = Vec::with_capacity(found.len());
        for span in found {
            if spans.last().is_none_or(|last| span.start >= last.end) {
                spans.push(span);
            }
        }
        spans
    }

    /// `text` with every secret replaced by `[redacted]`.
    pub(crate) fn redact(&self, text: &str) -> String {
        self.redact_tracking(text, 0).0
    }

    /// `text` with every secret replaced by `[redacted]`, and where byte `at` of `text` is in
    /// the result (a position inside a secret maps to the start of its `[redacted]`).
    pub(crate) fn redact_tracking(&self, text: &str, at: usize) -> (String, usize) {
        let spans = self.spans(text);
        if spans.is_empty() {
            return (text.to_owned(), at.min(text.len()));
        }
        let mut out = String::with_capacity(text.len());
        let mut mapped = None;
        let mut copied = 0;
        for span in spans {
            if mapped.is_none() && at < span.end {
                mapped = Some(out.len() + at.saturating_sub(copied).min(span.start - copied));
            }
            // Secrets are whole strings found in `text`, so spans lie on character boundaries.
            out.push_str(&text[copied..span.start]);
            out.push_str(REDACTED);
            copied = span.end;
        }
        let mapped = mapped.unwrap_or_else(|| out.len() + at.min(text.len()) - copied);
        out.push_str(&text[copied..]);
        (out, mapped)
    }
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// The credentials in a URL's user information (`https://user:password@host/`), in every form
/// they may take on the wire or in an echo: as written (percent-encoded), decoded, and as the
/// `Authorization: Basic` value `reqwest` makes of them.
pub(crate) fn url_secrets(url: &Url) -> Vec<Secret> {
    let username = url.username();
    let password = url.password();
    if username.is_empty() && password.is_none() {
        return Vec::new();
    }
    let user = percent_decode(username);
    let pass = password.map(percent_decode);
    let mut secrets = vec![Secret::new(username), Secret::new(user.clone())];
    if let (Some(raw), Some(decoded)) = (password, &pass) {
        secrets.push(Secret::new(raw));
        secrets.push(Secret::new(decoded.clone()));
    }
    let basic = base64(format!("{user}:{}", pass.unwrap_or_default()).as_bytes());
    secrets.push(Secret::new(format!("Basic {basic}")));
    secrets.push(Secret::new(basic));
    secrets
}

/// `url` (a URL, a schemeless `user:pw@host:port` as `OLLAMA_HOST` allows, or text meant to
/// be one) with any user information replaced by `[redacted]`: `https://user:pw@host/v1` →
/// `https://[redacted]@host/v1`.
pub(crate) fn mask_userinfo(url: &str) -> String {
    let authority_start = url.find("://").map_or(0, |end| end + 3);
    let rest = &url[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_len].rfind('@') {
        Some(at) => format!("{}{REDACTED}{}", &url[..authority_start], &rest[at..]),
        None => url.to_owned(),
    }
}

/// Decodes `%XX` escapes; anything that is not a valid escape, or does not decode to UTF-8,
/// is kept as written.
fn percent_decode(text: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let high = bytes.get(i + 1).copied().and_then(hex);
            let low = bytes.get(i + 2).copied().and_then(hex);
            if let (Some(high), Some(low)) = (high, low) {
                out.push(high * 16 + low);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
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
        let r = Redactor::new([
            Secret::new("abcdefgh"),
            Secret::new("abcdefghijkl"),
            Secret::new(""),
        ]);
        assert_eq!(
            r.redact("key abcdefghijkl and abcdefgh and abcdefghijkl"),
            "key [redacted] and [redacted] and [redacted]"
        );
        assert_eq!(r.redact("nothing here"), "nothing here");
    }

    #[test]
    fn short_values_are_never_scrubbed() {
        let r = Redactor::new([Secret::new("2"), Secret::new("1234567")]);
        assert_eq!(
            r.redact("retry in 2 s, id 1234567"),
            "retry in 2 s, id 1234567"
        );
    }

    #[test]
    fn positions_are_tracked_through_redaction() {
        let r = Redactor::new([Secret::new("SECRET-VALUE")]);
        let text = "ab SECRET-VALUE cd";
        assert_eq!(
            r.redact_tracking(text, 1),
            ("ab [redacted] cd".to_owned(), 1)
        );
        // Inside the secret: the start of its marker.
        assert_eq!(r.redact_tracking(text, 8).1, 3);
        // After it: shifted by the difference in length.
        assert_eq!(r.redact_tracking(text, 16).1, 14);
        assert_eq!(r.redact_tracking(text, 999).1, 16);
    }

    #[test]
    fn url_user_information() {
        assert_eq!(
            mask_userinfo("https://user:p%40ss@host:8080/v1?x=1"),
            "https://[redacted]@host:8080/v1?x=1"
        );
        assert_eq!(mask_userinfo("https://host/v1@x"), "https://host/v1@x");
        assert_eq!(mask_userinfo("not a url"), "not a url");
        assert_eq!(
            mask_userinfo("u:p@gpu-box:11434"),
            "[redacted]@gpu-box:11434"
        );
        let url = Url::parse("https://alice-admin:p%40ss-word-123@host/").unwrap();
        let secrets: Vec<String> = url_secrets(&url)
            .iter()
            .map(|s| s.expose().to_owned())
            .collect();
        assert!(secrets.contains(&"p%40ss-word-123".to_owned()));
        assert!(secrets.contains(&"p@ss-word-123".to_owned()));
        assert!(secrets.contains(&format!("Basic {}", base64(b"alice-admin:p@ss-word-123"))));
        assert!(url_secrets(&Url::parse("https://host/").unwrap()).is_empty());
    }

    #[test]
    fn base64_matches_the_standard() {
        for (raw, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("user:pass", "dXNlcjpwYXNz"),
        ] {
            assert_eq!(base64(raw.as_bytes()), encoded);
        }
    }
}
