//! `agent trace …`: read a JSONL trace and summarize it, draw its branch tree, list its
//! events, find where two traces part ways, or write the HTML viewer.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use agent_op::trace::jsonl::{self, JsonlError};
use agent_op::trace::{RunFailure, RunOutcome};
use agent_op::{EventKind, EventType, Trace, TraceEntry, TraceId};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::CliError;

/// Reads the trace at `path`, saying on stderr when its last line was torn (cut off by a
/// writer that stopped mid-line: the events before it are read). With `lenient`, a corrupt
/// file gives its readable prefix and a warning naming the first bad line; without, the bad
/// line is the error.
pub fn read(path: &Path, lenient: bool) -> Result<Trace, CliError> {
    let failed = |source: JsonlError| match source {
        JsonlError::Io(source) => CliError::Io {
            path: path.to_owned(),
            action: "reading",
            source,
        },
        source => CliError::Trace {
            path: path.to_owned(),
            source,
        },
    };
    let (read, stopped) = if lenient {
        jsonl::read_trace_file_prefix(path).map_err(failed)?
    } else {
        (jsonl::read_trace_file(path).map_err(failed)?, None)
    };
    if let Some(torn) = &read.torn {
        eprintln!(
            "warning: {}: line {} is torn ({}, cut off mid-write); reading the {} before it",
            path.display(),
            torn.line,
            counted(torn.bytes as u64, "byte"),
            counted(read.trace.events.len() as u64, "event")
        );
    }
    if let Some(error) = stopped {
        eprintln!(
            "warning: {}: {error}; reading the {} before it",
            path.display(),
            counted(read.trace.events.len() as u64, "event")
        );
    }
    Ok(read.trace)
}

/// When the trace's first event happened (its start, for a trace without events): the zero
/// of every offset the commands print.
pub fn origin(trace: &Trace) -> DateTime<Utc> {
    trace
        .events
        .iter()
        .map(|e| e.event.at)
        .min()
        .unwrap_or(trace.start)
}

/// Totals for one model.
#[derive(Debug, Default, Serialize)]
pub struct ModelTotals {
    /// Calls started.
    pub calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Known cost, micro-USD.
    pub cost_micro_usd: u64,
    /// Calls whose cost is unknown.
    pub unknown_cost_calls: u64,
    /// Time spent in the calls, µs.
    pub duration_us: u64,
}

/// Totals for one tool.
#[derive(Debug, Default, Serialize)]
pub struct ToolTotals {
    /// Calls made.
    pub calls: u64,
    /// Calls that returned a tool error.
    pub failures: u64,
    /// Calls refused by a tool scope.
    pub denied: u64,
    /// Time spent in the calls, µs.
    pub duration_us: u64,
}

/// What `agent trace summary` reports.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// The trace id.
    pub trace_id: String,
    /// Events.
    pub events: u64,
    /// The run and its branches.
    pub branches: u64,
    /// Branches cancelled or discarded (a race's losers).
    pub cancelled_branches: u64,
    /// How the run ended (`succeeded`, `failed` or `aborted`), from its `run_end` event;
    /// absent when the trace has none (the run did not finish, or an older version wrote it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RunOutcome>,
    /// The run's error, when it failed or was aborted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RunFailure>,
    /// A preview of the run's value, when it succeeded with one the engine can show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_preview: Option<String>,
    /// The run's wall time ([`Trace::wall_time`]), µs.
    pub wall_us: u64,
    /// The same, ms.
    pub wall_ms: f64,
    /// Model calls.
    pub model_calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Known cost, micro-USD.
    pub cost_micro_usd: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Error events.
    pub errors: u64,
    /// Per model.
    pub models: BTreeMap<String, ModelTotals>,
    /// Per tool.
    pub tools: BTreeMap<String, ToolTotals>,
}

