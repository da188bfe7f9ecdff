//! Trace events: what happened during a run, with previews (never full prompts or outputs).
//!
//! An [`Event`] is a timestamp and an [`EventKind`]. In JSON an event is
//! `{"at": "<RFC 3339>", "type": "<snake_case kind>", "data": {..payload..}}`; see
//! `docs/TRACE_FORMAT.md`.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::budget::{Budget, Exhausted, TimedOut};
use crate::cost::MicroUsd;
use crate::message::FinishReason;
use crate::serde_util::duration_ms;
use crate::steering::Steering;
use crate::trace::TraceId;

/// A point in time (UTC), serialized as RFC 3339.
pub type Timestamp = DateTime<Utc>;

/// Something that happened during a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// When it happened.
    pub at: Timestamp,
    /// What happened.
    pub kind: EventKind,
}

impl Event {
    /// An event happening now.
    pub fn now(kind: impl Into<EventKind>) -> Event {
        Event {
            at: crate::trace::now(),
            kind: kind.into(),
        }
    }

    /// An event that happened at `at`.
    pub fn at(at: Timestamp, kind: impl Into<EventKind>) -> Event {
        Event {
            at,
            kind: kind.into(),
        }
    }

    /// The event's type.
    pub fn event_type(&self) -> EventType {
        self.kind.event_type()
    }
}

/// Declares the event kinds once: the [`EventKind`] enum, the matching [`EventType`] tags and
/// their JSON names, and the per-kind serde dispatch.
macro_rules! event_kinds {
    ($( $(#[$doc:meta])* $variant:ident($payload:ty) = $name:literal, )*) => {
        /// What happened. Each variant holds a payload struct of the same name.
        #[derive(Clone, Debug, PartialEq)]
        #[non_exhaustive]
        pub enum EventKind {
            $( $(#[$doc])* $variant($payload), )*
        }

        /// The type of an event, without its payload: for filtering and as the JSON `type` tag.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum EventType {
            $( $(#[$doc])* $variant, )*
        }

        impl EventType {
            /// Every event type, in declaration order.
            pub const ALL: &'static [EventType] = &[$(EventType::$variant),*];

            /// The JSON name of this type (`infer_start`, `tool_result`, ...).
            pub fn as_str(self) -> &'static str {
                match self { $(EventType::$variant => $name,)* }
            }

            /// The type with this JSON name.
            pub fn from_name(name: &str) -> Option<EventType> {
                match name { $($name => Some(EventType::$variant),)* _ => None }
            }
        }

        impl EventKind {
            /// The type of this event.
            pub fn event_type(&self) -> EventType {
                match self { $(EventKind::$variant(_) => EventType::$variant,)* }
            }

            fn serialize_data<S: SerializeStruct>(&self, st: &mut S) -> Result<(), S::Error> {
                match self { $(EventKind::$variant(p) => st.serialize_field("data", p),)* }
            }

            fn next_data<'de, A: MapAccess<'de>>(ty: EventType, map: &mut A) -> Result<EventKind, A::Error> {
                Ok(match ty { $(EventType::$variant => EventKind::$variant(map.next_value()?),)* })
            }

            fn from_value(ty: EventType, data: Value) -> Result<EventKind, serde_json::Error> {
                Ok(match ty { $(EventType::$variant => EventKind::$variant(serde_json::from_value(data)?),)* })
            }
        }
    };
}

event_kinds! {
    /// The context of an `infer` call was built: what each source produced, what compilation
    /// kept, shrank and dropped, and why. Comes right before the call's `infer_start`.
    Context(Box<crate::context::ContextReport>) = "context",
    /// A model call is starting.
    InferStart(InferStart) = "infer_start",
    /// A model call returned.
    InferEnd(InferEnd) = "infer_end",
    /// A tool is being called.
    ToolCall(ToolCall) = "tool_call",
    /// A tool returned (successfully or with a tool error).
    ToolResult(ToolResult) = "tool_result",
    /// A call of a tool outside the tool scope in force was refused (nothing ran).
    ToolDenied(ToolDenied) = "tool_denied",
    /// The program read a labelled part of its state.
    StateRead(StateAccess) = "state_read",
    /// The program wrote a labelled part of its state.
    StateWrite(StateAccess) = "state_write",
    /// A `par` or `race` started its branches.
    Fork(Fork) = "fork",
    /// A `par` or `race` finished and the program continues.
    Join(Join) = "join",
    /// A checkpoint was taken.
    Checkpoint(CheckpointReached) = "checkpoint",
    /// A `limit` started.
    Limit(LimitStart) = "limit",
    /// A `limit`'s budget ran out; its program was stopped.
    Exhausted(Exhausted) = "exhausted",
    /// A `timeout` started.
    Timeout(TimeoutStart) = "timeout",
    /// A `timeout` passed; its program was stopped.
    TimedOut(TimedOut) = "timed_out",
    /// The program received a steering message.
    Steering(Steering) = "steering",
    /// A memory was stored.
    Remember(Remember) = "remember",
    /// Memories were recalled.
    Recall(Recall) = "recall",
    /// A memory was deleted.
    Forget(Forget) = "forget",
    /// An event the program emitted itself.
    Custom(Custom) = "custom",
    /// Something failed the run (or the branch it happened in).
    Error(Failure) = "error",
    /// The run ended: how (its value or its error) and what it spent. The last event of a
    /// run's trace, recorded once, in the run itself (never in a branch). *Since version 3.*
    RunEnd(RunEnd) = "run_end",
}

/// Payload of [`EventKind::InferStart`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InferStart {
    /// The model called.
    pub model: String,
    /// A preview of the last message of the prompt.
    pub prompt_preview: String,
    /// How many messages the prompt has.
    pub messages: u32,
    /// How many tools were offered.
    pub tools: u32,
    /// How many model calls this branch made before this one.
    pub iteration: u32,
    /// The whole request: every message, the tools offered and the options (the response
    /// format among them), when the run records content (`Config::record_content`, on by
    /// default). In a JSONL file each message and tool is stored once (see
    /// `docs/TRACE_FORMAT.md`). *Since version 3.*
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::trace::content::prompt"
    )]
    pub prompt: Option<std::sync::Arc<crate::message::Prompt>>,
}

/// Payload of [`EventKind::InferEnd`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InferEnd {
    /// The model called.
    pub model: String,
    /// A preview of the reply text.
    pub response_preview: String,
    /// How many tool calls the reply asked for.
    pub tool_calls: u32,
    /// Why the model stopped.
    pub finish_reason: FinishReason,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Reply tokens.
    pub output_tokens: u64,
    /// What it cost; absent when unknown (never a guessed zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<MicroUsd>,
    /// How long the call took, in microseconds.
    pub duration_us: u64,
    /// The iteration of the matching [`InferStart`].
    pub iteration: u32,
    /// The whole reply, as the assistant message it adds to the conversation (text and tool
    /// calls), when the run records content. *Since version 3.*
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::trace::content::message"
    )]
    pub reply: Option<crate::message::Message>,
}

