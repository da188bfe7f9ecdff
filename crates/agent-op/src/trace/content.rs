//! Full content in JSONL traces, each distinct piece stored once per file.
//!
//! Model calls resend the whole conversation, so a trace holding every request in full would
//! grow with the square of a conversation's length. In a JSONL file, every message and tool
//! definition of an `infer_start`'s `prompt` and an `infer_end`'s `reply` is written once, on a
//! `content` line before the first event that uses it, and events name it by hash:
//!
//! ```text
//! {"v":3,"content":{"hash":"sha256:<hex of the value's text>","value":{"role":"user","content":"Hi"}}}
//! {"v":3,"trace_id":"…","event":{"at":"…","type":"infer_start","data":{…,"prompt":{"messages":["sha256:…"]}}}}
//! ```
//!
//! A prompt usually repeats an earlier prompt's messages and adds a few, so listing every
//! message's hash would still grow with the square of the conversation. The messages of a
//! prompt are therefore written as the longest list of messages an earlier prompt of the file
//! started with, named by its *chain hash*, followed by the hashes of the rest:
//! `{"prefix":"sha256:…","then":["sha256:…"]}`. The chain hash of a list is
//! `hash(chain hash of the list without its last message ‖ hash of that message)`, and of
//! the empty list the empty string: writer and reader compute it alike, so no line spells
//! chains out.
//!
//! Everywhere else (a `Trace` serialized with serde, an event on its own) content is inline.
//! The JSONL writer and reader switch these helpers into their file mode with a thread-local
//! scope around each line, so the event types keep ordinary serde derives.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::message::{InferOptions, Message, Messages, Prompt};
use crate::tool::ToolDefinition;

/// What the helpers do on this thread right now.
enum Scope {
    /// Writing a JSONL line: pieces become hashes; new ones are kept for content lines.
    Writing {
        state: WriterState,
        fresh: Vec<(String, String)>,
    },
    /// Reading a JSONL line: hashes are looked up in the file's content lines.
    Reading(ReaderState),
}

/// What a file being written already holds.
#[derive(Debug, Default)]
struct WriterState {
    /// Pieces with a content line.
    seen: HashSet<String>,
    /// Chain hashes of the message lists of the prompts written.
    chains: HashSet<String>,
    /// The message lists written lately, one per storage they share (an agent loop's
    /// prompts are one conversation growing in one storage): a prompt continuing one of them
    /// hashes only its new messages, and one built afresh is compared with them rather than
    /// hashed again (hashing every message of every prompt made writing a long conversation
    /// quadratic in hashing).
    recent: VecDeque<WrittenList>,
}

/// The longest list of messages written from one storage, with each message's hashes.
#[derive(Debug)]
struct WrittenList {
    messages: Messages,
    written: Vec<Arc<Written>>,
}

/// A message of a prompt written: its hash and its list's chain hash up to it.
#[derive(Debug)]
struct Written {
    hash: String,
    chain: String,
}

/// How many recent message lists a writer keeps (concurrent branches interleave their
/// conversations).
const RECENT: usize = 8;

/// What a file being read has shown so far.
#[derive(Default)]
struct ReaderState {
    /// Pieces by hash: their JSON text.
    pieces: HashMap<String, String>,
    /// Message lists of prompts read (and every beginning of each), by chain hash: a prompt
    /// naming one as its prefix continues it, sharing its messages as the prompts written
    /// did, so reading a long conversation neither copies nor parses its messages again.
    chains: HashMap<String, Messages>,
    /// Pieces already parsed, each an `Arc` of its type (every prompt repeats the messages
    /// before it: parsing each once and sharing it after is several times faster).
    parsed: HashMap<String, Box<dyn std::any::Any>>,
}

/// The chain hash of a list whose first messages have chain hash `before`, and then `message`.
fn chain(before: &str, message: &str) -> String {
    let mut text = String::with_capacity(before.len() + message.len());
    text.push_str(before);
    text.push_str(message);
    crate::content_hash(&text)
}