/// Adds up a trace in one pass.
pub fn summarize(trace: &Trace) -> Summary {
    let mut summary = Summary {
        trace_id: trace.id.to_string(),
        ..Summary::default()
    };
    let mut branches: HashMap<&str, bool> = HashMap::new();
    let mut last_branch: Option<&str> = None;
    for entry in &trace.events {
        summary.events += 1;
        let id = entry.trace_id.as_str();
        // Consecutive events mostly share a branch: skip the map then.
        if last_branch != Some(id) {
            let cancelled = branches.entry(id).or_insert(false);
            *cancelled |= entry.cancelled;
            last_branch = Some(id);
        } else if entry.cancelled {
            branches.insert(id, true);
        }
        match &entry.event.kind {
            EventKind::InferStart(start) => {
                summary.model_calls += 1;
                summary.models.entry(start.model.clone()).or_default().calls += 1;
            }
            EventKind::InferEnd(end) => {
                summary.input_tokens = summary.input_tokens.saturating_add(end.input_tokens);
                summary.output_tokens = summary.output_tokens.saturating_add(end.output_tokens);
                let model = summary.models.entry(end.model.clone()).or_default();
                model.input_tokens = model.input_tokens.saturating_add(end.input_tokens);
                model.output_tokens = model.output_tokens.saturating_add(end.output_tokens);
                model.duration_us = model.duration_us.saturating_add(end.duration_us);
                match end.cost {
                    Some(cost) => {
                        summary.cost_micro_usd = summary.cost_micro_usd.saturating_add(cost.0);
                        model.cost_micro_usd = model.cost_micro_usd.saturating_add(cost.0);
                    }
                    None => model.unknown_cost_calls += 1,
                }
            }
            EventKind::ToolCall(call) => {
                summary.tool_calls += 1;
                summary.tools.entry(call.name.clone()).or_default().calls += 1;
            }
            EventKind::ToolResult(result) => {
                let tool = summary.tools.entry(result.name.clone()).or_default();
                tool.duration_us = tool.duration_us.saturating_add(result.duration_us);
                if !result.success {
                    tool.failures += 1;
                }
            }
            EventKind::ToolDenied(denied) => {
                summary.tools.entry(denied.name.clone()).or_default().denied += 1;
            }
            EventKind::Error(_) => summary.errors += 1,
            _ => {}
        }
    }
    summary.branches = branches.len() as u64;
    summary.cancelled_branches = branches.values().filter(|c| **c).count() as u64;
    let wall = trace.wall_time();
    summary.wall_us = u64::try_from(wall.as_micros()).unwrap_or(u64::MAX);
    summary.wall_ms = summary.wall_us as f64 / 1000.0;
    if let Some(end) = trace.run_end() {
        summary.outcome = Some(end.outcome);
        summary.error = end.error.clone();
        summary.value_preview = end.value_preview.clone();
    }
    summary
}

/// `n` and `noun`, plural unless `n` is 1 ("1 call", "2 calls", "1 branch", "3 branches").
pub fn counted(n: u64, noun: &str) -> String {
    match (n, noun.ends_with("ch")) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{n} {noun}es"),
        (_, false) => format!("{n} {noun}s"),
    }
}

/// A duration in the unit a person reads best: `842 µs`, `68.5 ms`, `7.02 s`, `7 min 01 s`,
/// `2 h 05 min`.
pub fn human_duration(us: u64) -> String {
    match us {
        0..1_000 => format!("{us} µs"),
        1_000..10_000 => format!("{:.2} ms", us as f64 / 1e3),
        10_000..1_000_000 => format!("{:.1} ms", us as f64 / 1e3),
        1_000_000..60_000_000 => format!("{:.2} s", us as f64 / 1e6),
        60_000_000..3_600_000_000 => {
            let secs = us / 1_000_000;
            format!("{} min {:02} s", secs / 60, secs % 60)
        }
        _ => {
            let mins = us / 60_000_000;
            format!("{} h {:02} min", mins / 60, mins % 60)
        }
    }
}