/// Payload of [`EventKind::ToolCall`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// The arguments.
    pub args: Value,
    /// The id the model gave the call, when a model asked for it (format version 2; absent
    /// in older traces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// How many model calls this branch had made when the tool was called.
    pub iteration: u32,
}

/// Payload of [`EventKind::ToolResult`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The tool's name.
    pub name: String,
    /// Whether it succeeded (a [`ToolError`](crate::ToolError) is `false`).
    pub success: bool,
    /// A preview of the output or error.
    pub output_preview: String,
    /// How long the call took, in microseconds.
    pub duration_us: u64,
    /// The iteration of the matching [`ToolCall`].
    pub iteration: u32,
    /// The whole output, or the error's text for a failure, when the run records content.
    /// A tool that returned JSON `null` has `Some(Value::Null)` (written `"output":null`).
    /// *Since version 3.*
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Value>,
}

/// A member that is there, even as `null`, is `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Payload of [`EventKind::ToolDenied`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDenied {
    /// The tool asked for.
    pub name: String,
    /// The innermost scope that refused it.
    pub scope: String,
    /// The tools that scope allows.
    pub allowed: Vec<String>,
    /// How many model calls this branch had made when the tool was asked for.
    pub iteration: u32,
}

/// Payload of [`EventKind::StateRead`] and [`EventKind::StateWrite`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateAccess {
    /// The label of the part of the state.
    pub key: String,
}

/// Whether branches run as a `par` (all must succeed) or a `race` (first success wins).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ForkKind {
    /// All branches run; all results are kept.
    Par,
    /// The first branch to succeed wins; the others are cancelled.
    Race,
}

/// Payload of [`EventKind::Fork`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fork {
    /// `par` or `race`.
    pub kind: ForkKind,
    /// How many branches.
    pub branch_count: u32,
    /// The branches' trace ids, in declaration order.
    pub branch_ids: Vec<TraceId>,
}

/// Payload of [`EventKind::Join`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Join {
    /// `par` or `race`.
    pub kind: ForkKind,
    /// The branches' trace ids, in declaration order.
    pub branch_ids: Vec<TraceId>,
    /// For a race, the index of the winning branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winner: Option<u32>,
}

