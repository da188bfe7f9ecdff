//! [`Pipeline`]: the standard [`ContextPipeline`] — hydrate from sources, compile under the
//! request's budget, report everything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_op::context::{
    ContextError, ContextInput, ContextPipeline, ContextReport, ContextRequest, DropReason,
    Outcome, PreparedContext, Priority, SectionReport, SectionSource, SourceOutcome, SourceReport,
    Summarize,
};
use agent_op::{BoxFuture, Prompt, Timestamp, ToolDefinition};
use futures_util::future::join_all;

use crate::compile::{Compiled, compile};
use crate::hydrate::{ContextSource, Hydrated, Recalled, SourceError};
use crate::ir::{PromptIr, PromptMeta, ToolDef};
use crate::section::{CompositionMode, Section, SectionContent};
use crate::tokens::{Encoding, TokenCounter};

/// The standard context pipeline: runs its [`ContextSource`]s (concurrently under a
/// concurrent interpreter), builds a [`PromptIr`] of their sections, the request's goal and
/// observation and the run's tools, and [`compile`]s it under the request's budget with a
/// [`TokenCounter`] for the model's encoding (one per encoding, shared by every call, so
/// counts are cached across calls).
///
/// Sections come in the order of the sources, each source's in its own order; the goal, if
/// the request has one, comes first (`goal`, critical). A source that fails fails the call
/// with [`ContextError::Source`] naming it, unless it was added with
/// [`optional_source`](Pipeline::optional_source): then the context is built without it and
/// the trace says why. A source with nothing to add is reported as skipped.
///
/// ```
/// use agent_prompt::{Pipeline, Semantic, Static};
/// use agent_prompt::Priority;
///
/// let pipeline = Pipeline::new()
///     .source(Static::text("rules", "## Rules", "Answer from the memories below."))
///     .optional_source(Semantic::new())
///     .tool_priority("web_search", Priority::Low);
/// # let _ = pipeline;
/// ```
pub struct Pipeline {
    sources: Vec<Registered>,
    tool_priorities: Arc<HashMap<String, Priority>>,
    default_tool_priority: Priority,
    counters: Mutex<HashMap<Encoding, Arc<TokenCounter>>>,
    summarizer: Option<Summarizer>,
}

struct Registered {
    source: Arc<dyn ContextSource>,
    optional: bool,
}

#[derive(Clone)]
struct Summarizer {
    model: String,
    /// Below this many free tokens a summary is not worth a model call.
    min_room: u32,
}

impl Default for Pipeline {
    fn default() -> Self {
        Pipeline::new()
    }
}

impl Pipeline {
    /// A pipeline with no sources: the request's goal and observation and the run's tools.
    pub fn new() -> Pipeline {
        Pipeline {
            sources: Vec::new(),
            tool_priorities: Arc::new(HashMap::new()),
            default_tool_priority: Priority::High,
            counters: Mutex::new(HashMap::new()),
            summarizer: None,
        }
    }

    /// Adds a source whose failure fails the call.
    pub fn source(mut self, source: impl ContextSource + 'static) -> Pipeline {
        self.sources.push(Registered {
            source: Arc::new(source),
            optional: false,
        });
        self
    }

    /// Adds a source whose failure only drops its sections (with a trace entry saying why).
    pub fn optional_source(mut self, source: impl ContextSource + 'static) -> Pipeline {
        self.sources.push(Registered {
            source: Arc::new(source),
            optional: true,
        });
        self
    }

    /// Gives the run's tool `name` this priority (tools are high priority by default): below
    /// critical, a tool can be left out of a tight prompt, and is then refused if called.
    pub fn tool_priority(mut self, name: impl Into<String>, priority: Priority) -> Pipeline {
        Arc::make_mut(&mut self.tool_priorities).insert(name.into(), priority);
        self
    }

    /// Gives every tool without a priority of its own this one (default high).
    pub fn default_tool_priority(mut self, priority: Priority) -> Pipeline {
        self.default_tool_priority = priority;
        self
    }

    /// Summarizes sections that do not fit instead of dropping them: when compilation drops
    /// sections for lack of room and at least 32 tokens are left, `model` is asked (a model
    /// call of the run: traced, inside its budget) to summarize them into that room, and the
    /// summary is sent as a section (`summary`, source
    /// [`Summary`](SectionSource::Summary)) in their place.
    pub fn summarize_with(mut self, model: impl Into<String>) -> Pipeline {
        self.summarizer = Some(Summarizer {
            model: model.into(),
            min_room: 32,
        });
        self
    }

    /// The shared counter for `model`'s encoding.
    pub fn counter(&self, model: &str) -> Arc<TokenCounter> {
        let encoding = Encoding::for_model(model);
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        counters
            .entry(encoding)
            .or_insert_with(|| Arc::new(TokenCounter::new(encoding)))
            .clone()
    }
}

/// One source's work for one call.
struct Job {
    name: String,
    optional: bool,
    /// Time spent before the future (reading the state).
    sync: Duration,
    started: crate::hydrate::SourceFuture,
}