/// The outcome line of a summary.
fn outcome_text(summary: &Summary) -> String {
    match (summary.outcome, &summary.error, &summary.value_preview) {
        (None, _, _) => {
            "not recorded (the run did not finish, or its trace predates run_end)".to_owned()
        }
        (Some(outcome), Some(error), _) => format!("{outcome} ({}): {}", error.kind, error.message),
        (Some(outcome), None, Some(value)) => format!("{outcome}: {value}"),
        (Some(outcome), None, None) => outcome.to_string(),
    }
}

fn dollars(micro: u64) -> String {
    format!("${:.6}", micro as f64 / 1e6)
}

/// The summary as text.
pub fn summary_text(summary: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "trace     {}", summary.trace_id);
    let _ = writeln!(out, "outcome   {}", outcome_text(summary));
    let _ = writeln!(
        out,
        "events    {} in {} ({} cancelled), {}",
        summary.events,
        counted(summary.branches, "branch"),
        summary.cancelled_branches,
        counted(summary.errors, "error")
    );
    let _ = writeln!(out, "wall time {}", human_duration(summary.wall_us));
    let _ = writeln!(
        out,
        "models    {}, {} in / {} out tokens, {}",
        counted(summary.model_calls, "call"),
        summary.input_tokens,
        summary.output_tokens,
        dollars(summary.cost_micro_usd)
    );
    for (name, m) in &summary.models {
        let unknown = if m.unknown_cost_calls > 0 {
            format!(
                " (+{} of unknown cost)",
                counted(m.unknown_cost_calls, "call")
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {name:<24} {:>12} {:>9} in {:>9} out {:>12}{unknown} {:>12}",
            counted(m.calls, "call"),
            m.input_tokens,
            m.output_tokens,
            dollars(m.cost_micro_usd),
            human_duration(m.duration_us)
        );
    }
    let _ = writeln!(out, "tools     {}", counted(summary.tool_calls, "call"));
    for (name, t) in &summary.tools {
        let _ = writeln!(
            out,
            "  {name:<24} {:>12} {:>6} failed {:>6} denied {:>12}",
            counted(t.calls, "call"),
            t.failures,
            t.denied,
            human_duration(t.duration_us)
        );
    }
    out
}

/// One run or branch in the tree.
#[derive(Debug, Serialize)]
pub struct Node {
    /// Its id.
    pub id: String,
    /// `par` or `race` for a fork's branches (from the parent's fork event).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fork: Option<&'static str>,
    /// Cancelled or discarded.
    pub cancelled: bool,
    /// Its own events.
    pub events: u64,
    /// Its own model calls.
    pub model_calls: u64,
    /// Its own tool calls.
    pub tool_calls: u64,
    /// Start, ms after the trace's first event.
    pub start_ms: f64,
    /// From its first to its last event, ms.
    pub duration_ms: f64,
    /// Its branches.
    pub children: Vec<Node>,
}

