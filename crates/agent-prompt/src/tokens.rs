//! [`TokenCounter`]: token counts by model, cached by content hash.
//!
//! OpenAI's encodings come from the `bpe-openai` crate, chosen over `tiktoken-rs` after
//! measuring both on this project's machines (see `docs/PROMPT.md`): the same token ids,
//! 2–3× the throughput, a counter that does not build the token vector, and faster first use.
//! Its vocabularies are embedded, so counting works offline.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_op::Message;
use serde::{Deserialize, Serialize};

use crate::ir::ToolDef;
use crate::render;
use crate::section::{Section, SectionContent};

/// Tokens every message costs beyond its content (role and separators), as OpenAI's
/// cookbook counts chat messages.
pub const MESSAGE_OVERHEAD: u32 = 4;
/// Tokens the reply's priming costs (`<|start|>assistant<|message|>`).
pub const REPLY_PRIMING: u32 = 3;
/// Tokens a tool definition costs beyond its name, description and schema: an estimate, as
/// providers do not document how they render tools.
pub const TOOL_OVERHEAD: u32 = 8;

/// How text becomes tokens.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, GPT-5, o1, o3, o4 and later OpenAI models.
    O200kBase,
    /// GPT-4, GPT-3.5 and OpenAI's `text-embedding-3` models.
    Cl100kBase,
    /// Any other model (Ollama's, say): an estimate of one token per four ASCII bytes,
    /// rounded up per word-sized run, plus one token per other character. It errs high for
    /// most tokenizers, which is the safe side for a budget.
    Approximate,
}

impl Encoding {
    /// The encoding of `model`: the OpenAI model families by name (a provider prefix such as
    /// `openai/` is ignored), [`Approximate`](Encoding::Approximate) for everything else.
    pub fn for_model(model: &str) -> Encoding {
        let name = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        const O200K: &[&str] = &[
            "gpt-4o",
            "gpt-4.1",
            "gpt-4.5",
            "gpt-5",
            "o1",
            "o3",
            "o4",
            "chatgpt-4o",
            "gpt-oss",
        ];
        const CL100K: &[&str] = &[
            "gpt-4",
            "gpt-3.5",
            "text-embedding-3",
            "text-embedding-ada-002",
        ];
        if O200K.iter().any(|p| name.starts_with(p)) {
            Encoding::O200kBase
        } else if CL100K.iter().any(|p| name.starts_with(p)) {
            Encoding::Cl100kBase
        } else {
            Encoding::Approximate
        }
    }

    /// Its name: `o200k_base`, `cl100k_base` or `approximate`.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
            Encoding::Approximate => "approximate",
        }
    }

    fn tokenizer(self) -> Option<&'static bpe_openai::Tokenizer> {
        match self {
            Encoding::O200kBase => Some(bpe_openai::o200k_base()),
            Encoding::Cl100kBase => Some(bpe_openai::cl100k_base()),
            Encoding::Approximate => None,
        }
    }
}

/// Counts tokens in one [`Encoding`], remembering the counts of sections and tools by their
/// content hash so that a context hydrated again costs no recount.
///
/// ```
/// use agent_prompt::{Encoding, TokenCounter};
///
/// let counter = TokenCounter::for_model("gpt-4o-mini");
/// assert_eq!(counter.encoding(), Encoding::O200kBase);
/// assert_eq!(counter.count("Hello, world!"), 4);
/// ```
#[derive(Debug)]
pub struct TokenCounter {
    encoding: Encoding,
    cache: Mutex<HashMap<String, u32>>,
    /// Where a shrunk text section was cut: by (content hash, target tokens, keep the end),
    /// the kept length in bytes and its tokens. The same memories recur turn after turn
    /// under the same budget, and cutting means tokenizing.
    cuts: Mutex<HashMap<CutKey, Option<(usize, u32)>>>,
    hits: AtomicU64,
}

/// A cut's key: the section's content hash, the target tokens, whether the end is kept.
type CutKey = (String, u32, bool);

/// The most counts a counter keeps; it forgets them all when full (hydrated contexts repeat
/// within a conversation, not across thousands of them).
const CACHE_CAPACITY: usize = 65_536;

impl TokenCounter {
    /// A counter in `encoding`.
    pub fn new(encoding: Encoding) -> TokenCounter {
        TokenCounter {
            encoding,
            cache: Mutex::new(HashMap::new()),
            cuts: Mutex::new(HashMap::new()),
            hits: AtomicU64::new(0),
        }
    }

    /// A counter in the encoding of `model` (see [`Encoding::for_model`]).
    pub fn for_model(model: &str) -> TokenCounter {
        TokenCounter::new(Encoding::for_model(model))
    }

