//! The effects a machine performs: model calls (with budget reservations), tool calls,
//! memory operations and checkpoints.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use agent_op::context::{ContextInput, ContextPipeline, ContextRequest};
use agent_op::interp::{Effect, Feed, Node};
use agent_op::journal::{EntryKind, Request};
use agent_op::trace::event::{self, CheckpointReached, InferEnd, InferStart};
use agent_op::{
    CallContext, Checkpoint, Event, EventKind, MemoryBackend, NewMemory, PREVIEW_CHARS, Prompt,
    Provider, ProviderError, Response, ToolError, ToolSet, content_hash, preview,
};
use chrono::Utc;
use futures_util::FutureExt;
use serde_json::Value;
use tracing::Instrument;

use super::journaled::{Answer, ModelAnswer};
use super::{Machine, count, micros, panic_message, value_preview};
use crate::engine::commit::ModelCall;
use crate::engine::journal::Requested;
use crate::engine::scheduler::Scheduler;
use crate::engine::scope::{Admission, BudgetCell, Reservation, ScopeExit, ScopeId, WorstCase};
use crate::engine::{Unwind, spans};
use crate::error::ErrorKind;

impl<S, Sch> Machine<S, Sch>
where
    S: Clone + Send + 'static,
    Sch: Scheduler,
{
    /// Runs one effect and feeds its result to the next continuation. The I/O effects are boxed
    /// one by one: the machine's own future (which every branch allocates) stays small, and each
    /// call allocates only what it needs.
    pub(super) async fn effect(&mut self, effect: Box<Effect>) -> Result<Node<S>, Unwind> {
        match *effect {
            Effect::InferRaw { model, prompt } => Box::pin(self.infer_raw(model, prompt)).await,
            Effect::Infer { model, request } => Box::pin(self.infer(model, request)).await,
            Effect::Tool {
                name,
                args,
                call_id,
            } => Box::pin(self.call_tool(name, args, call_id)).await,
            Effect::ToolDefinitions => {
                let definitions = self.tools_in_scope().definitions();
                Ok(self.stack.feed(&mut Some(definitions)))
            }
            Effect::SupportsJsonSchema { model } => {
                let native = self
                    .rt
                    .config
                    .provider
                    .as_ref()
                    .is_some_and(|p| p.supports_json_schema(&model));
                Ok(self.stack.feed(&mut Some(native)))
            }
            Effect::Emit(kind) => {
                self.record(kind);
                Ok(self.stack.feed(&mut Some(())))
            }
            Effect::GetTrace => Ok(self.stack.feed(&mut Some(self.log.snapshot()))),
            Effect::TraceId => Ok(self.stack.feed(&mut Some(self.id.clone()))),
            Effect::Check => Box::pin(self.next_steering()).await,
            Effect::Now => Box::pin(self.now()).await,
            Effect::Random => Box::pin(self.random()).await,
            Effect::AwaitSteering(limit) => Box::pin(self.await_steering(limit)).await,
            Effect::Remember(memory) => Box::pin(self.remember(memory)).await,
            Effect::Recall { query, limit } => Box::pin(self.recall(query, limit)).await,
            Effect::Forget(id) => Box::pin(self.forget(id)).await,
            Effect::Fail(message) => Err(self.fail(ErrorKind::Program(message))),
            _ => Err(self.unsupported("an effect")),
        }
    }

    /// Reserves one model call on every budget in force, waiting while concurrent calls may
    /// still free room.
    pub(super) async fn reserve(&mut self, worst: WorstCase) -> Result<Reservation, Unwind> {
        let cells: Vec<(ScopeId, Arc<BudgetCell>)> = self
            .stack
            .all_scopes()
            .filter_map(|s| s.budget.clone().map(|b| (s.id, b)))
            .collect();
        loop {
            let mut reservation = Reservation::new(worst);
            let mut blocked = None;
            for (scope, cell) in &cells {
                let settled = cell.settled();
                match cell.try_reserve(worst) {
                    Admission::Admitted => reservation.push(*scope, cell.clone()),
                    Admission::Exhausted(exhausted) => {
                        reservation.release();
                        return Err(Unwind::Exit {
                            scope: *scope,
                            exit: ScopeExit::Exhausted(exhausted),
                        });
                    }
                    Admission::Wait => {
                        blocked = Some(settled);
                        break;
                    }
                }
            }
            match blocked {
                None => return Ok(reservation),
                Some(settled) => {
                    reservation.release();
                    self.guarded(settled).await?;
                }
            }
        }
    }

    /// `op::infer_raw`: calls the model with the program's own prompt.
    ///
    /// Not an `async fn`: one would hold the prompt twice (as its argument and as a local),
    /// 432 bytes of every call's boxed future; the future here holds the shared prompt's
    /// pointer.
    pub(super) fn infer_raw(
        &mut self,
        model: String,
        prompt: Prompt,
    ) -> impl Future<Output = Result<Node<S>, Unwind>> + '_ {
        let prompt = Arc::new(prompt);
        async move {
            // The program built this prompt itself: nothing is withheld from it.
            self.withheld = None;
            let response = self.call_model(model, prompt).await?;
            Ok(self.stack.feed(&mut Some(response)))
        }
    }

    /// `op::infer`: builds the prompt with the run's context pipeline, records what it did,
    /// then calls the model.
    pub(super) async fn infer(
        &mut self,
        model: String,
        request: ContextRequest,
    ) -> Result<Node<S>, Unwind> {
        let Some(pipeline) = self.rt.config.context.clone().or_else(default_pipeline) else {
            return Err(self.fail(ErrorKind::NoContextPipeline));
        };
        let tools = self.tools_in_scope().definitions();
        let preparing = {
            let input = ContextInput::new(
                &model,
                &request,
                &self.state,
                self.rt
                    .context_clock
                    .unwrap_or_else(|| self.rt.clock.wall()),
            )
            .with_memory(self.rt.config.memory.as_ref())
            .with_tools(&tools)
            .with_concurrency(self.rt.scheduler.is_concurrent());
            pipeline.prepare(input)
        };
        let mut prepared = match self.guarded(preparing).await? {
            Ok(prepared) => prepared,
            Err(error) => {
                return Err(self.fail(ErrorKind::Context {
                    model,
                    error: Box::new(error),
                }));
            }
        };
        if let Some(summarize) = prepared.summarize.take() {
            let summary =
                Box::pin(self.call_model(summarize.model, Arc::new(summarize.prompt))).await?;
            prepared = match (summarize.resume)(summary.content) {
                Ok(prepared) => prepared,
                Err(error) => {
                    return Err(self.fail(ErrorKind::Context {
                        model,
                        error: Box::new(error),
                    }));
                }
            };
        }
        let dropped: Vec<String> = prepared.report.dropped_tools().map(str::to_owned).collect();
        self.withheld = (!dropped.is_empty()).then(|| Arc::from(dropped));
        self.record(EventKind::Context(Box::new(prepared.report)));
        let response = Box::pin(self.call_model(model, Arc::new(prepared.prompt))).await?;
        Ok(self.stack.feed(&mut Some(response)))
    }

    /// Calls `model` with `prompt` under the budgets in force, recording the call. The prompt
    /// comes shared: the trace keeps it, and the future holds its pointer, not the prompt.
    pub(super) async fn call_model(
        &mut self,
        model: String,
        prompt: Arc<Prompt>,
    ) -> Result<Response, Unwind> {
        let provider = self.rt.config.provider.clone();
        // With a journal, only a call that runs live needs a provider.
        if provider.is_none() && self.rt.journal.is_none() {
            return Err(self.fail(ErrorKind::NoProvider));
        }
        let budgeted = self.stack.all_scopes().any(|s| s.budget.is_some());
        let reservation = if budgeted {
            // Worked out only under a budget: it serializes the prompt (into a counter).
            let worst = WorstCase {
                tokens: prompt.max_total_tokens(),
                cost: provider.as_ref().and_then(|p| p.max_cost(&model, &prompt)),
            };
            Box::pin(self.reserve(worst)).await?
        } else {
            Reservation::new(WorstCase::default())
        };
        let mut answer = match self.journal_fresh_model(provider.is_some()) {
            Some(answer) => answer,
            None => {
                self.journal_answer(|| Requested::Model {
                    model: model.clone(),
                    prompt: Arc::clone(&prompt),
                })
                .await?
            }
        };
        if !answer.suffices(provider.is_some()) {
            Box::pin(self.missing_handler(&mut answer, |_| Value::Null)).await?;
            reservation.release();
            return Err(self.fail(ErrorKind::NoProvider));
        }
        let iteration = self.iteration;
        let provider_name = provider.as_ref().map_or("unknown", |p| p.name());
        let span = spans::chat(self.parent_span(), provider_name, &model, self.seq);
        if self.rt.config.exports_content() {
            spans::chat_input(&span, &prompt);
        }
        self.record(EventKind::InferStart(InferStart {
            model: model.clone(),
            prompt_preview: prompt
                .messages
                .last()
                .map(|m| preview(m.content(), PREVIEW_CHARS))
                .unwrap_or_default(),
            messages: count(prompt.messages.len()),
            tools: count(prompt.tools.len()),
            iteration,
            prompt: self
                .rt
                .config
                .records_content()
                .then(|| Arc::clone(&prompt)),
        }));
        self.iteration = self.iteration.saturating_add(1);
        let started = self.rt.clock.now();
        // If this is interrupted, dropping `reservation` counts the call with unknown usage.
        let result = if let Answer::Replayed(value) = &mut answer {
            Ok(self.journal_decode::<Result<Response, ProviderError>>(&value.result)?)
        } else if let Some(cut) = answer.interrupted() {
            Err(cut)
        } else if let Some(provider) = provider.as_ref().filter(|_| self.rt.stream) {
            let rt = self.rt.clone();
            let id = self.id.clone();
            let mut forward = move |delta: agent_op::Delta| {
                for subscriber in &rt.config.subscribers {
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        subscriber.on_delta(&id, &delta);
                    }));
                }
            };
            let call = provider
                .chat_stream(&model, &prompt, &mut forward)
                .instrument(span.clone());
            self.guarded(call).await
        } else if let Some(provider) = provider {
            self.guarded(provider.chat(&model, &prompt).instrument(span.clone()))
                .await
        } else {
            return Err(self.fail(ErrorKind::NoProvider));
        };
        let result = match result {
            Ok(result) => result,
            Err(unwind) => {
                self.journal_interrupted(&answer, &unwind);
                spans::failed(&span, unwind.kind_name());
                spans::last_event(&span, self.last_seq());
                return Err(unwind);
            }
        };
        let (model, result) = match self.journal_model_entry(&mut answer, &prompt, model, result) {
            ModelAnswer::Done(model, result) => (model, result),
            ModelAnswer::Commit(entry, call) => {
                Box::pin(self.journal_append(entry)).await?;
                let ModelCall { model, result } =
                    Arc::try_unwrap(call).unwrap_or_else(|shared| ModelCall::clone(&shared));
                (model, result)
            }
        };
        let response = match result {
            Ok(response) => response,
            Err(error) => {
                // The call counts; with no known usage it cannot exceed a limit.
                let _ = reservation.settle(None, None);
                spans::chat_failed(&span, &error);
                let failure = self.fail(ErrorKind::Provider { model, error });
                spans::last_event(&span, self.last_seq());
                return Err(failure);
            }
        };
        let exceeded = reservation.settle(Some(response.usage), response.cost);
        self.record(EventKind::InferEnd(InferEnd {
            model,
            response_preview: preview(&response.content, PREVIEW_CHARS),
            tool_calls: count(response.tool_calls.len()),
            finish_reason: response.finish_reason.clone(),
            input_tokens: response.usage.input_tokens,
            output_tokens: response.usage.output_tokens,
            cost: response.cost,
            duration_us: micros(self.rt.clock.now().saturating_duration_since(started)),
            iteration,
            reply: self
                .rt
                .config
                .records_content()
                .then(|| response.to_message()),
        }));
        spans::chat_ended(&span, &response, self.rt.config.exports_content());
        spans::last_event(&span, self.last_seq());
        match exceeded {
            Some((scope, exhausted)) => Err(Unwind::Exit {
                scope,
                exit: ScopeExit::Exhausted(exhausted),
            }),
            None => Ok(response),
        }
    }

    /// Passes an await's result through; if it was interrupted (abort, deadline), marks
    /// `span` failed and records the last event it covers first.
    fn close_interrupted<T>(
        &self,
        span: &tracing::Span,
        finished: Result<T, Unwind>,
    ) -> Result<T, Unwind> {
        if let Err(unwind) = &finished {
            spans::failed(span, unwind.kind_name());
            spans::last_event(span, self.last_seq());
        }
        finished
    }

    /// The tools the program may call here: the innermost `with_tools` scope's, or the
    /// run's.
    fn tools_in_scope(&self) -> &ToolSet {
        match self.stack.tool_scope() {
            Some(scope) => &scope.tools,
            None => &self.rt.config.tools,
        }
    }

    pub(super) async fn call_tool(
        &mut self,
        name: String,
        args: Value,
        call_id: Option<String>,
    ) -> Result<Node<S>, Unwind> {
        let iteration = self.iteration;
        let scoped = match self.stack.tool_scope().cloned() {
            None => None,
            Some(scope) => match scope.tools.get(&name) {
                Some(tool) => Some(tool.clone()),
                None => {
                    // Refused before anything runs; the attempt is in the trace.
                    let allowed: Vec<String> = scope.tools.names().map(str::to_owned).collect();
                    let error = ToolError::denied(format!(
                        "the tool `{name}` is not in scope `{}` (allowed: {})",
                        scope.name,
                        if allowed.is_empty() {
                            "none".to_owned()
                        } else {
                            allowed.join(", ")
                        }
                    ));
                    let span = spans::tool(
                        self.parent_span(),
                        &name,
                        call_id.as_deref(),
                        Some(self.seq),
                    );
                    spans::failed_with(&span, "denied", &error.message);
                    self.record(EventKind::ToolDenied(event::ToolDenied {
                        name,
                        scope: scope.name.clone(),
                        allowed,
                        iteration,
                    }));
                    spans::last_event(&span, self.last_seq());
                    let result: Result<Value, ToolError> = Err(error);
                    return Ok(self.stack.feed(&mut Some(result)));
                }
            },
        };
        let span = spans::tool(
            self.parent_span(),
            &name,
            call_id.as_deref(),
            Some(self.seq),
        );
        self.record(EventKind::ToolCall(event::ToolCall {
            name: name.clone(),
            args: args.clone(),
            call_id,
            iteration,
        }));
        if let Some(withheld) = &self.withheld
            && withheld.contains(&name)
        {
            let error = ToolError::not_offered(format!(
                "the context of the last model call left the tool `{name}` out to fit its \
                 token budget, so the model was not offered it"
            ));
            self.record(EventKind::ToolResult(event::ToolResult {
                name,
                success: false,
                output_preview: preview(&error.to_string(), PREVIEW_CHARS),
                duration_us: 0,
                iteration,
                output: self
                    .rt
                    .config
                    .records_content()
                    .then(|| Value::String(error.to_string())),
            }));
            let result: Result<Value, ToolError> = Err(error);
            spans::tool_ended(&span, None, &result, false);
            spans::last_event(&span, self.last_seq());
            return Ok(self.stack.feed(&mut Some(result)));
        }
        let tool = match scoped {
            Some(_) if self.rt.config.route_tools_through_config => {
                self.rt.config.tools.get(&name).cloned()
            }
            scoped => scoped.or_else(|| self.rt.config.tools.get(&name).cloned()),
        };
        // With a journal, only a call that runs live needs the tool.
        if tool.is_none() && self.rt.journal.is_none() {
            let permitted = self.permitted_tools();
            return Err(self.unknown_tool(&span, name, permitted));
        }
        let content = self.rt.config.exports_content();
        let recorded_args = (content && !span.is_disabled()).then(|| args.clone());
        let mut answer = self.journal_answer(|| Request::tool(&name, &args)).await?;
        if !answer.suffices(tool.is_some()) {
            let permitted = |m: &Self| serde_json::json!(m.permitted_tools());
            let recorded = Box::pin(self.missing_handler(&mut answer, permitted)).await?;
            let permitted = self.journal_decode(&recorded)?;
            return Err(self.unknown_tool(&span, name, permitted));
        }
        let context = CallContext::new(self.idempotency_key(self.effects - 1));
        let started = self.rt.clock.now();
        let result: Result<Value, ToolError> = if let Answer::Replayed(value) = &mut answer {
            self.journal_decode(&value.result)?
        } else if let Some(cut) = answer.interrupted() {
            return self.close_interrupted(&span, Err(cut));
        } else {
            // A live call has its tool (`live_handler` saw to it).
            let Some(tool) = tool else {
                let permitted = self.permitted_tools();
                return Err(self.unknown_tool(&span, name, permitted));
            };
            self.run_tool(tool, args, context, &answer, &span).await?
        };
        self.journal_commit(&mut answer, &result).await?;
        // Traces keep a large image a tool returned as its hash and size.
        let traced = result.as_ref().map(agent_op::attachment::traced_output);
        let output = match &traced {
            Ok(value) => value_preview(value),
            Err(error) => preview(&error.to_string(), PREVIEW_CHARS),
        };
        self.record(EventKind::ToolResult(event::ToolResult {
            name,
            success: result.is_ok(),
            output_preview: output,
            duration_us: micros(self.rt.clock.now().saturating_duration_since(started)),
            iteration,
            output: self.rt.config.records_content().then(|| match traced {
                Ok(value) => value.into_owned(),
                Err(error) => Value::String(error.to_string()),
            }),
        }));
        spans::tool_ended(&span, recorded_args.as_ref(), &result, content);
        spans::last_event(&span, self.last_seq());
        Ok(self.stack.feed(&mut Some(result)))
    }

    /// Runs `tool` live (its answer from the journal, if any, was `Live` or `Off`): blocking
    /// tools on tokio's blocking pool, a panic as a tool error.
    async fn run_tool(
        &mut self,
        tool: Arc<dyn agent_op::Tool>,
        args: Value,
        context: CallContext,
        answer: &Answer,
        span: &tracing::Span,
    ) -> Result<Result<Value, ToolError>, Unwind> {
        if tool.is_blocking() {
            // Blocking work runs on tokio's blocking pool so it cannot stall other branches.
            // If the call is cancelled the thread finishes on its own; its result is dropped.
            // The span is not entered there: an abandoned call would hold it open past its end.
            let handle = tokio::runtime::Handle::current();
            let task =
                tokio::task::spawn_blocking(move || handle.block_on(tool.call_in(args, &context)));
            let finished = self.guarded(task).await;
            if let Err(unwind) = &finished {
                self.journal_interrupted(answer, unwind);
            }
            return Ok(match self.close_interrupted(span, finished)? {
                Ok(result) => result,
                Err(join_error) => Err(ToolError::panicked(match join_error.try_into_panic() {
                    Ok(payload) => panic_message(payload.as_ref()),
                    Err(e) => e.to_string(),
                })),
            });
        }
        let call = std::panic::catch_unwind(AssertUnwindSafe(|| tool.call_in(args, &context)));
        Ok(match call {
            Ok(fut) => {
                let running = AssertUnwindSafe(fut)
                    .catch_unwind()
                    .instrument(span.clone());
                let finished = self.guarded(running).await;
                if let Err(unwind) = &finished {
                    self.journal_interrupted(answer, unwind);
                }
                match self.close_interrupted(span, finished)? {
                    Ok(result) => result,
                    Err(payload) => Err(ToolError::panicked(panic_message(payload.as_ref()))),
                }
            }
            Err(payload) => Err(ToolError::panicked(panic_message(payload.as_ref()))),
        })
    }

    /// The names of the tools the run's config permits.
    fn permitted_tools(&self) -> Vec<String> {
        self.rt.config.tools.names().map(str::to_owned).collect()
    }

    /// Fails the run: the program called `name`, which the run does not have (it permits
    /// `permitted`).
    fn unknown_tool(
        &mut self,
        span: &tracing::Span,
        name: String,
        permitted: Vec<String>,
    ) -> Unwind {
        let kind = ErrorKind::UnknownTool { name, permitted };
        spans::failed_with(span, "unknown_tool", &kind.to_string());
        let failure = self.fail(kind);
        spans::last_event(span, self.last_seq());
        failure
    }

    /// `op::wait_steering`: the next message, waiting at most `limit` (under `guarded`, so
    /// abort and deadlines still apply).
    pub(super) async fn await_steering(
        &mut self,
        limit: std::time::Duration,
    ) -> Result<Node<S>, Unwind> {
        let mut answer = self
            .journal_answer(|| {
                Request::plain(
                    EntryKind::Steering,
                    serde_json::json!({"wait_steering_ms": limit.as_millis() as u64}),
                )
            })
            .await?;
        if let Answer::Replayed(value) = answer {
            let steering: Option<agent_op::Steering> = self.journal_decode(&value.result)?;
            return Ok(self.took_steering(steering));
        }
        let queue = self.rt.config.steering.clone();
        let clock = self.rt.clock.clone();
        let wait = async move {
            let mut timer = clock.sleep_until(clock.now() + limit);
            loop {
                // Register before looking, so a push in between is not missed.
                let arrival = queue.arrival();
                if let Some(message) = queue.pop() {
                    return Some(message);
                }
                tokio::select! {
                    biased;
                    () = arrival => {}
                    () = &mut timer => return queue.pop(),
                }
            }
        };
        let steering = match answer.interrupted() {
            Some(cut) => Err(cut),
            None => self.guarded(wait).await,
        };
        let steering = match steering {
            Ok(steering) => steering,
            Err(unwind) => {
                self.journal_interrupted(&answer, &unwind);
                return Err(unwind);
            }
        };
        self.journal_commit(&mut answer, &steering).await?;
        Ok(self.took_steering(steering))
    }

    /// `op::next_steering`: the next message, if one is waiting.
    pub(super) async fn next_steering(&mut self) -> Result<Node<S>, Unwind> {
        let mut answer = self
            .journal_answer(|| {
                Request::plain(
                    EntryKind::Steering,
                    serde_json::json!({"next_steering": null}),
                )
            })
            .await?;
        let steering = match &mut answer {
            Answer::Replayed(value) => self.journal_decode(&value.result)?,
            _ => self.rt.config.steering.pop(),
        };
        self.journal_commit(&mut answer, &steering).await?;
        Ok(self.took_steering(steering))
    }

    /// Records a steering message taken and feeds it on.
    fn took_steering(&mut self, steering: Option<agent_op::Steering>) -> Node<S> {
        if let Some(s) = &steering {
            self.record(EventKind::Steering(s.clone()));
        }
        self.stack.feed(&mut Some(steering))
    }

    /// `op::now`: the clock, journaled.
    pub(super) async fn now(&mut self) -> Result<Node<S>, Unwind> {
        let mut answer = self
            .journal_answer(|| Request::plain(EntryKind::Clock, serde_json::json!({"now": null})))
            .await?;
        let now: chrono::DateTime<Utc> = match &mut answer {
            Answer::Replayed(value) => self.journal_decode(&value.result)?,
            _ => self.rt.clock.wall(),
        };
        self.journal_commit(&mut answer, &now).await?;
        Ok(self.stack.feed(&mut Some(now)))
    }

    /// `op::random`: a random `u64`, journaled.
    pub(super) async fn random(&mut self) -> Result<Node<S>, Unwind> {
        let mut answer = self
            .journal_answer(|| {
                Request::plain(EntryKind::Random, serde_json::json!({"random": "u64"}))
            })
            .await?;
        let n: u64 = match &mut answer {
            Answer::Replayed(value) => self.journal_decode(&value.result)?,
            _ => self.rt.random(),
        };
        self.journal_commit(&mut answer, &n).await?;
        Ok(self.stack.feed(&mut Some(n)))
    }

    /// The idempotency key of this branch's effect number `n`: `<branch id>/<n>`. A
    /// resumed durable run keeps its id (the journal records it), so the key is the same
    /// when the call is repeated.
    fn idempotency_key(&self, n: u64) -> String {
        format!("{}/{n}", self.id)
    }

    /// The run's memory backend; `None` only when the run keeps a journal, which may answer
    /// a memory operation without one (see [`check_memory`](Machine::check_memory)).
    pub(super) fn memory(&mut self) -> Result<Option<Arc<dyn MemoryBackend>>, Unwind> {
        let backend = self.rt.config.memory.clone();
        if backend.is_none() && self.rt.journal.is_none() {
            return Err(self.fail(ErrorKind::NoMemoryBackend));
        }
        Ok(backend)
    }

    /// Fails the memory operation `answer` is for if it cannot go on with `backend` (see
    /// [`Answer::suffices`]).
    async fn check_memory(
        &mut self,
        backend: &Option<Arc<dyn MemoryBackend>>,
        answer: &mut Answer,
    ) -> Result<(), Unwind> {
        if !answer.suffices(backend.is_some()) {
            Box::pin(self.missing_handler(answer, |_| Value::Null)).await?;
            return Err(self.fail(ErrorKind::NoMemoryBackend));
        }
        Ok(())
    }

    pub(super) async fn remember(&mut self, memory: NewMemory) -> Result<Node<S>, Unwind> {
        let content_preview = preview(&memory.content, PREVIEW_CHARS);
        let hash = content_hash(&memory.content);
        let tags = memory.tags.clone();
        let request = || {
            Request::plain(
                EntryKind::Memory,
                serde_json::json!({"remember": &hash, "context": &memory.context, "tags": &tags}),
            )
        };
        let backend = self.memory()?;
        let mut answer = self.journal_answer(request).await?;
        self.check_memory(&backend, &mut answer).await?;
        let span = spans::memory(self.parent_span(), "remember", self.seq);
        let finished = if let Answer::Replayed(value) = &mut answer {
            Ok(
                self.journal_decode::<Result<agent_op::MemoryId, agent_op::MemoryError>>(
                    &value.result,
                )?,
            )
        } else if let Some(cut) = answer.interrupted() {
            Err(cut)
        } else {
            let Some(backend) = backend else {
                return Err(self.fail(ErrorKind::NoMemoryBackend));
            };
            let stored = backend.store(memory).instrument(span.clone());
            self.guarded(stored).await
        };
        match &finished {
            Err(unwind) => self.journal_interrupted(&answer, unwind),
            // A memory failure is a result too: a replay fails the same way.
            Ok(result) => self.journal_commit(&mut answer, result).await?,
        }
        match self.close_interrupted(&span, finished)? {
            Ok(id) => {
                spans::last_event(&span, self.seq);
                self.record(EventKind::Remember(event::Remember {
                    id: id.clone(),
                    content_preview,
                    content_hash: hash,
                    tags,
                }));
                Ok(self.stack.feed(&mut Some(id)))
            }
            Err(e) => {
                spans::failed(&span, "memory");
                let failure = self.fail(ErrorKind::Memory(e));
                spans::last_event(&span, self.last_seq());
                Err(failure)
            }
        }
    }

    pub(super) async fn forget(&mut self, id: agent_op::MemoryId) -> Result<Node<S>, Unwind> {
        let request = || Request::plain(EntryKind::Memory, serde_json::json!({"forget": &id}));
        let backend = self.memory()?;
        let mut answer = self.journal_answer(request).await?;
        self.check_memory(&backend, &mut answer).await?;
        let span = spans::memory(self.parent_span(), "forget", self.seq);
        let finished = if let Answer::Replayed(value) = &mut answer {
            Ok(self.journal_decode::<Result<bool, agent_op::MemoryError>>(&value.result)?)
        } else if let Some(cut) = answer.interrupted() {
            Err(cut)
        } else {
            let Some(backend) = backend else {
                return Err(self.fail(ErrorKind::NoMemoryBackend));
            };
            self.guarded(backend.delete(&id).instrument(span.clone()))
                .await
        };
        match &finished {
            Err(unwind) => self.journal_interrupted(&answer, unwind),
            // A memory failure is a result too: a replay fails the same way.
            Ok(result) => self.journal_commit(&mut answer, result).await?,
        }
        match self.close_interrupted(&span, finished)? {
            Ok(existed) => {
                spans::last_event(&span, self.seq);
                self.record(EventKind::Forget(event::Forget { id, existed }));
                Ok(self.stack.feed(&mut Some(existed)))
            }
            Err(e) => {
                spans::failed(&span, "memory");
                let failure = self.fail(ErrorKind::Memory(e));
                spans::last_event(&span, self.last_seq());
                Err(failure)
            }
        }
    }

    pub(super) async fn recall(&mut self, query: String, limit: usize) -> Result<Node<S>, Unwind> {
        let request = || {
            Request::plain(
                EntryKind::Recall,
                serde_json::json!({"recall": &query, "limit": limit}),
            )
        };
        let backend = self.memory()?;
        let mut answer = self.journal_answer(request).await?;
        self.check_memory(&backend, &mut answer).await?;
        let span = spans::memory(self.parent_span(), "recall", self.seq);
        let finished = if let Answer::Replayed(value) = &mut answer {
            Ok(
                self.journal_decode::<Result<Vec<agent_op::MemoryEntry>, agent_op::MemoryError>>(
                    &value.result,
                )?,
            )
        } else if let Some(cut) = answer.interrupted() {
            Err(cut)
        } else {
            let Some(backend) = backend else {
                return Err(self.fail(ErrorKind::NoMemoryBackend));
            };
            self.guarded(backend.search(&query, limit).instrument(span.clone()))
                .await
                .map(|found| found.map(|hits| hits.into_iter().map(|hit| hit.entry).collect()))
        };
        match &finished {
            Err(unwind) => self.journal_interrupted(&answer, unwind),
            // A memory failure is a result too: a replay fails the same way.
            Ok(result) => self.journal_commit(&mut answer, result).await?,
        }
        match self.close_interrupted(&span, finished)? {
            Ok(entries) => {
                span.record(
                    "effect_agents.memory.results",
                    spans::int(entries.len() as u64),
                );
                spans::last_event(&span, self.seq);
                self.record(EventKind::Recall(event::Recall {
                    query_preview: preview(&query, PREVIEW_CHARS),
                    query_hash: content_hash(&query),
                    results: count(entries.len()),
                    ids: entries.iter().map(|e| e.id.clone()).collect(),
                }));
                Ok(self.stack.feed(&mut Some(entries)))
            }
            Err(e) => {
                spans::failed(&span, "memory");
                let failure = self.fail(ErrorKind::Memory(e));
                spans::last_event(&span, self.last_seq());
                Err(failure)
            }
        }
    }

    pub(super) fn checkpoint(
        &mut self,
        name: String,
        snapshot: fn(&S) -> Result<Value, serde_json::Error>,
    ) -> Result<(), Unwind> {
        let state = match snapshot(&self.state) {
            Ok(state) => state,
            Err(cause) => {
                let cause = agent_op::Cause::new(cause);
                return Err(self.fail(ErrorKind::Checkpoint { name, cause }));
            }
        };
        // One clock read for the event and the checkpoint: they are the same moment.
        let at = self.rt.clock.wall();
        let _span = spans::checkpoint(self.parent_span(), &name, self.seq);
        let n = self.next_effect();
        let reached = CheckpointReached { name: name.clone() };
        self.record_event(Event::at(at, EventKind::Checkpoint(reached)));
        let checkpoint = Checkpoint::new(name, self.id.clone(), self.log.count(), state, at);
        self.journal_checkpoint(n, &checkpoint);
        for subscriber in &self.rt.config.subscribers {
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                subscriber.on_checkpoint(&checkpoint);
            }));
        }
        self.rt.push_checkpoint(checkpoint);
        Ok(())
    }
}

/// The pipeline `infer` uses when the config sets none.
#[cfg(feature = "prompt")]
fn default_pipeline() -> Option<Arc<dyn ContextPipeline>> {
    static DEFAULT: std::sync::OnceLock<Arc<dyn ContextPipeline>> = std::sync::OnceLock::new();
    Some(
        DEFAULT
            .get_or_init(|| Arc::new(agent_prompt::Pipeline::new()))
            .clone(),
    )
}

#[cfg(not(feature = "prompt"))]
fn default_pipeline() -> Option<Arc<dyn ContextPipeline>> {
    None
}
