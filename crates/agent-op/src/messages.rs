//! [`Messages`]: a conversation that prompts share instead of copying.
//!
//! An agent loop sends the whole conversation with every model call, and the trace keeps every
//! prompt it sent. With a plain `Vec<Message>` each call copies the conversation, so a turn
//! costs more the longer the conversation, and a trace holds the square of it. A `Messages`
//! list is a view of the first `len` slots of a buffer shared with every list that grew from
//! the same messages: cloning one is a reference count, appending to the newest writes the
//! next slot in place, and each message is stored once however many prompts hold it.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::message::Message;

/// The fewest slots a buffer gets, so that a prompt built message by message does not
/// reallocate for each of its first few messages.
const MIN_CAPACITY: usize = 8;

/// Slots written once each, in order, shared by every list that grew from them.
struct Buffer {
    slots: Box<[OnceLock<Arc<Message>>]>,
    /// How many slots have been handed out for writing; it only grows, so a slot is written by
    /// the one append that claimed it, and a list's slots never change under it.
    claimed: AtomicUsize,
}

impl Buffer {
    /// A buffer of at least `capacity` slots holding `messages` first.
    fn with(messages: impl ExactSizeIterator<Item = Arc<Message>>, capacity: usize) -> Buffer {
        let capacity = capacity.max(messages.len()).max(MIN_CAPACITY);
        // Filled in place: one allocation of exactly `capacity` slots.
        let mut slots = Vec::with_capacity(capacity);
        slots.extend(messages.map(OnceLock::from));
        let len = slots.len();
        slots.resize_with(capacity, OnceLock::new);
        Buffer {
            slots: slots.into_boxed_slice(),
            claimed: AtomicUsize::new(len),
        }
    }
}

/// The messages of a conversation, oldest first: what [`Prompt::messages`](crate::Prompt)
/// holds.
///
/// It reads like a `Vec<Message>` (`len`, `iter`, `first`, `last`, `get`, indexing,
/// comparisons with vectors, arrays and slices, and the same JSON: an array of messages), but
/// clones share their messages instead of copying them. [`push`](Messages::push) onto the
/// longest list grown from a buffer writes in place; pushing onto an older clone (a fork of
/// the conversation) or a full buffer first moves the list to a new buffer of twice the room,
/// copying pointers, not messages. So building a prompt from a conversation costs the same
/// whatever its length, and a trace keeping every prompt of a loop holds each message once.
///
/// Messages cannot be changed in place (other lists may share them): edit a copy from
/// [`to_vec`](Messages::to_vec) and convert it back with `.into()`.
///
/// ```
/// use agent_op::{Message, Messages};
///
/// let mut conversation = Messages::from(vec![Message::system("Be brief."), Message::user("Hi")]);
/// let sent = conversation.clone(); // what a prompt holds: no message is copied
/// conversation.push(Message::assistant("Hello!"));
/// assert_eq!(sent.len(), 2);
/// assert_eq!(conversation.last(), Some(&Message::assistant("Hello!")));
/// assert_eq!(sent.shared_with(&conversation), 2);
/// ```
#[derive(Clone, Default)]
pub struct Messages {
    buffer: Option<Arc<Buffer>>,
    len: usize,
}

impl Messages {
    /// An empty list.
    pub fn new() -> Messages {
        Messages::default()
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slots of its messages.
    fn slots(&self) -> &[OnceLock<Arc<Message>>] {
        match &self.buffer {
            Some(buffer) => &buffer.slots[..self.len],
            None => &[],
        }
    }

    /// The message at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&Message> {
        self.slots().get(index)?.get().map(|m| &**m)
    }

    /// The first message.
    pub fn first(&self) -> Option<&Message> {
        self.get(0)
    }