thread_local! {
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

/// The content of a file being written: which pieces it already holds.
#[derive(Debug, Default)]
pub(crate) struct ContentWriter {
    state: WriterState,
}

impl ContentWriter {
    /// Runs `serialize` in file mode; returns its result and the pieces it used that the file
    /// does not hold yet (hash and JSON text), which the caller writes first.
    pub(crate) fn serialize<R>(
        &mut self,
        serialize: impl FnOnce() -> R,
    ) -> (R, Vec<(String, String)>) {
        /// Takes the scope back, also when `serialize` panics.
        struct Guard<'a> {
            writer: &'a mut ContentWriter,
            fresh: Vec<(String, String)>,
        }
        impl Guard<'_> {
            fn finish(&mut self) {
                if let Some(Scope::Writing { state, fresh }) = SCOPE.with(|s| s.borrow_mut().take())
                {
                    self.writer.state = state;
                    self.fresh = fresh;
                }
            }
        }
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                self.finish();
            }
        }
        let state = std::mem::take(&mut self.state);
        SCOPE.with(|s| {
            *s.borrow_mut() = Some(Scope::Writing {
                state,
                fresh: Vec::new(),
            })
        });
        let mut guard = Guard {
            writer: self,
            fresh: Vec::new(),
        };
        // Files keep an image's hash and size, and its bytes only when small.
        let result =
            crate::attachment::with_bytes_up_to(crate::attachment::TRACE_IMAGE_BYTES, serialize);
        guard.finish();
        (result, std::mem::take(&mut guard.fresh))
    }
}

/// The content lines of a file being read.
#[derive(Default)]
pub(crate) struct ContentStore {
    state: ReaderState,
}

impl ContentStore {
    /// Adds a piece read from a content line, checking that `hash` is the hash of `text`.
    pub(crate) fn add(&mut self, hash: &str, text: &str) -> Result<(), String> {
        let computed = crate::content_hash(text);
        if computed != hash {
            return Err(format!(
                "content {hash} does not match its value (whose hash is {computed})"
            ));
        }
        self.state
            .pieces
            .entry(computed)
            .or_insert_with(|| text.to_owned());
        Ok(())
    }

    /// Runs `deserialize` with this file's content at hand, if it has any.
    pub(crate) fn deserialize<R>(&mut self, deserialize: impl FnOnce() -> R) -> R {
        if self.state.pieces.is_empty() {
            return deserialize();
        }
        let state = std::mem::take(&mut self.state);
        SCOPE.with(|s| *s.borrow_mut() = Some(Scope::Reading(state)));
        struct Reset<'a>(&'a mut ContentStore);
        impl Drop for Reset<'_> {
            fn drop(&mut self) {
                if let Some(Scope::Reading(state)) = SCOPE.with(|s| s.borrow_mut().take()) {
                    self.0.state = state;
                }
            }
        }
        let _reset = Reset(self);
        deserialize()
    }
}

/// Whether this thread is writing a JSONL line (file mode).
fn writing() -> bool {
    SCOPE.with(|scope| matches!(*scope.borrow(), Some(Scope::Writing { .. })))
}

/// One piece of content: inline, or (in file mode) a hash.
struct Piece<'a, T>(&'a T);

impl<T: Serialize> Serialize for Piece<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !writing() {
            return self.0.serialize(s);
        }
        let hash = register(self.0).map_err(serde::ser::Error::custom)?;
        s.serialize_str(&hash)
    }
}

/// The hash of `item`, whose content line the file gets if it has none yet (file mode only).
fn register<T: Serialize>(item: &T) -> Result<String, serde_json::Error> {
    let text = serde_json::to_string(item)?;
    let hash = crate::content_hash(&text);
    SCOPE.with(|scope| {
        if let Some(Scope::Writing { state, fresh }) = &mut *scope.borrow_mut()
            && state.seen.insert(hash.clone())
        {
            fresh.push((hash.clone(), text));
        }
    });
    Ok(hash)
}

/// A prompt's messages: in file mode, a known prefix and the rest, by hash.
struct MessagesOut<'a>(&'a Messages);