impl ContextPipeline for Pipeline {
    fn prepare(
        &self,
        input: ContextInput<'_>,
    ) -> BoxFuture<'static, Result<PreparedContext, ContextError>> {
        let begun = Instant::now();
        let jobs: Vec<Job> = self
            .sources
            .iter()
            .map(|registered| {
                let at = Instant::now();
                let started = registered.source.hydrate(&input);
                Job {
                    name: registered.source.name().to_owned(),
                    optional: registered.optional,
                    sync: at.elapsed(),
                    started,
                }
            })
            .collect();
        let call = Call {
            model: input.model.to_owned(),
            request: input.request.clone(),
            tools: input.tools.to_vec(),
            now: input.now,
            counter: self.counter(input.model),
            tool_priorities: self.tool_priorities.clone(),
            default_tool_priority: self.default_tool_priority,
            summarizer: self.summarizer.clone(),
        };
        let concurrent = input.concurrent;
        Box::pin(async move {
            let hydrated = run_jobs(jobs, concurrent).await;
            let hydrate_us = micros(begun.elapsed());
            call.finish(hydrated, hydrate_us).await
        })
    }
}

/// Runs the sources' futures, concurrently or in order; results in source order.
async fn run_jobs(jobs: Vec<Job>, concurrent: bool) -> Vec<Finished> {
    let timed = jobs.into_iter().map(|job| async move {
        let at = Instant::now();
        let result = job.started.await;
        Finished {
            name: job.name,
            optional: job.optional,
            elapsed: job.sync + at.elapsed(),
            result,
        }
    });
    if concurrent {
        join_all(timed).await
    } else {
        let mut finished = Vec::new();
        for job in timed {
            finished.push(job.await);
        }
        finished
    }
}

struct Finished {
    name: String,
    optional: bool,
    elapsed: Duration,
    result: Result<Hydrated, SourceError>,
}

/// What one call needs once the sources are started.
struct Call {
    model: String,
    request: ContextRequest,
    tools: Vec<ToolDefinition>,
    now: Timestamp,
    counter: Arc<TokenCounter>,
    tool_priorities: Arc<HashMap<String, Priority>>,
    default_tool_priority: Priority,
    summarizer: Option<Summarizer>,
}

impl Call {
    async fn finish(
        self,
        finished: Vec<Finished>,
        hydrate_us: u64,
    ) -> Result<PreparedContext, ContextError> {
        let mut sources = Vec::with_capacity(finished.len());
        let mut sections = Vec::new();
        let mut recalled: Vec<Recalled> = Vec::new();
        if let Some(goal) = &self.request.goal {
            sections.push(
                Section::text("goal", "## Goal", goal.clone())
                    .with_priority(Priority::Critical)
                    .with_composition(CompositionMode::Constraint),
            );
        }
        for done in finished {
            let elapsed_us = micros(done.elapsed);
            match done.result {
                Ok(hydrated) => {
                    let count = hydrated.sections.len();
                    sources.push(SourceReport {
                        name: done.name,
                        sections: u32::try_from(count).unwrap_or(u32::MAX),
                        elapsed_us,
                        outcome: if count == 0 {
                            SourceOutcome::Skipped
                        } else {
                            SourceOutcome::Hydrated
                        },
                    });
                    sections.extend(hydrated.sections);
                    recalled.extend(hydrated.recalled);
                }
                Err(error) if done.optional => sources.push(SourceReport {
                    name: done.name,
                    sections: 0,
                    elapsed_us,
                    outcome: SourceOutcome::Dropped {
                        error: error.to_string(),
                    },
                }),
                Err(error) => return Err(ContextError::source_failed(done.name, error)),
            }
        }

        let compiling = Instant::now();
        let mut ir = self.ir(sections);
        ir.count(&self.counter);
        let compiled = compile(&ir, &self.counter).map_err(ContextError::compile)?;
        let compile_us = micros(compiling.elapsed());
        record_access(&compiled, &recalled).await?;
        let report = ContextReport {
            model: self.model.clone(),
            encoding: self.counter.encoding().name().to_owned(),
            sources,
            hydrate_us,
            compile_us,
            compile: compiled.report.clone(),
        };
        match self.summary_request(&ir, &compiled) {
            Some((prompt, summarized)) => {
                // Sent as it is if the interpreter makes no summary.
                let fallback = PreparedContext::new(compiled.prompt, report.clone());
                let model = self.summarizer_model();
                let resume =
                    move |summary: String| self.with_summary(ir, report, summarized, summary);
                Ok(fallback.with_summary(Summarize::new(model, prompt, resume)))
            }
            None => Ok(PreparedContext::new(compiled.prompt, report)),
        }
    }

    fn summarizer_model(&self) -> String {
        self.summarizer
            .as_ref()
            .map(|s| s.model.clone())
            .unwrap_or_default()
    }