    /// The last message.
    pub fn last(&self) -> Option<&Message> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }

    /// Its messages, oldest first.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            slots: self.slots().iter(),
        }
    }

    /// Whether it holds a message equal to `message`.
    pub fn contains(&self, message: &Message) -> bool {
        self.iter().any(|m| m == message)
    }

    /// A copy of its messages as a vector (each message cloned).
    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }

    /// Appends a message. Writes in place when this list is the longest grown from its
    /// buffer and the buffer has room; otherwise moves this list to a new buffer first.
    pub fn push(&mut self, message: Message) {
        self.push_shared(Arc::new(message));
    }

    /// Appends a message shared with whatever else holds it.
    pub(crate) fn push_shared(&mut self, message: Arc<Message>) {
        let message = match &self.buffer {
            Some(buffer)
                if self.len < buffer.slots.len()
                    && buffer
                        .claimed
                        .compare_exchange(
                            self.len,
                            self.len + 1,
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        )
                        .is_ok() =>
            {
                // The slot is this append's alone: no other list has grown past `len`.
                match buffer.slots[self.len].set(message) {
                    Ok(()) => {
                        self.len += 1;
                        return;
                    }
                    Err(message) => message,
                }
            }
            _ => message,
        };
        // Another list grew from here already (or there is no room): continue in a buffer of
        // our own, sharing the messages so far.
        let len = self.len + 1;
        let messages = self.shared().cloned().chain(std::iter::once(message));
        *self = Messages::from_shared(ExactLen(messages, len), len.saturating_mul(2));
    }

    /// A new list: `first`, then this list's messages (shared, not copied), in one buffer with
    /// room to grow as much again.
    pub(crate) fn prepended(&self, first: Message) -> Messages {
        let len = self.len + 1;
        let messages = std::iter::once(Arc::new(first)).chain(self.shared().cloned());
        Messages::from_shared(ExactLen(messages, len), len.saturating_mul(2))
    }

    /// A list of `messages` in a new buffer of at least `capacity` slots.
    fn from_shared(
        messages: impl ExactSizeIterator<Item = Arc<Message>>,
        capacity: usize,
    ) -> Messages {
        let len = messages.len();
        Messages {
            buffer: Some(Arc::new(Buffer::with(messages, capacity))),
            len,
        }
    }

    /// Its messages as shared pointers.
    fn shared(&self) -> impl ExactSizeIterator<Item = &Arc<Message>> {
        let slots = self.slots();
        ExactLen(slots.iter().filter_map(OnceLock::get), slots.len())
    }

    /// Keeps the first `len` messages (all of them if it holds fewer). The others stay with
    /// any list sharing them.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// How many of its first messages `other` holds too, as the same stored values rather
    /// than equal copies: a prompt made from a conversation shares all of its messages with
    /// the conversation and with the prompts made before it.
    pub fn shared_with(&self, other: &Messages) -> usize {
        if self.same_buffer(other) {
            return self.len.min(other.len);
        }
        self.shared()
            .zip(other.shared())
            .take_while(|(a, b)| Arc::ptr_eq(a, b))
            .count()
    }

    /// Whether both lists are views of the same buffer (so the shorter is a beginning of the
    /// longer).
    pub(crate) fn same_buffer(&self, other: &Messages) -> bool {
        match (&self.buffer, &other.buffer) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// An iterator over [`Messages`], oldest first.
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    slots: std::slice::Iter<'a, OnceLock<Arc<Message>>>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Message;

    fn next(&mut self) -> Option<&'a Message> {
        // Every slot of a list is written before the list exists, so none is skipped.
        self.slots.by_ref().find_map(|s| s.get().map(|m| &**m))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.slots.size_hint()
    }

    fn nth(&mut self, n: usize) -> Option<&'a Message> {
        // Skips in one step (`skip` from a known position stays O(1)).
        match self.slots.nth(n)?.get() {
            Some(m) => Some(m),
            None => self.next(),
        }
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        while let Some(slot) = self.slots.next_back() {
            if let Some(m) = slot.get() {
                return Some(m);
            }
        }
        None
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// An iterator whose length is known up front.
struct ExactLen<I>(I, usize);

impl<I: Iterator> Iterator for ExactLen<I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        let next = self.0.next();
        if next.is_some() {
            self.1 = self.1.saturating_sub(1);
        }
        next
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.1, Some(self.1))
    }
}

impl<I: Iterator> ExactSizeIterator for ExactLen<I> {}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a Message;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::ops::Index<usize> for Messages {
    type Output = Message;

    fn index(&self, index: usize) -> &Message {
        match self.get(index) {
            Some(message) => message,
            None => panic!(
                "index out of bounds: the len is {} but the index is {index}",
                self.len
            ),
        }
    }
}

impl From<Vec<Message>> for Messages {
    fn from(messages: Vec<Message>) -> Messages {
        messages.into_iter().collect()
    }
}

impl From<&[Message]> for Messages {
    fn from(messages: &[Message]) -> Messages {
        messages.iter().cloned().collect()
    }
}

impl<const N: usize> From<[Message; N]> for Messages {
    fn from(messages: [Message; N]) -> Messages {
        messages.into_iter().collect()
    }
}

impl From<Messages> for Vec<Message> {
    fn from(messages: Messages) -> Vec<Message> {
        messages.to_vec()
    }
}

impl FromIterator<Message> for Messages {
    fn from_iter<I: IntoIterator<Item = Message>>(iter: I) -> Messages {
        let messages: Vec<Arc<Message>> = iter.into_iter().map(Arc::new).collect();
        if messages.is_empty() {
            return Messages::new();
        }
        // Room to grow: a conversation built from a vector usually goes on.
        let capacity = messages.len().saturating_add(messages.len() / 2);
        Messages::from_shared(messages.into_iter(), capacity)
    }
}

impl Extend<Message> for Messages {
    fn extend<I: IntoIterator<Item = Message>>(&mut self, iter: I) {
        for message in iter {
            self.push(message);
        }
    }
}

