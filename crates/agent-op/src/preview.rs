//! Short previews of text: for trace events, and for showing where two texts differ.

/// How many characters an event preview keeps.
pub const PREVIEW_CHARS: usize = 200;

/// Returns at most `max_chars` characters of `text`, ending in `…` when something was cut.
/// Never splits a UTF-8 character.
///
/// ```
/// assert_eq!(agent_op::preview("héllo world", 5), "héllo…");
/// assert_eq!(agent_op::preview("short", 10), "short");
/// ```
pub fn preview(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let mut out = String::with_capacity(cut + 3);
            out.push_str(&text[..cut]);
            out.push('…');
            out
        }
    }
}

/// The parts of two texts around their first differing character: up to 40 characters
/// before it and 80 from it, with `…` where they were cut. Two long texts that differ near
/// their end show that end, not two identical beginnings.
///
/// ```
/// let (a, b) = agent_op::difference_excerpts(&format!("{}Oslo", "x".repeat(100)), &format!("{}Rome", "x".repeat(100)));
/// assert_eq!(a, format!("…{}Oslo", "x".repeat(40)));
/// assert_eq!(b, format!("…{}Rome", "x".repeat(40)));
/// ```
pub fn difference_excerpts(x: &str, y: &str) -> (String, String) {
    let at = x.chars().zip(y.chars()).take_while(|(a, b)| a == b).count();
    let cut = |text: &str| {
        let from = at.saturating_sub(40);
        let part: String = text.chars().skip(from).take(at - from + 80).collect();
        let before = if from > 0 { "…" } else { "" };
        let after = if text.chars().count() > at + 80 {
            "…"
        } else {
            ""
        };
        format!("{before}{part}{after}")
    };
    (cut(x), cut(y))
}