    /// Its encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// How many counts were answered from the cache so far.
    pub fn cache_hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The tokens of `text`.
    pub fn count(&self, text: &str) -> u32 {
        let n = match self.encoding.tokenizer() {
            Some(tokenizer) => tokenizer.count(text),
            None => approximate(text),
        };
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The longest start of `text` of at most `max` tokens, cut on a character boundary,
    /// with its token count.
    pub fn truncate_start<'a>(&self, text: &'a str, max: u32) -> (&'a str, u32) {
        self.cut(text, max, false)
    }

    /// The longest end of `text` of at most `max` tokens, cut on a character boundary, with
    /// its token count.
    pub fn truncate_end<'a>(&self, text: &'a str, max: u32) -> (&'a str, u32) {
        self.cut(text, max, true)
    }

    fn cut<'a>(&self, text: &'a str, max: u32, keep_end: bool) -> (&'a str, u32) {
        let whole = self.count(text);
        if whole <= max {
            return (text, whole);
        }
        let max = max as usize;
        let mut at = match self.encoding.tokenizer() {
            Some(tokenizer) => {
                let tokens = tokenizer.encode(text);
                let len = |ids: &[u32]| -> usize {
                    ids.iter().map(|&t| tokenizer.bpe.token_len(t)).sum()
                };
                if keep_end {
                    text.len() - len(&tokens[tokens.len() - max..])
                } else {
                    len(&tokens[..max])
                }
            }
            None => approximate_cut(text, max, keep_end),
        };
        // A token can end inside a character (CJK, emoji): cut on the boundary that keeps
        // the piece within `max`, then make sure of it (merges across the cut are possible).
        loop {
            at = at.min(text.len());
            if keep_end {
                while !text.is_char_boundary(at) {
                    at += 1;
                }
            } else {
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
            }
            let piece = if keep_end { &text[at..] } else { &text[..at] };
            let n = self.count(piece);
            if n as usize <= max || piece.is_empty() {
                return (piece, n);
            }
            // Rare: the piece tokenizes longer alone. Give up one more character.
            if keep_end {
                at += 1;
            } else {
                at -= 1;
            }
        }
    }

    /// The tokens of `section` rendered as it is compiled (label included), from the cache
    /// when `hash` was counted before.
    pub(crate) fn count_section(&self, section: &Section, hash: &str) -> u32 {
        self.cached(hash, || match &section.content {
            SectionContent::Text(text) => self.count(&render::text_section(&section.label, text)),
            SectionContent::Messages(messages) => {
                self.count_messages(crate::units::sendable(messages))
            }
        })
    }

    /// The tokens of `messages`, each with its [`MESSAGE_OVERHEAD`].
    pub fn count_messages(&self, messages: &[Message]) -> u32 {
        messages
            .iter()
            .map(|m| self.count_message(m))
            .fold(0u32, u32::saturating_add)
    }

    /// The tokens of one message: its content, its tool calls' names and arguments, and
    /// [`MESSAGE_OVERHEAD`].
    pub fn count_message(&self, message: &Message) -> u32 {
        let mut n = MESSAGE_OVERHEAD.saturating_add(self.count(message.content()));
        if let Message::Assistant { tool_calls, .. } = message {
            for call in tool_calls {
                let arguments = call.arguments.to_string();
                n = n
                    .saturating_add(self.count(&call.name))
                    .saturating_add(self.count(&arguments))
                    .saturating_add(MESSAGE_OVERHEAD);
            }
        }
        n
    }

    /// The tokens of the observation sent as the last user message (none when it is empty).
    pub(crate) fn count_observation(&self, observation: &str) -> u32 {
        if observation.is_empty() {
            0
        } else {
            MESSAGE_OVERHEAD.saturating_add(self.count(observation))
        }
    }

    /// The tokens of a tool definition as sent (an estimate: see [`TOOL_OVERHEAD`]).
    pub(crate) fn count_tool(&self, tool: &ToolDef) -> u32 {
        let schema = tool.schema.to_string();
        TOOL_OVERHEAD
            .saturating_add(self.count(&tool.name))
            .saturating_add(self.count(&tool.description))
            .saturating_add(self.count(&schema))
    }

    fn cached(&self, hash: &str, count: impl FnOnce() -> u32) -> u32 {
        self.memo(&self.cache, hash, str::to_owned, count)
    }

    /// The value `map` holds for `key`, or `compute`d and kept (the map forgets everything
    /// when full), counting hits.
    fn memo<K, Q, V>(
        &self,
        map: &Mutex<HashMap<K, V>>,
        key: &Q,
        owned: impl FnOnce(&Q) -> K,
        compute: impl FnOnce() -> V,
    ) -> V
    where
        K: std::borrow::Borrow<Q> + std::hash::Hash + Eq,
        Q: std::hash::Hash + Eq + ?Sized,
        V: Copy,
    {
        // A panic while holding the lock cannot leave an entry half-written.
        let lock = || map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = lock().get(key).copied() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return found;
        }
        let value = compute();
        let mut map = lock();
        if map.len() >= CACHE_CAPACITY {
            map.clear();
        }
        map.insert(owned(key), value);
        value
    }

    /// The longest part of `text` (its start, or its end when `keep_end`) whose rendered
    /// section (under `label`) takes at most `target` tokens: its length in bytes and those
    /// tokens; `None` if not even one token of text fits. Cached by the section's `hash`.
    pub(crate) fn shrink_text(
        &self,
        hash: &str,
        label: &str,
        text: &str,
        target: u32,
        keep_end: bool,
    ) -> Option<(usize, u32)> {
        let key = (hash.to_owned(), target, keep_end);
        self.memo(&self.cuts, &key, Clone::clone, || {
            self.cut_section(label, text, target, keep_end)
        })
    }

    fn cut_section(
        &self,
        label: &str,
        text: &str,
        target: u32,
        keep_end: bool,
    ) -> Option<(usize, u32)> {
        let frame = self.count(&render::text_section(label, ""));
        let mut room = target.saturating_sub(frame);
        loop {
            if room == 0 {
                return None;
            }
            let (piece, _) = self.cut(text, room, keep_end);
            if piece.is_empty() {
                return None;
            }
            let tokens = self.count(&render::text_section(label, piece));
            if tokens <= target {
                return Some((piece.len(), tokens));
            }
            // The label and the text merged into more tokens than apart: try a little less.
            room = room.saturating_sub(tokens - target);
        }
    }
}