impl fmt::Debug for Messages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Messages {
    fn eq(&self, other: &Messages) -> bool {
        self.len == other.len
            && (self.same_buffer(other)
                || self
                    .shared()
                    .zip(other.shared())
                    .all(|(a, b)| Arc::ptr_eq(a, b) || a == b))
    }
}

impl PartialEq<[Message]> for Messages {
    fn eq(&self, other: &[Message]) -> bool {
        self.len == other.len() && self.iter().eq(other)
    }
}

impl PartialEq<&[Message]> for Messages {
    fn eq(&self, other: &&[Message]) -> bool {
        *self == **other
    }
}

impl PartialEq<Vec<Message>> for Messages {
    fn eq(&self, other: &Vec<Message>) -> bool {
        *self == other[..]
    }
}

impl<const N: usize> PartialEq<[Message; N]> for Messages {
    fn eq(&self, other: &[Message; N]) -> bool {
        *self == other[..]
    }
}

impl PartialEq<Messages> for Vec<Message> {
    fn eq(&self, other: &Messages) -> bool {
        *other == self[..]
    }
}

impl PartialEq<Messages> for [Message] {
    fn eq(&self, other: &Messages) -> bool {
        *other == *self
    }
}

impl Serialize for Messages {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Messages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Messages, D::Error> {
        Vec::<Message>::deserialize(d).map(Messages::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(n: usize) -> Vec<Message> {
        (0..n).map(|i| Message::user(i.to_string())).collect()
    }

    #[test]
    fn clones_share_and_the_newest_grows_in_place() {
        let mut conversation = Messages::new();
        let mut sent = Vec::new();
        for m in numbered(100) {
            conversation.push(m);
            sent.push(conversation.clone());
        }
        for (i, prompt) in sent.iter().enumerate() {
            assert_eq!(prompt.len(), i + 1);
            assert_eq!(prompt.to_vec(), numbered(i + 1));
            // Every prompt's messages are the conversation's own, not copies.
            assert_eq!(prompt.shared_with(&conversation), i + 1);
        }
        // Growing in place: a buffer per doubling, not one per message.
        let buffers: std::collections::HashSet<*const Buffer> = sent
            .iter()
            .filter_map(|m| m.buffer.as_ref().map(Arc::as_ptr))
            .collect();
        assert!(buffers.len() <= 5, "{} buffers", buffers.len());
    }

    #[test]
    fn a_fork_does_not_change_what_the_other_branch_sees() {
        let mut a = Messages::from(numbered(3));
        let mut b = a.clone();
        a.push(Message::assistant("a"));
        b.push(Message::assistant("b"));
        assert_eq!(a.last(), Some(&Message::assistant("a")));
        assert_eq!(b.last(), Some(&Message::assistant("b")));
        assert_eq!(a.shared_with(&b), 3);
        assert_ne!(a, b);
        let mut c = a.clone();
        c.truncate(1);
        c.push(Message::user("c"));
        assert_eq!(c.to_vec(), vec![Message::user("0"), Message::user("c")]);
        assert_eq!(a.len(), 4);
        assert_eq!(a[1], Message::user("1"));
    }

    #[test]
    fn reads_compares_and_serializes_like_a_vector() {
        let vec = numbered(5);
        let messages = Messages::from(vec.clone());
        assert_eq!(messages, vec);
        assert_eq!(vec, messages);
        assert_eq!(
            Messages::from(vec[..2].to_vec()),
            [vec[0].clone(), vec[1].clone()]
        );
        assert_eq!(messages.iter().next_back(), vec.last());
        assert_eq!(messages.iter().len(), 5);
        assert_eq!(messages.get(5), None);
        assert_eq!(format!("{messages:?}"), format!("{vec:?}"));
        let json = serde_json::to_string(&messages).unwrap();
        assert_eq!(json, serde_json::to_string(&vec).unwrap());
        assert_eq!(serde_json::from_str::<Messages>(&json).unwrap(), messages);
        // Equal copies are equal, though not shared.
        let copy = Messages::from(vec.clone());
        assert_eq!(copy, messages);
        assert_eq!(copy.shared_with(&messages), 0);
    }

    #[test]
    fn lists_grow_from_threads_at_once_without_losing_a_message() {
        let base = Messages::from(numbered(2));
        let grown: Vec<Messages> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let mut mine = base.clone();
                    scope.spawn(move || {
                        for i in 0..50 {
                            mine.push(Message::assistant(format!("{t}.{i}")));
                        }
                        mine
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (t, mine) in grown.iter().enumerate() {
            assert_eq!(mine.len(), 52);
            assert_eq!(mine.shared_with(&base), 2);
            for (i, m) in mine.iter().skip(2).enumerate() {
                assert_eq!(m.content(), format!("{t}.{i}"));
            }
        }
    }
}