/// The branch tree: each run or branch with its own counts and timings, children in id
/// order.
pub fn tree(trace: &Trace) -> Vec<Node> {
    struct Acc {
        cancelled: bool,
        events: u64,
        model_calls: u64,
        tool_calls: u64,
        first: DateTime<Utc>,
        last: DateTime<Utc>,
    }
    let origin = origin(trace);
    let mut acc: BTreeMap<TraceId, Acc> = BTreeMap::new();
    let mut forks: HashMap<TraceId, &'static str> = HashMap::new();
    for entry in &trace.events {
        let at = entry.event.at;
        let node = acc.entry(entry.trace_id.clone()).or_insert(Acc {
            cancelled: false,
            events: 0,
            model_calls: 0,
            tool_calls: 0,
            first: at,
            last: at,
        });
        node.events += 1;
        node.cancelled |= entry.cancelled;
        node.first = node.first.min(at);
        node.last = node.last.max(at);
        match &entry.event.kind {
            EventKind::InferStart(_) => node.model_calls += 1,
            EventKind::ToolCall(_) => node.tool_calls += 1,
            EventKind::Fork(fork) => {
                let kind = match fork.kind {
                    agent_op::trace::ForkKind::Race => "race",
                    _ => "par",
                };
                for id in &fork.branch_ids {
                    forks.insert(id.clone(), kind);
                }
            }
            _ => {}
        }
    }
    let ms = |d: chrono::TimeDelta| d.num_microseconds().unwrap_or(0) as f64 / 1000.0;
    let mut nodes: BTreeMap<TraceId, Node> = acc
        .into_iter()
        .map(|(id, a)| {
            let node = Node {
                id: id.to_string(),
                fork: forks.get(&id).copied(),
                cancelled: a.cancelled,
                events: a.events,
                model_calls: a.model_calls,
                tool_calls: a.tool_calls,
                start_ms: ms(a.first - origin),
                duration_ms: ms(a.last - a.first),
                children: Vec::new(),
            };
            (id, node)
        })
        .collect();
    // Deepest first, so each node is complete before it moves into its parent.
    let mut ids: Vec<TraceId> = nodes.keys().cloned().collect();
    ids.sort_by_key(|id| std::cmp::Reverse(id.depth()));
    for id in ids {
        let Some(parent) = id.parent() else { continue };
        if !nodes.contains_key(&parent) {
            continue;
        }
        if let Some(node) = nodes.remove(&id) {
            if let Some(p) = nodes.get_mut(&parent) {
                p.children.push(node);
            }
        }
    }
    let mut roots: Vec<Node> = nodes.into_values().collect();
    fn order(nodes: &mut [Node]) {
        nodes.sort_by(|a, b| natural(&a.id).cmp(&natural(&b.id)));
        for n in nodes {
            order(&mut n.children);
        }
    }
    order(&mut roots);
    roots
}

/// Sorts `run.10` after `run.9`.
fn natural(id: &str) -> Vec<Result<u64, &str>> {
    id.split('.')
        .map(|p| p.parse::<u64>().map_err(|_| p))
        .collect()
}

/// The tree as indented text.
pub fn tree_text(roots: &[Node]) -> String {
    fn walk(node: &Node, depth: usize, out: &mut String) {
        let fork = node.fork.map(|f| format!("[{f}] ")).unwrap_or_default();
        let cancelled = if node.cancelled { " cancelled" } else { "" };
        let _ = writeln!(
            out,
            "{}{fork}{}  +{} for {}, {}, {}, {}{cancelled}",
            "  ".repeat(depth),
            node.id,
            human_duration((node.start_ms * 1000.0) as u64),
            human_duration((node.duration_ms * 1000.0) as u64),
            counted(node.events, "event"),
            counted(node.model_calls, "model call"),
            counted(node.tool_calls, "tool call"),
        );
        for child in &node.children {
            walk(child, depth + 1, out);
        }
    }
    let mut out = String::new();
    for root in roots {
        walk(root, 0, &mut out);
    }
    out
}

/// Which events `agent trace events` lists.
#[derive(Debug, Default)]
pub struct Filter {
    /// Only these types.
    pub types: Vec<EventType>,
    /// Only this branch and its descendants.
    pub branch: Option<String>,
    /// Only events at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only events at or before this time.
    pub until: Option<DateTime<Utc>>,
}

