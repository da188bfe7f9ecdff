//! [`Trace`]: the events of a run and its branches, with queries.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cost::MicroUsd;
use crate::message::Usage;
use crate::serde_util::is_false;
use crate::trace::{Event, EventKind, EventType, Timestamp, TraceId};

/// One event of a trace, with the id of the run or branch it happened in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// The run or branch the event belongs to.
    pub trace_id: TraceId,
    /// The branch was cancelled, or its outcome discarded, because a sibling decided its `par`
    /// or `race` first. A sequential run never starts such a branch, so canonical traces leave
    /// these events out.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancelled: bool,
    /// What happened.
    pub event: Event,
}

/// Everything that happened during a run: its events and those of every branch it forked, in
/// a deterministic order (each `Fork` is followed by its branches' events in declaration order,
/// then the `Join`).
///
/// ```
/// use agent_op::{Event, EventKind, Trace, TraceId};
/// let mut trace = Trace::new(TraceId::from("calm-owl-0001"));
/// trace.append(Event::now(EventKind::custom("started", serde_json::json!({}))));
/// assert_eq!(trace.events.len(), 1);
/// assert_eq!(trace.infer_calls(), 0);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// The trace's id.
    pub id: TraceId,
    /// The trace this one forked from, for a branch's own trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<TraceId>,
    /// When the run started.
    pub start: Timestamp,
    /// When the run ended, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Timestamp>,
    /// The events, oldest first within each branch.
    pub events: Vec<TraceEntry>,
}

/// Money spent by the model calls of a trace.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CostSummary {
    /// The sum of the calls whose cost is known.
    pub known: MicroUsd,
    /// How many calls have an unknown cost.
    pub unknown_calls: u64,
}

impl CostSummary {
    /// The exact total, if every call's cost is known.
    pub fn exact(&self) -> Option<MicroUsd> {
        (self.unknown_calls == 0).then_some(self.known)
    }
}

/// What model calls used, split by whether the run kept their branches' work: see
/// [`Trace::spend`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Spend {
    /// Calls in the run and in branches whose outcome it kept.
    pub kept: SpendPart,
    /// Calls in branches that were cancelled or whose outcome was discarded — the losers of a
    /// `race`, branches stopped by a failing sibling — marked
    /// [`cancelled`](TraceEntry::cancelled) in the trace. They really happened and budgets
    /// counted them, but no result reflects them.
    pub discarded: SpendPart,
}

impl Spend {
    /// Kept and discarded together: everything the run spent.
    pub fn total(&self) -> SpendPart {
        let (a, b) = (&self.kept, &self.discarded);
        SpendPart {
            calls: a.calls.saturating_add(b.calls),
            tokens: Usage {
                input_tokens: a.tokens.input_tokens.saturating_add(b.tokens.input_tokens),
                output_tokens: a
                    .tokens
                    .output_tokens
                    .saturating_add(b.tokens.output_tokens),
            },
            cost: CostSummary {
                known: a.cost.known.saturating_add(b.cost.known),
                unknown_calls: a.cost.unknown_calls.saturating_add(b.cost.unknown_calls),
            },
        }
    }
}

/// Model calls and what they used: one side of a [`Spend`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpendPart {
    /// Calls started (each `InferStart`), finished or not.
    pub calls: u64,
    /// Tokens reported by the calls that finished.
    pub tokens: Usage,
    /// Their cost; a call cut short before it finished has an unknown cost.
    pub cost: CostSummary,
}

/// One tool call found in a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCallRecord {
    /// The branch it happened in.
    pub trace_id: TraceId,
    /// The tool.
    pub name: String,
    /// The arguments.
    pub args: Value,
    /// Whether it succeeded; `None` if no result was recorded (it was cut short).
    pub success: Option<bool>,
    /// A preview of the output, if a result was recorded.
    pub result_preview: Option<String>,
    /// How long it took, if a result was recorded.
    pub duration: Option<Duration>,
}

impl Trace {
    /// An empty trace starting now.
    pub fn new(id: TraceId) -> Trace {
        Trace {
            id,
            parent_id: None,
            start: crate::trace::now(),
            end: None,
            events: Vec::new(),
        }
    }

    /// Appends an event under this trace's own id.
    pub fn append(&mut self, event: Event) {
        self.events.push(TraceEntry {
            trace_id: self.id.clone(),
            cancelled: false,
            event,
        });
    }