/// Payload of [`EventKind::Checkpoint`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointReached {
    /// The checkpoint's name.
    pub name: String,
}

/// Payload of [`EventKind::Limit`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitStart {
    /// The budget in force.
    pub budget: Budget,
}

/// Payload of [`EventKind::Timeout`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimeoutStart {
    /// The time limit (serialized as milliseconds).
    #[serde(with = "duration_ms")]
    pub limit: std::time::Duration,
}

/// Payload of [`EventKind::Remember`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Remember {
    /// The new memory's id.
    pub id: crate::memory::MemoryId,
    /// A preview of the content.
    pub content_preview: String,
    /// A hash of the full content (`sha256:<hex>`), to correlate without storing it.
    pub content_hash: String,
    /// The memory's tags.
    pub tags: Vec<crate::memory::Tag>,
}

/// Payload of [`EventKind::Recall`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recall {
    /// A preview of the query.
    pub query_preview: String,
    /// A hash of the full query (`sha256:<hex>`).
    pub query_hash: String,
    /// How many entries came back.
    pub results: u32,
    /// Their ids, best first.
    pub ids: Vec<crate::memory::MemoryId>,
}

/// Payload of [`EventKind::Forget`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Forget {
    /// The id to delete.
    pub id: crate::memory::MemoryId,
    /// Whether there was such a memory.
    pub existed: bool,
}

/// Payload of [`EventKind::Custom`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Custom {
    /// The program's name for the event.
    pub name: String,
    /// Any data.
    pub data: Value,
}

/// Payload of [`EventKind::Error`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// What failed.
    pub message: String,
}

/// How a run ended: see [`RunEnd`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunOutcome {
    /// The program returned a value.
    Succeeded,
    /// The program failed (its error is in [`RunEnd::error`]).
    Failed,
    /// The run was aborted from outside (its abort token was cancelled).
    Aborted,
}

impl RunOutcome {
    /// `succeeded`, `failed` or `aborted`, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Succeeded => "succeeded",
            RunOutcome::Failed => "failed",
            RunOutcome::Aborted => "aborted",
        }
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error a run failed with, in [`RunEnd::error`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFailure {
    /// A short, stable name of the kind of failure (`program`, `provider`, `exhausted`, …).
    pub kind: String,
    /// The error's message, causes included.
    pub message: String,
}

/// What model calls used, as recorded in [`RunEnd`]: see [`Trace::spend`](crate::Trace::spend).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpentRecord {
    /// Model calls started.
    pub calls: u64,
    /// Prompt tokens of the calls that finished.
    pub input_tokens: u64,
    /// Reply tokens of the calls that finished.
    pub output_tokens: u64,
    /// What the calls cost; absent unless every call's cost is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<MicroUsd>,
}

impl SpentRecord {
    /// No calls, nothing spent (known to be free).
    pub const NOTHING: SpentRecord = SpentRecord {
        calls: 0,
        input_tokens: 0,
        output_tokens: 0,
        cost: Some(MicroUsd(0)),
    };

    fn nothing() -> SpentRecord {
        SpentRecord::NOTHING
    }

    fn is_nothing(&self) -> bool {
        *self == SpentRecord::NOTHING
    }
}

impl From<&crate::trace::SpendPart> for SpentRecord {
    fn from(part: &crate::trace::SpendPart) -> SpentRecord {
        SpentRecord {
            calls: part.calls,
            input_tokens: part.tokens.input_tokens,
            output_tokens: part.tokens.output_tokens,
            cost: part.cost.exact(),
        }
    }
}

/// Payload of [`EventKind::RunEnd`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    /// Whether the run succeeded, failed or was aborted.
    pub outcome: RunOutcome,
    /// A preview of the value, when the run succeeded with text, JSON, a number, a boolean
    /// or `()`; absent for values of other types (the engine cannot show them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_preview: Option<String>,
    /// The error, when the run failed or was aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunFailure>,
    /// What the model calls of the run and of the branches whose work it kept used.
    pub spent: SpentRecord,
    /// What the calls of cancelled or discarded branches (a `race`'s losers) used: really
    /// spent, but reflected in no result. Omitted when [nothing](SpentRecord::NOTHING).
    #[serde(
        default = "SpentRecord::nothing",
        skip_serializing_if = "SpentRecord::is_nothing"
    )]
    pub discarded: SpentRecord,
    /// The run's wall time, from its start to its end, in microseconds: the one duration
    /// every reader of a trace reports for the run.
    pub duration_us: u64,
}