impl Filter {
    /// Parses `--type a,b`: each must be an event type name.
    pub fn parse_types(list: &str) -> Result<Vec<EventType>, CliError> {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|name| {
                EventType::from_name(name).ok_or_else(|| {
                    CliError::Invalid(format!(
                        "unknown event type `{name}` (known: {})",
                        EventType::ALL
                            .iter()
                            .map(|t| t.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })
            })
            .collect()
    }

    /// Parses a time bound: an RFC 3339 timestamp, or seconds after the trace's start
    /// (`2.5`).
    pub fn parse_time(value: &str, start: DateTime<Utc>) -> Result<DateTime<Utc>, CliError> {
        if let Ok(at) = DateTime::parse_from_rfc3339(value) {
            return Ok(at.with_timezone(&Utc));
        }
        match value.parse::<f64>() {
            Ok(secs) if secs.is_finite() && secs.abs() < 1e9 => start
                .checked_add_signed(chrono::TimeDelta::microseconds((secs * 1e6) as i64))
                .ok_or_else(|| {
                    CliError::Invalid(format!(
                        "`{value}` seconds after the trace's start is out of range"
                    ))
                }),
            _ => Err(CliError::Invalid(format!(
                "`{value}` is neither an RFC 3339 time nor seconds after the trace's start"
            ))),
        }
    }

    fn keeps(&self, entry: &TraceEntry) -> bool {
        if !self.types.is_empty() && !self.types.contains(&entry.event.event_type()) {
            return false;
        }
        if let Some(branch) = &self.branch {
            if !in_branch(entry.trace_id.as_str(), branch) {
                return false;
            }
        }
        let at = entry.event.at;
        self.since.is_none_or(|s| at >= s) && self.until.is_none_or(|u| at <= u)
    }
}

/// Whether `id` is the branch `branch` or one of its descendants (`0.2` is inside `0`).
fn in_branch(id: &str, branch: &str) -> bool {
    id == branch
        || id
            .strip_prefix(branch)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// Refuses a `--branch` the trace has no events of (a filter that keeps nothing would look
/// like a branch that did nothing), naming a few of the branches it has.
pub fn known_branch(trace: &Trace, branch: &str, file: &Path) -> Result<(), CliError> {
    let mut ids: Vec<&str> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for entry in &trace.events {
        let id = entry.trace_id.as_str();
        if in_branch(id, branch) {
            return Ok(());
        }
        if seen.insert(id) {
            ids.push(id);
        }
    }
    let shown: Vec<&str> = ids.iter().copied().take(5).collect();
    let more = if ids.len() > shown.len() {
        format!(", … ({} in all)", ids.len())
    } else {
        String::new()
    };
    Err(CliError::Invalid(format!(
        "no branch `{branch}` in {} (its branches: {}{more})",
        file.display(),
        shown.join(", ")
    )))
}

/// The events `filter` keeps, as lines: text (`+seconds branch type data`) or, with `json`,
/// the trace's own JSONL lines.
pub fn events_text(trace: &Trace, filter: &Filter, json: bool) -> String {
    let origin = origin(trace);
    let mut out = String::new();
    for entry in trace.events.iter().filter(|e| filter.keeps(e)) {
        if json {
            let line = json!({
                "v": jsonl::FORMAT_VERSION,
                "trace_id": entry.trace_id,
                "cancelled": entry.cancelled,
                "event": entry.event,
            });
            let _ = writeln!(out, "{line}");
            continue;
        }
        let data = serde_json::to_value(&entry.event)
            .ok()
            .and_then(|v| v.get("data").cloned())
            .unwrap_or(Value::Null);
        let secs = (entry.event.at - origin).num_microseconds().unwrap_or(0) as f64 / 1e6;
        let cancelled = if entry.cancelled { " (cancelled)" } else { "" };
        let _ = writeln!(
            out,
            "+{secs:>9.3}s  {}  {}{cancelled}  {data}",
            entry.trace_id,
            entry.event.event_type().as_str(),
        );
    }
    out
}

/// Where two traces part ways.
#[derive(Debug, Serialize)]
pub struct Divergence {
    /// The canonical branch id.
    pub branch: String,
    /// The position of the first differing event in that branch.
    pub sequence: usize,
    /// That event in the first trace, if it has one there.
    pub left: Option<Value>,
    /// That event in the second trace, if it has one there.
    pub right: Option<Value>,
    /// Where in the two events they first differ (`data.reply.content`), when both have it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<Difference>,
}

/// The first place two events differ: a path into their JSON and what each holds there.
#[derive(Debug, Serialize)]
pub struct Difference {
    /// The path (`data.prompt.messages[3].content`).
    pub path: String,
    /// What the first event holds there (for texts, the part around the first differing
    /// character), or `None` if it lacks the member.
    pub left: Option<String>,
    /// What the second event holds there.
    pub right: Option<String>,
}

/// Where `a` and `b` first differ, depth first in member order.
fn first_difference(a: &Value, b: &Value, path: &mut String) -> Option<Difference> {
    match (a, b) {
        _ if a == b => None,
        (Value::Object(x), Value::Object(y)) => x
            .keys()
            .chain(y.keys().filter(|k| !x.contains_key(*k)))
            .find_map(|key| {
                let step = if path.is_empty() {
                    key.clone()
                } else {
                    format!(".{key}")
                };
                member_difference(x.get(key), y.get(key), path, &step)
            }),
        (Value::Array(x), Value::Array(y)) => (0..x.len().max(y.len()))
            .find_map(|i| member_difference(x.get(i), y.get(i), path, &format!("[{i}]"))),
        (Value::String(x), Value::String(y)) => {
            let (left, right) = agent_op::difference_excerpts(x, y);
            Some(Difference {
                path: path.clone(),
                left: Some(left),
                right: Some(right),
            })
        }
        _ => Some(Difference {
            path: path.clone(),
            left: Some(a.to_string()),
            right: Some(b.to_string()),
        }),
    }
}

/// Where members `p` and `q` (at `path` + `step`) first differ: deeper when both are there.
fn member_difference(
    p: Option<&Value>,
    q: Option<&Value>,
    path: &mut String,
    step: &str,
) -> Option<Difference> {
    if p == q {
        return None;
    }
    let len = path.len();
    path.push_str(step);
    let found = match (p, q) {
        (Some(p), Some(q)) => first_difference(p, q, path),
        (p, q) => Some(Difference {
            path: path.clone(),
            left: p.map(Value::to_string),
            right: q.map(Value::to_string),
        }),
    };
    path.truncate(len);
    found
}

/// The first divergence of two traces, comparing their canonical forms (timings left out,
/// cancelled branches left out) branch by branch in id order; `None` when they agree.
pub fn diff(left: &Trace, right: &Trace) -> Option<Divergence> {
    // Two runs have different random ids: compare with each run's own id replaced, in the
    // branch ids and inside the events (forks and joins name their branches).
    let relabel = |trace: &Trace| -> BTreeMap<String, Vec<String>> {
        let root = trace.id.as_str();
        trace
            .canonical()
            .into_iter()
            .map(|(id, events)| {
                let id = id.as_str();
                let relative = id.strip_prefix(root).unwrap_or(id);
                let events = events
                    .into_iter()
                    .map(|kind| {
                        let event = agent_op::Event::at(DateTime::<Utc>::UNIX_EPOCH, kind);
                        let text = serde_json::to_value(event)
                            .map(|mut v| {
                                if let Some(o) = v.as_object_mut() {
                                    o.remove("at");
                                }
                                v.to_string()
                            })
                            .unwrap_or_default();
                        text.replace(root, "run")
                    })
                    .collect();
                (format!("run{relative}"), events)
            })
            .collect()
    };
    let (a, b) = (relabel(left), relabel(right));
    let mut branches: Vec<&String> = a.keys().chain(b.keys()).collect();
    branches.sort_by(|x, y| natural(x).cmp(&natural(y)));
    branches.dedup();
    let empty = Vec::new();
    for branch in branches {
        let (x, y) = (
            a.get(branch).unwrap_or(&empty),
            b.get(branch).unwrap_or(&empty),
        );
        let differs = (0..x.len().max(y.len())).find(|&i| x.get(i) != y.get(i));
        if let Some(i) = differs {
            let show = |text: Option<&String>| -> Option<Value> {
                text.and_then(|t| serde_json::from_str(t).ok())
            };
            let (left, right) = (show(x.get(i)), show(y.get(i)));
            let at = match (&left, &right) {
                (Some(l), Some(r)) => first_difference(l, r, &mut String::new()),
                _ => None,
            };
            return Some(Divergence {
                branch: branch.clone(),
                sequence: i,
                left,
                right,
                at,
            });
        }
    }
    None
}

/// A divergence as text.
pub fn diff_text(divergence: &Option<Divergence>, left: &Path, right: &Path) -> String {
    match divergence {
        None => "the traces agree (canonical events, timings left out)\n".to_owned(),
        Some(d) => {
            let side = |v: &Option<Value>| match v {
                Some(v) => {
                    let text = v.to_string();
                    if text.chars().count() > 400 {
                        let head: String = text.chars().take(400).collect();
                        format!("{head}…")
                    } else {
                        text
                    }
                }
                None => "(no event: the branch ends here)".to_owned(),
            };
            let mut out = format!(
                "first divergence: branch {} event #{}\n  {}: {}\n  {}: {}\n",
                d.branch,
                d.sequence,
                left.display(),
                side(&d.left),
                right.display(),
                side(&d.right),
            );
            if let Some(at) = &d.at {
                let missing = || "(absent)".to_owned();
                let _ = write!(
                    out,
                    "  they differ at {}:\n    {}: {}\n    {}: {}\n",
                    at.path,
                    left.display(),
                    at.left.clone().unwrap_or_else(missing),
                    right.display(),
                    at.right.clone().unwrap_or_else(missing),
                );
            }
            out
        }
    }
}

/// Writes the HTML viewer for the trace at `trace_path` to `out` (default: beside the trace,
/// with `.html`); returns where.
pub fn view(trace: &Trace, trace_path: &Path, out: Option<PathBuf>) -> Result<PathBuf, CliError> {
    let out = out.unwrap_or_else(|| trace_path.with_extension("html"));
    let title = trace_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| trace.id.to_string());
    let html = crate::viewer::render(trace, &title);
    std::fs::write(&out, html).map_err(|source| CliError::Io {
        path: out.clone(),
        action: "writing",
        source,
    })?;
    Ok(out)
}

/// The `file://` URL of `path` (made absolute), which terminals let you click.
pub fn file_url(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut url = String::from("file://");
    for byte in absolute.to_string_lossy().bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                url.push(byte as char)
            }
            b'\\' => url.push('/'),
            other => url.push_str(&format!("%{other:02X}")),
        }
    }
    url
}

