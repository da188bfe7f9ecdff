//! Short previews of text for trace events, which never hold full prompts or outputs.

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
