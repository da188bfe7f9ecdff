//! Just enough of an HTML reader for what Chromium's `--dump-dom` prints: it serializes every
//! non-void element with an end tag and escapes text, so elements nest by their tags alone.

// Shared by the tests and the benchmark, which each use part of it.
#![allow(dead_code)]

use std::collections::HashMap;

/// One element of the document.
#[derive(Debug)]
pub struct Element {
    /// The tag name, lower case.
    pub name: String,
    /// The attributes, values unescaped.
    pub attrs: HashMap<String, String>,
    /// The enclosing element.
    pub parent: Option<usize>,
    /// The text directly inside it (not in child elements), unescaped.
    pub text: String,
}

/// The elements of a document, in document order.
#[derive(Debug)]
pub struct Dom {
    /// Every element.
    pub elements: Vec<Element>,
}

const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr",
];

impl Dom {
    /// Reads `html`. Script and style contents are skipped as raw text.
    pub fn parse(html: &str) -> Dom {
        let mut elements: Vec<Element> = Vec::new();
        let mut open: Vec<usize> = Vec::new();
        let bytes = html.as_bytes();
        let mut pos = 0;
        while pos < html.len() {
            let Some(lt) = html[pos..].find('<').map(|i| pos + i) else {
                push_text(&mut elements, &open, &html[pos..]);
                break;
            };
            push_text(&mut elements, &open, &html[pos..lt]);
            let rest = &html[lt..];
            if rest.starts_with("<!--") {
                pos = rest.find("-->").map_or(html.len(), |i| lt + i + 3);
            } else if rest.starts_with("<!") || rest.starts_with("<?") {
                pos = rest.find('>').map_or(html.len(), |i| lt + i + 1);
            } else if let Some(end) = rest.strip_prefix("</") {
                let close = end.find('>').map_or(html.len(), |i| lt + 2 + i);
                let name = html[lt + 2..close].trim().to_ascii_lowercase();
                if let Some(k) = open.iter().rposition(|&e| elements[e].name == name) {
                    open.truncate(k);
                }
                pos = (close + 1).min(html.len());
            } else if bytes.get(lt + 1).is_some_and(|b| b.is_ascii_alphabetic()) {
                let (element, after, self_closing) = start_tag(html, lt, open.last().copied());
                let name = element.name.clone();
                elements.push(element);
                let index = elements.len() - 1;
                pos = after;
                if name == "script" || name == "style" {
                    let closing = format!("</{name}");
                    // Chromium writes tag names in lower case.
                    let end = html[pos..].find(&closing).map_or(html.len(), |i| pos + i);
                    elements[index].text = html[pos..end].to_owned();
                    pos = html[end..].find('>').map_or(html.len(), |i| end + i + 1);
                } else if !self_closing && !VOID.contains(&name.as_str()) {
                    open.push(index);
                }
            } else {
                push_text(&mut elements, &open, "<");
                pos = lt + 1;
            }
        }
        Dom { elements }
    }

    /// The element with this `id`.
    pub fn by_id(&self, id: &str) -> Option<usize> {
        self.elements
            .iter()
            .position(|e| e.attrs.get("id").is_some_and(|v| v == id))
    }

    /// An attribute of an element.
    pub fn attr(&self, element: usize, name: &str) -> Option<&str> {
        self.elements[element].attrs.get(name).map(String::as_str)
    }

    /// Whether the element's `class` lists `class`.
    pub fn has_class(&self, element: usize, class: &str) -> bool {
        self.attr(element, "class")
            .is_some_and(|c| c.split_ascii_whitespace().any(|c| c == class))
    }

    /// The element's children, in order.
    pub fn children(&self, element: usize) -> Vec<usize> {
        (element + 1..self.elements.len())
            .filter(|&e| self.elements[e].parent == Some(element))
            .collect()
    }

    /// Whether `element` is inside `ancestor`.
    pub fn is_within(&self, element: usize, ancestor: usize) -> bool {
        let mut at = self.elements[element].parent;
        while let Some(p) = at {
            if p == ancestor {
                return true;
            }
            at = self.elements[p].parent;
        }
        false
    }

    /// The elements inside `ancestor` that have `class`.
    pub fn descendants_with_class(&self, ancestor: usize, class: &str) -> Vec<usize> {
        (ancestor + 1..self.elements.len())
            .filter(|&e| self.has_class(e, class) && self.is_within(e, ancestor))
            .collect()
    }

    /// All text inside an element, its descendants' included.
    pub fn text(&self, element: usize) -> String {
        let mut out = self.elements[element].text.clone();
        for e in element + 1..self.elements.len() {
            if self.is_within(e, element) {
                out.push_str(&self.elements[e].text);
            }
        }
        out
    }
}

fn push_text(elements: &mut [Element], open: &[usize], text: &str) {
    if let Some(&e) = open.last() {
        elements[e].text.push_str(&unescape(text));
    }
}

/// Reads the start tag at `lt`: the element, where it ends, and whether it ended in `/>`.
fn start_tag(html: &str, lt: usize, parent: Option<usize>) -> (Element, usize, bool) {
    let bytes = html.as_bytes();
    let mut i = lt + 1;
    let name_end = html[i..]
        .find(|c: char| c.is_ascii_whitespace() || c == '>' || c == '/')
        .map_or(html.len(), |k| i + k);
    let name = html[i..name_end].to_ascii_lowercase();
    i = name_end;
    let mut attrs = HashMap::new();
    let mut self_closing = false;
    while i < bytes.len() {
        match bytes[i] {
            b'>' => {
                i += 1;
                break;
            }
            b'/' => {
                self_closing = true;
                i += 1;
            }
            b if b.is_ascii_whitespace() => i += 1,
            _ => {
                self_closing = false;
                let key_end = html[i..]
                    .find(|c: char| c.is_ascii_whitespace() || c == '=' || c == '>' || c == '/')
                    .map_or(html.len(), |k| i + k);
                let key = html[i..key_end].to_ascii_lowercase();
                i = key_end;
                let mut value = String::new();
                if bytes.get(i) == Some(&b'=') {
                    i += 1;
                    match bytes.get(i) {
                        Some(&q @ (b'"' | b'\'')) => {
                            let end = html[i + 1..]
                                .find(q as char)
                                .map_or(html.len(), |k| i + 1 + k);
                            value = unescape(&html[i + 1..end]);
                            i = (end + 1).min(html.len());
                        }
                        _ => {
                            let end = html[i..]
                                .find(|c: char| c.is_ascii_whitespace() || c == '>')
                                .map_or(html.len(), |k| i + k);
                            value = unescape(&html[i..end]);
                            i = end;
                        }
                    }
                }
                attrs.insert(key, value);
            }
        }
    }
    let element = Element {
        name,
        attrs,
        parent,
        text: String::new(),
    };
    (element, i, self_closing)
}

/// Undoes the escapes Chromium writes (`&amp;`, `&lt;`, `&gt;`, `&quot;`, `&nbsp;`, numeric).
pub fn unescape(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let Some(semi) = rest.find(';').filter(|&s| s <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..semi];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "nbsp" => Some('\u{a0}'),
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}
