//! How sections become text, and their content hash: one place, so that counting and
//! compiling agree.

use sha2::{Digest, Sha256};

use crate::section::{Section, SectionContent};

/// A text section as it appears in the system message: its label on a line of its own (when
/// it has one), its text, and the blank line that separates it from the next.
pub(crate) fn text_section(label: &str, text: &str) -> String {
    let mut out = String::with_capacity(label.len() + text.len() + 3);
    push_text_section(&mut out, label, text);
    out
}

/// Appends [`text_section`] to `out`.
pub(crate) fn push_text_section(out: &mut String, label: &str, text: &str) {
    if !label.is_empty() {
        out.push_str(label);
        out.push('\n');
    }
    out.push_str(text);
    out.push_str("\n\n");
}

/// Hex SHA-256 (first 16 bytes) of a section's label and content: what
/// [`Section::hash`](crate::Section::hash) holds.
pub(crate) fn content_hash(section: &Section) -> String {
    let mut hasher = Sha256::new();
    hasher.update(section.label.as_bytes());
    hasher.update([0]);
    match &section.content {
        SectionContent::Text(text) => {
            hasher.update(b"t");
            hasher.update(text.as_bytes());
        }
        SectionContent::Messages(messages) => {
            hasher.update(b"m");
            // Serializing messages cannot fail: they are strings and JSON values.
            let json = serde_json::to_vec(messages).unwrap_or_default();
            hasher.update(&json);
        }
    }
    let digest = hasher.finalize();
    let mut hex = String::with_capacity(32);
    for byte in &digest[..16] {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}