    /// Appends every event of `other`, keeping their trace ids, and widens this trace's time
    /// span to cover it. Nothing is dropped or deduplicated.
    pub fn merge(&mut self, other: Trace) {
        self.start = self.start.min(other.start);
        self.end = match (self.end, other.end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        self.events.extend(other.events);
    }

    fn kinds(&self) -> impl Iterator<Item = &EventKind> {
        self.events.iter().map(|e| &e.event.kind)
    }

    /// What the model calls cost.
    pub fn total_cost(&self) -> CostSummary {
        let mut summary = CostSummary::default();
        for kind in self.kinds() {
            if let EventKind::InferEnd(end) = kind {
                match end.cost {
                    Some(c) => summary.known += c,
                    None => summary.unknown_calls += 1,
                }
            }
        }
        summary
    }

    /// Tokens used by the model calls.
    pub fn total_tokens(&self) -> Usage {
        let mut usage = Usage::default();
        for kind in self.kinds() {
            if let EventKind::InferEnd(end) = kind {
                usage.input_tokens = usage.input_tokens.saturating_add(end.input_tokens);
                usage.output_tokens = usage.output_tokens.saturating_add(end.output_tokens);
            }
        }
        usage
    }

    /// From the start to the end of the run (or to its last event, if it has not ended).
    pub fn total_duration(&self) -> Option<Duration> {
        let end = self
            .end
            .or_else(|| self.events.iter().map(|e| e.event.at).max())?;
        (end - self.start).to_std().ok()
    }

    /// Every tool call, each paired with the result that followed it in the same branch.
    pub fn tool_calls(&self) -> Vec<ToolCallRecord> {
        let mut records: Vec<ToolCallRecord> = Vec::new();
        // Index of the call in `records` still waiting for its result, per branch.
        let mut open: BTreeMap<&TraceId, usize> = BTreeMap::new();
        for entry in &self.events {
            match &entry.event.kind {
                EventKind::ToolCall(call) => {
                    open.insert(&entry.trace_id, records.len());
                    records.push(ToolCallRecord {
                        trace_id: entry.trace_id.clone(),
                        name: call.name.clone(),
                        args: call.args.clone(),
                        success: None,
                        result_preview: None,
                        duration: None,
                    });
                }
                EventKind::ToolResult(result) => {
                    if let Some(i) = open.remove(&entry.trace_id) {
                        let record = &mut records[i];
                        record.success = Some(result.success);
                        record.result_preview = Some(result.output_preview.clone());
                        record.duration = Some(Duration::from_micros(result.duration_us));
                    }
                }
                _ => {}
            }
        }
        records
    }

    /// What the model calls used, kept and discarded apart: a `race`'s losing branches
    /// really called models (and budgets counted those calls), which this reports separately
    /// from the calls whose work the run kept.
    pub fn spend(&self) -> Spend {
        let mut spend = Spend::default();
        for entry in &self.events {
            let part = if entry.cancelled {
                &mut spend.discarded
            } else {
                &mut spend.kept
            };
            match &entry.event.kind {
                EventKind::InferStart(_) => {
                    part.calls = part.calls.saturating_add(1);
                    // Unknown until its end says otherwise.
                    part.cost.unknown_calls = part.cost.unknown_calls.saturating_add(1);
                }
                EventKind::InferEnd(end) => {
                    let tokens = &mut part.tokens;
                    tokens.input_tokens = tokens.input_tokens.saturating_add(end.input_tokens);
                    tokens.output_tokens = tokens.output_tokens.saturating_add(end.output_tokens);
                    if let Some(cost) = end.cost {
                        part.cost.known = part.cost.known.saturating_add(cost);
                        part.cost.unknown_calls = part.cost.unknown_calls.saturating_sub(1);
                    }
                }
                _ => {}
            }
        }
        spend
    }

    /// How the run ended, from its `run_end` event: `None` for a trace of a run that has not
    /// ended (or was cut short before recording it, or was written before format version 3).
    pub fn run_end(&self) -> Option<&crate::trace::RunEnd> {
        // It is the run's last event; search backwards so a finished trace answers at once.
        self.events.iter().rev().find_map(|e| match &e.event.kind {
            EventKind::RunEnd(end) if e.trace_id == self.id => Some(end),
            _ => None,
        })
    }

    /// The run's wall time, the one duration every reader reports for it: what its `run_end`
    /// recorded; else, for a trace without one, from its start to its end, or to its latest
    /// event if it has no end.
    pub fn wall_time(&self) -> Duration {
        if let Some(end) = self.run_end() {
            return Duration::from_micros(end.duration_us);
        }
        let last = self
            .end
            .or_else(|| self.events.iter().map(|e| e.event.at).max());
        last.and_then(|last| (last - self.start).to_std().ok())
            .unwrap_or_default()
    }

    /// How many model calls were started.
    pub fn infer_calls(&self) -> usize {
        self.events_of(EventType::InferStart).count()
    }

    /// The prompts the model calls were sent, in the order the calls started. Only runs that
    /// record content (`Config::record_content`, on by default) keep them; a call recorded
    /// without its prompt is skipped.
    pub fn prompts(&self) -> impl Iterator<Item = &std::sync::Arc<crate::message::Prompt>> {
        self.kinds().filter_map(|k| match k {
            EventKind::InferStart(start) => start.prompt.as_ref(),
            _ => None,
        })
    }

    /// The names of the checkpoints taken, in order.
    pub fn checkpoints(&self) -> Vec<&str> {
        self.kinds()
            .filter_map(|k| match k {
                EventKind::Checkpoint(c) => Some(c.name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The messages of the error events, in order.
    pub fn errors(&self) -> Vec<&str> {
        self.kinds()
            .filter_map(|k| match k {
                EventKind::Error(e) => Some(e.message.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The events of one type.
    pub fn events_of(&self, ty: EventType) -> impl Iterator<Item = &TraceEntry> {
        self.events
            .iter()
            .filter(move |e| e.event.kind.event_type() == ty)
    }

    /// The events that happened between `from` and `to`, inclusive.
    pub fn events_between(
        &self,
        from: Timestamp,
        to: Timestamp,
    ) -> impl Iterator<Item = &TraceEntry> {
        self.events
            .iter()
            .filter(move |e| e.event.at >= from && e.event.at <= to)
    }

    /// The events of one branch (or of the run itself), in order.
    pub fn events_in<'a>(&'a self, id: &'a TraceId) -> impl Iterator<Item = &'a Event> {
        self.events
            .iter()
            .filter(move |e| &e.trace_id == id)
            .map(|e| &e.event)
    }

    /// The trace reduced to what every interpreter must agree on: for each run or branch id,
    /// its events in order, without timestamps or durations, leaving out cancelled branches.
    pub fn canonical(&self) -> BTreeMap<TraceId, Vec<EventKind>> {
        let mut out: BTreeMap<TraceId, Vec<EventKind>> = BTreeMap::new();
        for entry in self.events.iter().filter(|e| !e.cancelled) {
            out.entry(entry.trace_id.clone())
                .or_default()
                .push(entry.event.kind.without_timing());
        }
        out
    }
}