/// [`Encoding::Approximate`]: per run of ASCII non-space characters, one token per four
/// bytes (rounded up); one token per run of whitespace; one per other character.
fn approximate(text: &str) -> usize {
    let mut tokens = 0usize;
    let mut run = 0usize;
    let mut in_space = false;
    for c in text.chars() {
        if c.is_ascii() && !c.is_ascii_whitespace() {
            run += 1;
            in_space = false;
            continue;
        }
        tokens += run.div_ceil(4);
        run = 0;
        if c.is_ascii_whitespace() {
            if !in_space {
                tokens += 1;
                in_space = true;
            }
        } else {
            tokens += 1;
            in_space = false;
        }
    }
    tokens + run.div_ceil(4)
}

/// A byte offset near where `max` approximate tokens end (from the start, or from the end
/// when `keep_end`); [`TokenCounter::cut`] then settles it exactly.
fn approximate_cut(text: &str, max: usize, keep_end: bool) -> usize {
    // Binary search over character boundaries: the count is monotonic in the length.
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let fits = |&i: &usize| {
        let piece = if keep_end { &text[i..] } else { &text[..i] };
        approximate(piece) <= max
    };
    if keep_end {
        // The smallest start whose tail fits.
        let k = bounds.partition_point(|i| !fits(i));
        bounds.get(k).copied().unwrap_or(text.len())
    } else {
        // The largest end whose head fits.
        let k = bounds.partition_point(fits);
        bounds[k.saturating_sub(1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_get_their_encoding() {
        assert_eq!(Encoding::for_model("gpt-4o-mini"), Encoding::O200kBase);
        assert_eq!(Encoding::for_model("openai/gpt-5"), Encoding::O200kBase);
        assert_eq!(Encoding::for_model("o3-mini"), Encoding::O200kBase);
        assert_eq!(Encoding::for_model("gpt-4-turbo"), Encoding::Cl100kBase);
        assert_eq!(Encoding::for_model("gpt-3.5-turbo"), Encoding::Cl100kBase);
        assert_eq!(Encoding::for_model("llama3.2"), Encoding::Approximate);
        assert_eq!(Encoding::for_model(""), Encoding::Approximate);
    }

    #[test]
    fn cuts_stay_on_character_boundaries_and_within_the_limit() {
        let text = "日本語のテキスト 🦀🦀 mixed with English words and code: fn main() {}";
        for encoding in [
            Encoding::O200kBase,
            Encoding::Cl100kBase,
            Encoding::Approximate,
        ] {
            let counter = TokenCounter::new(encoding);
            let whole = counter.count(text);
            for max in 0..=whole + 1 {
                let (head, n) = counter.truncate_start(text, max);
                assert!(text.starts_with(head));
                assert!(n <= max && n == counter.count(head), "{encoding:?} {max}");
                let (tail, n) = counter.truncate_end(text, max);
                assert!(text.ends_with(tail));
                assert!(n <= max && n == counter.count(tail), "{encoding:?} {max}");
            }
        }
    }

    #[test]
    fn the_approximation_errs_high_on_english() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let real = TokenCounter::new(Encoding::O200kBase).count(&text);
        let approx = TokenCounter::new(Encoding::Approximate).count(&text);
        assert!(approx >= real, "{approx} < {real}");
    }
}
