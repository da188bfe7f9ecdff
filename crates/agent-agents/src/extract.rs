//! Finding the value in a model's reply: JSON inside fences or prose, bare numbers and
//! names.

use serde_json::Value;

use crate::output::ParseError;

/// What [`json`] found.
pub(crate) enum Extracted<'a> {
    /// A complete JSON object or array (or the fenced block).
    Found(&'a str),
    /// An object or array that starts but never closes: the reply was cut off.
    Truncated,
    /// No JSON at all.
    None,
}

/// The JSON in `text`: the content of the first Markdown code fence if there is one, else
/// the first balanced `{…}` or `[…]` (strings and escapes respected).
pub(crate) fn json(text: &str) -> Extracted<'_> {
    if let Some(fenced) = fenced(text) {
        return Extracted::Found(fenced);
    }
    let Some(start) = text.find(['{', '[']) else {
        return Extracted::None;
    };
    let body = &text[start..];
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Extracted::Found(&body[..=i]);
                }
            }
            _ => {}
        }
    }
    Extracted::Truncated
}

/// The content of the first ```` ``` ```` fence (its language tag skipped), if it is closed.
fn fenced(text: &str) -> Option<&str> {
    let open = text.find("```")?;
    let after = &text[open + 3..];
    // Skip the language tag (`json`, `JSON`, …) up to the end of the line.
    let content_start = after.find('\n').map_or(0, |n| n + 1);
    let content = &after[content_start..];
    let close = content.find("```")?;
    Some(content[..close].trim())
}

/// A type whose schema is a single value that needs no JSON.
pub(crate) enum Scalar {
    String,
    Number,
    Choice(Vec<String>),
}

/// Whether `schema` describes a string, a number, or a choice of names.
pub(crate) fn scalar_kind(schema: &Value) -> Option<Scalar> {
    if let Some(names) = choices(schema) {
        return Some(Scalar::Choice(names));
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string") => Some(Scalar::String),
        Some("integer" | "number") => Some(Scalar::Number),
        _ => None,
    }
}

/// The names of an enum of strings: `{"enum": [...]}`, or `oneOf`/`anyOf` of
/// `{"const": name}` / `{"enum": [name]}` (how schemars writes documented variants).
fn choices(schema: &Value) -> Option<Vec<String>> {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect();
    }
    let variants = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array)?;
    let mut names = Vec::new();
    for variant in variants {
        if let Some(name) = variant.get("const").and_then(Value::as_str) {
            names.push(name.to_owned());
        } else {
            names.extend(choices(variant)?);
        }
    }
    Some(names)
}

/// The value of a scalar reply, as JSON for serde to finish.
pub(crate) fn scalar(text: &str, kind: &Scalar) -> Result<Value, ParseError> {
    match kind {
        Scalar::String => Ok(Value::String(text.to_owned())),
        Scalar::Number => first_number(text)
            .and_then(|n| serde_json::from_str::<Value>(n).ok())
            .ok_or_else(|| ParseError::NotANumber {
                found: text.chars().take(40).collect(),
            }),
        Scalar::Choice(names) => {
            let said = text
                .trim()
                .trim_matches(|c: char| c == '"' || c == '\'' || c == '`' || c == '*')
                .trim_end_matches(['.', '!'])
                .trim();
            names
                .iter()
                .find(|name| name.eq_ignore_ascii_case(said))
                .map(|name| Value::String(name.clone()))
                .ok_or_else(|| ParseError::NotAChoice {
                    found: said.chars().take(40).collect(),
                    allowed: names.clone(),
                })
        }
    }
}

/// The first number in `text` (`-12`, `3.5`, `1e3`), as written.
fn first_number(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts = bytes[i].is_ascii_digit()
            || (bytes[i] == b'-' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit));
        if starts && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric()) {
            let mut end = i + 1;
            while end < bytes.len()
                && (bytes[end].is_ascii_digit()
                    || (bytes[end] == b'.' && bytes.get(end + 1).is_some_and(u8::is_ascii_digit))
                    || matches!(bytes[end], b'e' | b'E')
                        && bytes
                            .get(end + 1)
                            .is_some_and(|b| b.is_ascii_digit() || *b == b'-'))
            {
                end += if matches!(bytes[end], b'e' | b'E') {
                    2
                } else {
                    1
                };
            }
            return text.get(i..end);
        }
        i += 1;
    }
    None
}

/// A line without its list marker (`- `, `* `, `• `, `1. `, `2) `) and surrounding spaces.
pub(crate) fn strip_marker(line: &str) -> &str {
    let line = line.trim();
    for marker in ["- ", "* ", "• "] {
        if let Some(rest) = line.strip_prefix(marker) {
            return rest.trim();
        }
    }
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 {
        let rest = &line[digits..];
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return rest.trim();
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_found_in_prose() {
        assert_eq!(first_number("The answer is 42."), Some("42"));
        assert_eq!(first_number("about -3.5 degrees"), Some("-3.5"));
        assert_eq!(first_number("x2 then 7"), Some("7"));
        assert_eq!(first_number("1e3 items"), Some("1e3"));
        assert_eq!(first_number("none"), None);
    }

    #[test]
    fn json_is_found_in_fences_and_prose() {
        let Extracted::Found(j) = json("Here:\n```json\n{\"a\": 1}\n```\nDone.") else {
            panic!()
        };
        assert_eq!(j, "{\"a\": 1}");
        let Extracted::Found(j) = json("Sure, {\"a\": \"}{\", \"b\": [1, 2]} hope it helps") else {
            panic!()
        };
        assert_eq!(j, "{\"a\": \"}{\", \"b\": [1, 2]}");
        assert!(matches!(json("{\"a\": [1, 2"), Extracted::Truncated));
        assert!(matches!(json("no json here"), Extracted::None));
    }
}