/// Opens `url` in the desktop's browser (`xdg-open`, `open` on macOS, `start` on Windows),
/// without waiting for it. A failure is a warning: the page was written all the same.
pub fn open_in_browser(url: &str) {
    let mut command = if cfg!(target_os = "macos") {
        std::process::Command::new("open")
    } else if cfg!(windows) {
        let mut c = std::process::Command::new("cmd");
        c.args(["/C", "start", ""]);
        c
    } else {
        std::process::Command::new("xdg-open")
    };
    let spawned = command
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(error) = spawned {
        eprintln!("warning: could not open a browser ({error}); open {url} yourself");
    }
}

#[cfg(test)]
mod tests {
    use super::{counted, first_difference, human_duration};

    #[test]
    fn the_first_difference_is_found_deep_in_long_texts() {
        let long = "word ".repeat(100);
        let a = serde_json::json!({"type": "infer_end", "data": {"reply": {"content": format!("{long}yes")}}});
        let b = serde_json::json!({"type": "infer_end", "data": {"reply": {"content": format!("{long}no")}}});
        let d = first_difference(&a, &b, &mut String::new()).unwrap();
        assert_eq!(d.path, "data.reply.content");
        assert!(d.left.unwrap().ends_with("word yes"));
        assert!(d.right.unwrap().starts_with("…"));
    }

    #[test]
    fn durations_are_in_human_units() {
        assert_eq!(human_duration(842), "842 µs");
        assert_eq!(human_duration(1_500), "1.50 ms");
        assert_eq!(human_duration(68_500), "68.5 ms");
        assert_eq!(human_duration(7_020_000), "7.02 s");
        assert_eq!(human_duration(421_293_600), "7 min 01 s");
        assert_eq!(human_duration(7_500_000_000), "2 h 05 min");
    }

    #[test]
    fn one_is_singular_and_the_rest_plural() {
        assert_eq!(counted(1, "call"), "1 call");
        assert_eq!(counted(0, "call"), "0 calls");
        assert_eq!(counted(2, "error"), "2 errors");
        assert_eq!(counted(1, "branch"), "1 branch");
        assert_eq!(counted(5, "branch"), "5 branches");
    }
}