    fn ir(&self, sections: Vec<Section>) -> PromptIr {
        let mut meta = PromptMeta::new(self.request.budget.clone(), self.now);
        meta.strategy = self.request.strategy.clone();
        let mut ir = PromptIr::new(self.request.observation.clone(), meta);
        ir.sections = sections;
        ir.tools = self
            .tools
            .iter()
            .map(|tool| {
                let priority = self
                    .tool_priorities
                    .get(&tool.name)
                    .copied()
                    .unwrap_or(self.default_tool_priority);
                ToolDef::new(tool.clone()).with_priority(priority)
            })
            .collect();
        ir
    }

    /// The summarization prompt and the ids it covers, when the
    /// pipeline summarizes and something worth it was dropped for lack of room.
    fn summary_request(&self, ir: &PromptIr, compiled: &Compiled) -> Option<(Prompt, Vec<String>)> {
        let summarizer = self.summarizer.as_ref()?;
        let room = compiled
            .report
            .available
            .saturating_sub(compiled.report.tokens_after)
            // The summary section's own message and label overhead.
            .saturating_sub(16);
        if room < summarizer.min_room {
            return None;
        }
        let mut text = String::new();
        let mut ids = Vec::new();
        for (section, report) in ir.sections.iter().zip(&compiled.report.sections) {
            let over = matches!(
                report.outcome,
                Outcome::Dropped {
                    reason: DropReason::OverBudget | DropReason::OverAllocation
                }
            );
            if !over {
                continue;
            }
            ids.push(section.id.clone());
            if !section.label.is_empty() {
                text.push_str(&section.label);
                text.push('\n');
            }
            match &section.content {
                SectionContent::Text(body) => text.push_str(body),
                SectionContent::Messages(messages) => {
                    for message in messages {
                        text.push_str(message.role());
                        text.push_str(": ");
                        text.push_str(message.content());
                        text.push('\n');
                    }
                }
            }
            text.push_str("\n\n");
        }
        if ids.is_empty() {
            return None;
        }
        let words = room * 3 / 4;
        let prompt = Prompt::new()
            .system(format!(
                "Summarize the context below for another assistant in at most {words} words. \
                 Keep facts, names, numbers and decisions; leave out everything else. Reply \
                 with the summary only."
            ))
            .user(text);
        Some((prompt, ids))
    }

    /// Compiles again with the summary in place of the sections it covers.
    fn with_summary(
        self,
        mut ir: PromptIr,
        mut report: ContextReport,
        summarized: Vec<String>,
        summary: String,
    ) -> Result<PreparedContext, ContextError> {
        let started = Instant::now();
        let mut removed: Vec<(usize, Section)> = Vec::new();
        let mut kept = Vec::with_capacity(ir.sections.len());
        for (i, section) in std::mem::take(&mut ir.sections).into_iter().enumerate() {
            if summarized.contains(&section.id) {
                removed.push((i, section));
            } else {
                kept.push(section);
            }
        }
        ir.sections = kept;
        let mut id = "summary".to_owned();
        while ir.sections.iter().any(|s| s.id == id) {
            id.push('_');
        }
        ir.sections.push(
            Section::text(
                &id,
                "## Summary of context that did not fit",
                summary.trim().to_owned(),
            )
            .with_source(SectionSource::Summary {
                of: summarized.clone(),
            })
            .with_priority(Priority::Low)
            .with_min_tokens(1),
        );
        ir.count(&self.counter);
        let compiled = compile(&ir, &self.counter).map_err(ContextError::compile)?;
        let mut sections: Vec<SectionReport> = compiled.report.sections.clone();
        for (i, section) in removed {
            let tokens_before = report
                .section(&section.id)
                .map_or(section.tokens, |r| r.tokens_before);
            let at = i.min(sections.len());
            sections.insert(
                at,
                SectionReport {
                    id: section.id,
                    source: section.source,
                    priority: section.priority,
                    tokens_before,
                    tokens_after: 0,
                    outcome: Outcome::Dropped {
                        reason: DropReason::Summarized,
                    },
                },
            );
        }
        let tokens_before = report.compile.tokens_before;
        report.compile = compiled.report;
        report.compile.sections = sections;
        report.compile.tokens_before = tokens_before;
        report.compile.compression_ratio = if tokens_before == 0 {
            1.0
        } else {
            (f64::from(report.compile.tokens_after) / f64::from(tokens_before)) as f32
        };
        report.compile_us = report.compile_us.saturating_add(micros(started.elapsed()));
        Ok(PreparedContext::new(compiled.prompt, report))
    }
}

/// Records an access of the memory entries whose sections were sent.
async fn record_access(compiled: &Compiled, recalled: &[Recalled]) -> Result<(), ContextError> {
    for batch in recalled {
        let sent: Vec<_> = batch
            .entries
            .iter()
            .filter(|(section, _)| {
                compiled
                    .report
                    .sections
                    .iter()
                    .any(|r| r.id == *section && r.outcome.is_sent())
            })
            .map(|(_, id)| id.clone())
            .collect();
        if sent.is_empty() {
            continue;
        }
        batch
            .backend
            .record_access(&sent)
            .await
            .map_err(|e| ContextError::source_failed("memory access", e))?;
    }
    Ok(())
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