impl Serialize for MessagesOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let messages = self.0;
        if !writing() {
            return messages.serialize(s);
        }
        let mut list = written_list(messages);
        // Only the messages no list of this storage had yet are hashed.
        for message in messages.iter().skip(list.written.len()) {
            let hash = register(message).map_err(serde::ser::Error::custom)?;
            let before = list.written.last().map_or("", |w| w.chain.as_str());
            let chain = chain(before, &hash);
            list.written.push(Arc::new(Written { hash, chain }));
        }
        if messages.len() > list.messages.len() {
            list.messages = messages.clone();
        }
        let len = messages.len();
        let known = SCOPE.with(|scope| match &mut *scope.borrow_mut() {
            Some(Scope::Writing { state, .. }) => {
                // Every beginning of a known list is known: the search stops at the first
                // message this file has not listed before.
                let known = list.written[..len]
                    .iter()
                    .rposition(|w| state.chains.contains(&w.chain));
                let new = known.map_or(0, |k| k + 1);
                state
                    .chains
                    .extend(list.written[new..len].iter().map(|w| w.chain.clone()));
                known
            }
            _ => None,
        });
        let result = match known {
            None => s.collect_seq(list.written[..len].iter().map(|w| w.hash.as_str())),
            Some(k) => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("prefix", &list.written[k].chain)?;
                let then: Vec<&str> = list.written[k + 1..len]
                    .iter()
                    .map(|w| w.hash.as_str())
                    .collect();
                map.serialize_entry("then", &then)?;
                map.end()
            }
        };
        SCOPE.with(|scope| {
            if let Some(Scope::Writing { state, .. }) = &mut *scope.borrow_mut() {
                state.recent.push_front(list);
                state.recent.truncate(RECENT);
            }
        });
        result
    }
}

/// The written list `messages` continues, taken out of the writer's recent lists: the one of
/// the same storage, else a new one starting with the longest beginning `messages` shares
/// with a recent list (whose messages have their hashes and content lines already).
fn written_list(messages: &Messages) -> WrittenList {
    SCOPE.with(|scope| {
        let mut scope = scope.borrow_mut();
        let Some(Scope::Writing { state, .. }) = &mut *scope else {
            return WrittenList {
                messages: messages.clone(),
                written: Vec::new(),
            };
        };
        if let Some(same) = state
            .recent
            .iter()
            .position(|list| list.messages.same_buffer(messages))
            .and_then(|i| state.recent.remove(i))
        {
            return same;
        }
        let base = state
            .recent
            .iter()
            .map(|list| {
                let shared = list
                    .messages
                    .iter()
                    .zip(messages)
                    .take_while(|(w, m)| std::ptr::eq(*w, *m) || w == m)
                    .count();
                (shared, list)
            })
            .max_by_key(|(shared, _)| *shared)
            .map(|(shared, list)| list.written[..shared].to_vec())
            .unwrap_or_default();
        WrittenList {
            messages: messages.clone(),
            written: base,
        }
    })
}

/// A prompt's messages read back: inline, by hash, or a known prefix and the rest.
struct MessagesIn(Messages);

impl<'de> Deserialize<'de> for MessagesIn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MessagesIn, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Item {
            Hash(String),
            Inline(Message),
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            List(Vec<Item>),
            Prefixed { prefix: String, then: Vec<String> },
        }
        // The list the new part continues, and its chain hash.
        let (mut list, mut last, hashes) = match Form::deserialize(d)? {
            Form::Prefixed { prefix, then } => {
                let list = SCOPE
                    .with(|scope| match &*scope.borrow() {
                        Some(Scope::Reading(state)) => state.chains.get(&prefix).cloned(),
                        _ => None,
                    })
                    .ok_or_else(|| {
                        de::Error::custom(format_args!(
                            "messages {prefix} are not in the file (no prompt before began with them)"
                        ))
                    })?;
                (list, prefix, then)
            }
            Form::List(items) => {
                if items.iter().all(|i| matches!(i, Item::Hash(_))) {
                    let hashes = items
                        .into_iter()
                        .filter_map(|i| match i {
                            Item::Hash(h) => Some(h),
                            Item::Inline(_) => None,
                        })
                        .collect();
                    (Messages::new(), String::new(), hashes)
                } else {
                    // Inline (or mixed): as written.
                    let mut messages = Vec::with_capacity(items.len());
                    for item in items {
                        messages.push(match item {
                            Item::Inline(m) => m,
                            Item::Hash(h) => resolve::<Message, D::Error>(&h)?,
                        });
                    }
                    return Ok(MessagesIn(messages.into()));
                }
            }
        };
        for hash in &hashes {
            list.push_shared(resolve_shared::<Message, D::Error>(hash)?);
            last = chain(&last, hash);
            // Remember each beginning for the prompts after it.
            SCOPE.with(|scope| {
                if let Some(Scope::Reading(state)) = &mut *scope.borrow_mut() {
                    state
                        .chains
                        .entry(last.clone())
                        .or_insert_with(|| list.clone());
                }
            });
        }
        Ok(MessagesIn(list))
    }
}

