//! Context middleware: transforms of the conversation applied before each model call of the
//! agent loop — truncation to a token limit, eliding old tool results, compaction by a
//! model-written summary.
//!
//! Every transform keeps the system prompt (the leading system messages) and the newest user
//! message, never separates a tool call from its results (conversations are cut between
//! [`message_units`]), and keeps messages in their order.

use std::sync::Arc;

use agent_op::op::{self, Op};
use agent_op::{Message, Prompt};
use agent_prompt::{TokenCounter, message_units};

/// A transform of the conversation, run before each model call of an [`Agent`](crate::Agent)
/// (added with [`Agent::middleware`](crate::Agent::middleware)). It is a program, so a
/// transform that calls a model ([`Compact`]) is traced and budgeted like any call.
pub trait ContextLayer<S>: Send + Sync {
    /// The conversation to send instead of `messages`, and to go on from.
    fn apply(&self, messages: Vec<Message>) -> Op<S, Vec<Message>>;
}

/// The parts of a conversation every transform keeps, and the units it may cut.
struct Parts<'a> {
    /// The leading system messages.
    head: &'a [Message],
    /// Index (in `units`) of the unit holding the newest user message, if any.
    newest_user: Option<usize>,
    units: Vec<&'a [Message]>,
}

fn parts(messages: &[Message]) -> Parts<'_> {
    let head_len = messages
        .iter()
        .take_while(|m| matches!(m, Message::System { .. }))
        .count();
    let (head, rest) = messages.split_at(head_len);
    let units = message_units(rest);
    let newest_user = units
        .iter()
        .rposition(|u| matches!(u.first(), Some(Message::User { .. })));
    Parts {
        head,
        newest_user,
        units,
    }
}

/// Drops the oldest parts of the conversation until it fits `max_tokens` (counted with the
/// model's encoding, message overheads included): the system prompt and the newest user
/// message always stay, and then the newest units that fit. If those alone exceed the limit,
/// they are all that is sent.
pub fn truncate(messages: &[Message], max_tokens: u32, counter: &TokenCounter) -> Vec<Message> {
    let parts = parts(messages);
    let mut used = counter.count_messages(parts.head);
    if let Some(i) = parts.newest_user {
        used = used.saturating_add(counter.count_messages(parts.units[i]));
    }
    let mut keep = vec![false; parts.units.len()];
    if let Some(i) = parts.newest_user {
        keep[i] = true;
    }
    for i in (0..parts.units.len()).rev() {
        if keep[i] {
            continue;
        }
        let n = counter.count_messages(parts.units[i]);
        if used.saturating_add(n) > max_tokens {
            // Newer units only: an older one that fits would leave a gap in the middle.
            break;
        }
        used += n;
        keep[i] = true;
    }
    let mut out = parts.head.to_vec();
    for (unit, kept) in parts.units.iter().zip(keep) {
        if kept {
            out.extend(unit.iter().cloned());
        }
    }
    out
}

/// Replaces the content of every tool result but the newest `keep` with a one-line stub
/// (`[tool result elided: 1234 chars]`); the results stay, so every call still has its
/// answer.
pub fn elide_tool_results(messages: &[Message], keep: usize) -> Vec<Message> {
    let results = messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count();
    let mut to_elide = results.saturating_sub(keep);
    messages
        .iter()
        .map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                attachments,
            } if to_elide > 0 => {
                to_elide -= 1;
                let images = if attachments.is_empty() {
                    String::new()
                } else {
                    format!(", {} attachment(s)", attachments.len())
                };
                Message::tool_result(
                    tool_call_id.clone(),
                    format!(
                        "[tool result elided: {} chars{images}]",
                        content.chars().count()
                    ),
                )
            }
            other => other.clone(),
        })
        .collect()
}

/// [`truncate`] as a layer.
#[derive(Clone, Debug)]
pub struct Truncate {
    max_tokens: u32,
    counter: Arc<TokenCounter>,
}

impl Truncate {
    /// At most `max_tokens`, counted in `model`'s encoding.
    pub fn new(max_tokens: u32, model: &str) -> Truncate {
        Truncate {
            max_tokens,
            counter: Arc::new(TokenCounter::for_model(model)),
        }
    }
}

impl<S> ContextLayer<S> for Truncate {
    fn apply(&self, messages: Vec<Message>) -> Op<S, Vec<Message>> {
        op::pure(truncate(&messages, self.max_tokens, &self.counter))
    }
}

/// [`elide_tool_results`] as a layer.
#[derive(Clone, Copy, Debug)]
pub struct ElideToolResults {
    keep: usize,
}

impl ElideToolResults {
    /// Keeps the newest `keep` tool results whole.
    pub fn keep(keep: usize) -> ElideToolResults {
        ElideToolResults { keep }
    }
}

impl<S> ContextLayer<S> for ElideToolResults {
    fn apply(&self, messages: Vec<Message>) -> Op<S, Vec<Message>> {
        op::pure(elide_tool_results(&messages, self.keep))
    }
}

/// When the conversation passes `above_tokens`, asks `model` to summarize everything but the
/// system prompt, the newest user message and the newest `keep_recent` units, and sends the
/// summary (a system message after the system prompt) in their place. The summary is a model
/// call of the run: traced, inside its budgets.
#[derive(Clone, Debug)]
pub struct Compact {
    model: String,
    above_tokens: u32,
    keep_recent: usize,
    counter: Arc<TokenCounter>,
}

impl Compact {
    /// Compacts with `model` once the conversation is over `above_tokens`, keeping the
    /// newest `keep_recent` units as they are.
    pub fn new(model: impl Into<String>, above_tokens: u32, keep_recent: usize) -> Compact {
        let model = model.into();
        let counter = Arc::new(TokenCounter::for_model(&model));
        Compact {
            model,
            above_tokens,
            keep_recent,
            counter,
        }
    }
}

impl<S: 'static> ContextLayer<S> for Compact {
    fn apply(&self, messages: Vec<Message>) -> Op<S, Vec<Message>> {
        if self.counter.count_messages(&messages) <= self.above_tokens {
            return op::pure(messages);
        }
        let parts = parts(&messages);
        let n = parts.units.len();
        let recent_from = n.saturating_sub(self.keep_recent);
        let old: Vec<usize> = (0..recent_from)
            .filter(|i| Some(*i) != parts.newest_user)
            .collect();
        if old.is_empty() {
            return op::pure(messages);
        }
        let mut transcript = String::new();
        for &i in &old {
            for message in parts.units[i] {
                transcript.push_str(message.role());
                transcript.push_str(": ");
                transcript.push_str(message.content());
                if let Message::Assistant { tool_calls, .. } = message {
                    for call in tool_calls {
                        transcript.push_str(&format!(" [calls {}({})]", call.name, call.arguments));
                    }
                }
                transcript.push('\n');
            }
        }
        let head = parts.head.to_vec();
        let kept: Vec<Vec<Message>> = (0..n)
            .filter(|i| !old.contains(i))
            .map(|i| parts.units[i].to_vec())
            .collect();
        let prompt = Prompt::new()
            .system(
                "Summarize this earlier part of a conversation between a user, an assistant and \
                 its tools for the assistant to continue from. Keep facts, results, decisions \
                 and open questions; be brief.",
            )
            .user(transcript);
        op::infer_raw(self.model.clone(), prompt).map(move |summary| {
            let mut out = head;
            out.push(Message::system(format!(
                "Summary of the earlier conversation:\n{}",
                summary.content.trim()
            )));
            out.extend(kept.into_iter().flatten());
            out
        })
    }
}
