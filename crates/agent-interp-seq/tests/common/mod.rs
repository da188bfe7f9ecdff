//! Test support shared by the interpreter's integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_op::{
    BoxFuture, EventType, FnTool, MemoryBackend, MemoryEntry, MemoryError, MemoryId, Merge,
    NewMemory, Prompt, Provider, ProviderError, PrunePolicy, PruneReport, Response, ScoredMemory,
    Tag, ToolError, Trace,
};
use serde_json::{Value, json};

/// The types of a trace's events, in order.
/// The event types of `trace`, without the `run_end` a finished run's trace ends with (checked
/// to be there, once and last; a trace taken mid-run has none).
pub fn types(trace: &Trace) -> Vec<EventType> {
    let mut types: Vec<EventType> = trace.events.iter().map(|e| e.event.event_type()).collect();
    if trace.end.is_some() {
        assert_eq!(
            types.pop(),
            Some(EventType::RunEnd),
            "a run's trace ends with run_end"
        );
    }
    assert!(
        !types.contains(&EventType::RunEnd),
        "run_end is recorded once, last"
    );
    types
}

/// A tool that adds `a` and `b`.
pub fn add_tool() -> FnTool<impl Fn(Value) -> BoxFuture<'static, Result<Value, ToolError>>> {
    FnTool::new(
        "add",
        "Adds a and b",
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
        |args: Value| -> BoxFuture<'static, Result<Value, ToolError>> {
            Box::pin(async move {
                let a = args["a"]
                    .as_i64()
                    .ok_or_else(|| ToolError::invalid_arguments("a must be an integer"))?;
                let b = args["b"]
                    .as_i64()
                    .ok_or_else(|| ToolError::invalid_arguments("b must be an integer"))?;
                Ok(json!(a + b))
            })
        },
    )
}

/// Counts live provider calls, so tests can see that cancelled calls were dropped.
#[derive(Clone, Default)]
pub struct Live(Arc<AtomicUsize>);

impl Live {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    pub fn guard(&self) -> LiveGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        LiveGuard(self.0.clone())
    }
}

pub struct LiveGuard(Arc<AtomicUsize>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A provider whose calls take `latency` (on tokio's clock) and count as live while running.
#[derive(Clone)]
pub struct SlowProvider {
    pub latency: Duration,
    pub live: Live,
    pub started: Arc<AtomicUsize>,
    pub usage: (u64, u64),
    pub cost: Option<agent_op::MicroUsd>,
}

impl SlowProvider {
    pub fn new(latency: Duration) -> SlowProvider {
        SlowProvider {
            latency,
            live: Live::default(),
            started: Arc::default(),
            usage: (10, 5),
            cost: None,
        }
    }
}

impl Provider for SlowProvider {
    fn chat<'a>(
        &'a self,
        _model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move {
            let _guard = self.live.guard();
            self.started.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.latency).await;
            let last = prompt.messages.last().map(|m| m.content().to_owned());
            let mut response = Response::text(format!("re: {}", last.unwrap_or_default()))
                .with_usage(self.usage.0, self.usage.1);
            response.cost = self.cost;
            Ok(response)
        })
    }
}

/// A small memory backend for interpreter tests (the real ones live in agent-memory):
/// substring search, newest-first.
#[derive(Default)]
pub struct TestMemory {
    entries: Mutex<BTreeMap<u64, MemoryEntry>>,
    next: AtomicUsize,
}

impl MemoryBackend for TestMemory {
    fn store(&self, memory: NewMemory) -> BoxFuture<'_, Result<MemoryId, MemoryError>> {
        Box::pin(async move {
            let n = self.next.fetch_add(1, Ordering::SeqCst) as u64;
            let now = chrono::Utc::now();
            let id = MemoryId(format!("m{n}"));
            self.entries.lock().unwrap().insert(
                n,
                MemoryEntry {
                    id: id.clone(),
                    content: memory.content,
                    context: memory.context,
                    tags: memory.tags,
                    created_at: now,
                    accessed_at: now,
                    access_count: 0,
                },
            );
            Ok(id)
        })
    }

    fn search<'a>(
        &'a self,
        query: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<ScoredMemory>, MemoryError>> {
        Box::pin(async move {
            Ok(self
                .entries
                .lock()
                .unwrap()
                .values()
                .rev()
                .filter(|e| e.content.contains(query))
                .take(k)
                .map(|e| ScoredMemory {
                    entry: e.clone(),
                    score: 1.0,
                })
                .collect())
        })
    }

    fn recent(&self, n: usize) -> BoxFuture<'_, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(async move {
            Ok(self
                .entries
                .lock()
                .unwrap()
                .values()
                .rev()
                .take(n)
                .cloned()
                .collect())
        })
    }

    fn by_tags<'a>(
        &'a self,
        tags: &'a [Tag],
    ) -> BoxFuture<'a, Result<Vec<MemoryEntry>, MemoryError>> {
        Box::pin(async move {
            Ok(self
                .entries
                .lock()
                .unwrap()
                .values()
                .rev()
                .filter(|e| tags.iter().all(|t| e.tags.contains(t)))
                .cloned()
                .collect())
        })
    }

    fn prune<'a>(
        &'a self,
        _policy: &'a PrunePolicy,
    ) -> BoxFuture<'a, Result<PruneReport, MemoryError>> {
        Box::pin(async move { Ok(PruneReport::default()) })
    }

    fn delete<'a>(&'a self, id: &'a MemoryId) -> BoxFuture<'a, Result<bool, MemoryError>> {
        Box::pin(async move {
            let mut entries = self.entries.lock().unwrap();
            let key = entries.iter().find(|(_, e)| &e.id == id).map(|(k, _)| *k);
            Ok(key.and_then(|k| entries.remove(&k)).is_some())
        })
    }

    fn get<'a>(
        &'a self,
        id: &'a MemoryId,
    ) -> BoxFuture<'a, Result<Option<MemoryEntry>, MemoryError>> {
        Box::pin(async move {
            Ok(self
                .entries
                .lock()
                .unwrap()
                .values()
                .find(|e| &e.id == id)
                .cloned())
        })
    }

    fn count(&self) -> BoxFuture<'_, Result<u64, MemoryError>> {
        Box::pin(async move { Ok(self.entries.lock().unwrap().len() as u64) })
    }
}

/// A state that merges by taking the maximum of each field: a join.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Counters {
    pub a: u64,
    pub b: u64,
    pub log: Vec<String>,
}

impl Merge for Counters {
    fn merge(&mut self, other: Counters) {
        self.a = self.a.max(other.a);
        self.b = self.b.max(other.b);
        for line in other.log {
            if !self.log.contains(&line) {
                self.log.push(line);
            }
        }
        self.log.sort();
    }
}