/// The piece with this hash, from the file's content lines.
fn resolve<T: DeserializeOwned + Clone + 'static, E: de::Error>(hash: &str) -> Result<T, E> {
    resolve_shared::<T, E>(hash).map(|piece| (*piece).clone())
}

/// The piece with this hash, shared with every other use of it in the file.
fn resolve_shared<T: DeserializeOwned + 'static, E: de::Error>(hash: &str) -> Result<Arc<T>, E> {
    let found = SCOPE.with(|scope| {
        let mut scope = scope.borrow_mut();
        let Some(Scope::Reading(state)) = &mut *scope else {
            return None;
        };
        if let Some(known) = state
            .parsed
            .get(hash)
            .and_then(|p| p.downcast_ref::<Arc<T>>())
        {
            return Some(Ok(known.clone()));
        }
        let text = state.pieces.get(hash)?;
        let parsed = serde_json::from_str::<T>(text)
            .map(Arc::new)
            .map_err(|e| E::custom(format_args!("content {hash}: {e}")));
        if let Ok(value) = &parsed {
            state
                .parsed
                .insert(hash.to_owned(), Box::new(value.clone()));
        }
        Some(parsed)
    });
    found.unwrap_or_else(|| {
        Err(E::custom(format_args!(
            "content {hash} is not in the file (no content line before it)"
        )))
    })
}

struct Pieces<'a, T>(&'a [T]);

impl<T: Serialize> Serialize for Pieces<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for item in self.0 {
            seq.serialize_element(&Piece(item))?;
        }
        seq.end()
    }
}

/// A piece read back: inline (an object) or a hash naming a content line.
struct Owned<T>(T);

impl<'de, T: DeserializeOwned + Clone + 'static> Deserialize<'de> for Owned<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Owned<T>, D::Error> {
        struct PieceVisitor<T>(PhantomData<T>);
        impl<'de, T: DeserializeOwned + Clone + 'static> Visitor<'de> for PieceVisitor<T> {
            type Value = Owned<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a message or tool, or the hash of a content line")
            }
            fn visit_str<E: de::Error>(self, hash: &str) -> Result<Owned<T>, E> {
                resolve(hash).map(Owned)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Owned<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Owned)
            }
        }
        d.deserialize_any(PieceVisitor(PhantomData))
    }
}

/// `#[serde(with)]` for an event's recorded prompt: messages and tools by hash in a file.
pub(crate) mod prompt {
    use super::*;

    #[derive(Serialize)]
    struct Out<'a> {
        messages: MessagesOut<'a>,
        #[serde(skip_serializing_if = "is_empty")]
        tools: Pieces<'a, ToolDefinition>,
        #[serde(skip_serializing_if = "is_default")]
        options: &'a InferOptions,
    }

    fn is_empty<T>(pieces: &Pieces<'_, T>) -> bool {
        pieces.0.is_empty()
    }

    fn is_default(options: &&InferOptions) -> bool {
        **options == InferOptions::default()
    }

    #[derive(Deserialize)]
    struct In {
        messages: MessagesIn,
        #[serde(default)]
        tools: Vec<Owned<ToolDefinition>>,
        #[serde(default)]
        options: InferOptions,
    }

    pub(crate) fn serialize<S: Serializer>(
        prompt: &Option<std::sync::Arc<Prompt>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match prompt {
            Some(p) => Out {
                messages: MessagesOut(&p.messages),
                tools: Pieces(&p.tools),
                options: &p.options,
            }
            .serialize(s),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<std::sync::Arc<Prompt>>, D::Error> {
        Ok(Option::<In>::deserialize(d)?.map(|p| {
            std::sync::Arc::new(Prompt {
                messages: p.messages.0,
                tools: p.tools.into_iter().map(|t| t.0).collect::<Vec<_>>().into(),
                options: p.options,
            })
        }))
    }
}

/// `#[serde(with)]` for an event's recorded reply: by hash in a file.
pub(crate) mod message {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        message: &Option<Message>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match message {
            Some(m) => Piece(m).serialize(s),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Message>, D::Error> {
        Ok(Option::<Owned<Message>>::deserialize(d)?.map(|m| m.0))
    }
}