impl EventKind {
    /// A custom event.
    pub fn custom(name: impl Into<String>, data: Value) -> EventKind {
        EventKind::Custom(Custom {
            name: name.into(),
            data,
        })
    }

    /// A state-read event for the part of the state labelled `key`.
    pub fn state_read(key: impl Into<String>) -> EventKind {
        EventKind::StateRead(StateAccess { key: key.into() })
    }

    /// A state-write event for the part of the state labelled `key`.
    pub fn state_write(key: impl Into<String>) -> EventKind {
        EventKind::StateWrite(StateAccess { key: key.into() })
    }

    /// An error event.
    pub fn error(message: impl Into<String>) -> EventKind {
        EventKind::Error(Failure {
            message: message.into(),
        })
    }

    /// Whether this event holds content a JSONL file stores once by hash (a recorded prompt
    /// or reply).
    pub fn has_shared_content(&self) -> bool {
        match self {
            EventKind::InferStart(e) => e.prompt.is_some(),
            EventKind::InferEnd(e) => e.reply.is_some(),
            _ => false,
        }
    }

    /// The iteration number of model and tool events.
    pub fn iteration(&self) -> Option<u32> {
        match self {
            EventKind::InferStart(e) => Some(e.iteration),
            EventKind::InferEnd(e) => Some(e.iteration),
            EventKind::ToolCall(e) => Some(e.iteration),
            EventKind::ToolResult(e) => Some(e.iteration),
            EventKind::ToolDenied(e) => Some(e.iteration),
            _ => None,
        }
    }

    /// This event with its measured durations set to zero (and, for [`RunEnd`], what discarded
    /// branches spent, which depends on scheduling), so runs can be compared regardless of
    /// timing.
    pub fn without_timing(&self) -> EventKind {
        let mut kind = self.clone();
        match &mut kind {
            EventKind::InferEnd(e) => e.duration_us = 0,
            EventKind::ToolResult(e) => e.duration_us = 0,
            EventKind::Context(report) => **report = report.without_timing(),
            // What losers spent depends on how far they got before the winner finished.
            EventKind::RunEnd(e) => {
                e.duration_us = 0;
                e.discarded = SpentRecord::NOTHING;
            }
            _ => {}
        }
        kind
    }
}

impl From<Custom> for EventKind {
    fn from(c: Custom) -> EventKind {
        EventKind::Custom(c)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<EventType, D::Error> {
        struct TypeVisitor;
        impl Visitor<'_> for TypeVisitor {
            type Value = EventType;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event type name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<EventType, E> {
                EventType::from_name(s)
                    .ok_or_else(|| E::custom(format_args!("unknown event type `{s}`")))
            }
        }
        d.deserialize_str(TypeVisitor)
    }
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Event", 3)?;
        st.serialize_field("at", &self.at)?;
        st.serialize_field("type", &self.kind.event_type())?;
        self.kind.serialize_data(&mut st)?;
        st.end()
    }
}

enum EventField {
    At,
    Type,
    Data,
    Other,
}

impl<'de> Deserialize<'de> for EventField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<EventField, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = EventField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event field")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<EventField, E> {
                Ok(match s {
                    "at" => EventField::At,
                    "type" => EventField::Type,
                    "data" => EventField::Data,
                    _ => EventField::Other,
                })
            }
        }
        d.deserialize_identifier(FieldVisitor)
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Event, D::Error> {
        struct EventVisitor;
        impl<'de> Visitor<'de> for EventVisitor {
            type Value = Event;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event object with `at`, `type` and `data`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event, A::Error> {
                let mut at = None;
                let mut ty = None;
                let mut kind = None;
                // `data` before `type` is valid JSON from other writers; buffer it then.
                let mut early_data: Option<Value> = None;
                while let Some(field) = map.next_key::<EventField>()? {
                    match field {
                        EventField::At => at = Some(map.next_value()?),
                        EventField::Type => ty = Some(map.next_value::<EventType>()?),
                        EventField::Data => match ty {
                            Some(ty) => kind = Some(EventKind::next_data(ty, &mut map)?),
                            None => early_data = Some(map.next_value()?),
                        },
                        EventField::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                let at = at.ok_or_else(|| de::Error::missing_field("at"))?;
                let ty = ty.ok_or_else(|| de::Error::missing_field("type"))?;
                let kind = match (kind, early_data) {
                    (Some(kind), _) => kind,
                    (None, Some(data)) => {
                        EventKind::from_value(ty, data).map_err(de::Error::custom)?
                    }
                    (None, None) => return Err(de::Error::missing_field("data")),
                };
                Ok(Event { at, kind })
            }
        }
        d.deserialize_struct("Event", &["at", "type", "data"], EventVisitor)
    }
}
