//! [`agent`]: the agent loop as an `Op` program — ask the model, run the tools it calls,
//! repeat until it answers with a `T`.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use agent_op::op::{self, Op};
use agent_op::{
    Budget, Merge, Message, Messages, Prompt, Response, ToolCall, ToolDefinition, ToolError,
};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::infer_as::{Attempt, AttemptError, OutputError, repair_message};
use crate::middleware::ContextLayer;
use crate::output::LlmOutput;
use crate::toolbox::{Toolbox, with_toolbox};

/// Why an agent stopped without an answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// It used every turn it had without answering.
    #[error("the agent did not answer within {turns} turn(s)")]
    MaxTurns {
        /// The turns it had.
        turns: u32,
    },
    /// Its answers could not be used, even after the allowed repairs.
    #[error("{0}")]
    Output(OutputError),
    /// Verification kept failing ([`Agent::verified`]).
    #[error("the answer failed verification {}; the last: {last}", times(*rounds))]
    Unverified {
        /// How many rounds were run.
        rounds: u32,
        /// The last check's message.
        last: String,
    },
}

/// "once", "twice", "3 times".
fn times(n: u32) -> String {
    match n {
        1 => "once".to_owned(),
        2 => "twice".to_owned(),
        n => format!("{n} times"),
    }
}

type Check<S, T> = Arc<dyn Fn(&T) -> Op<S, Result<(), String>> + Send + Sync>;

/// An agent: a model, a toolbox, a goal, and how long it may go on. Build one with
/// [`agent`], then [`run`](Agent::run) it.
///
/// Each turn asks the model with the conversation so far and the toolbox's tools. A reply
/// that calls tools runs them — all of one reply's calls at once under the parallel
/// interpreter, in one `par` — and their results are added in the order the model asked
/// for them; a tool error is shown to the model as the call's result. A reply without tool
/// calls is the answer, parsed as a `T` ([`LlmOutput`]); one that does not parse is
/// repaired (the error and the format shown), `repairs` times. The whole loop runs inside
/// [`with_toolbox`], so the runtime refuses any tool outside the toolbox.
///
/// It is an ordinary program: its model and tool calls are traced, budgets and timeouts
/// around it bound it, abort stops it, and both interpreters run it the same way.
pub struct Agent<S, T> {
    model: String,
    toolbox: Toolbox,
    goal: String,
    instructions: Option<String>,
    context: Vec<String>,
    max_turns: u32,
    repairs: u32,
    check: Option<(Check<S, T>, u32)>,
    layers: Vec<Arc<dyn ContextLayer<S>>>,
    subagents: Vec<SubAgent<S>>,
    approval_timeout: std::time::Duration,
    _t: PhantomData<fn() -> T>,
}

impl<S, T> Clone for Agent<S, T> {
    fn clone(&self) -> Self {
        Agent {
            model: self.model.clone(),
            toolbox: self.toolbox.clone(),
            goal: self.goal.clone(),
            instructions: self.instructions.clone(),
            context: self.context.clone(),
            max_turns: self.max_turns,
            repairs: self.repairs,
            check: self.check.clone(),
            layers: self.layers.clone(),
            subagents: self.subagents.clone(),
            approval_timeout: self.approval_timeout,
            _t: PhantomData,
        }
    }
}

impl<S, T> fmt::Debug for Agent<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.model)
            .field("toolbox", &self.toolbox)
            .field("goal", &self.goal)
            .field("max_turns", &self.max_turns)
            .field("repairs", &self.repairs)
            .field("verified", &self.check.is_some())
            .finish_non_exhaustive()
    }
}

/// An agent asking `model` to reach `goal` with `toolbox`: 10 turns, one repair.
///
/// ```
/// use agent_agents::{agent, tool, Toolbox};
/// use agent_op::op::Op;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Query { city: String }
/// let weather = tool("weather", "Today's weather", |q: Query| async move { Ok(format!("Sunny in {}", q.city)) });
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Advice { umbrella: bool }
///
/// let program: Op<(), _> = agent::<(), Advice>("gpt-4o-mini", &Toolbox::new("w").with(weather), "Do I need an umbrella in Oslo?")
///     .max_turns(4)
///     .run();
/// # let _ = program;
/// ```
pub fn agent<S, T: LlmOutput>(
    model: impl Into<String>,
    toolbox: &Toolbox,
    goal: impl Into<String>,
) -> Agent<S, T> {
    Agent {
        model: model.into(),
        toolbox: toolbox.clone(),
        goal: goal.into(),
        instructions: None,
        context: Vec::new(),
        max_turns: 10,
        repairs: 1,
        check: None,
        layers: Vec::new(),
        subagents: Vec::new(),
        approval_timeout: std::time::Duration::from_secs(300),
        _t: PhantomData,
    }
}

impl<S, T> Agent<S, T>
where
    S: Merge + Clone + Send + 'static,
    T: LlmOutput,
{
    /// At most `n` model calls that are turns (repairs count too).
    pub fn max_turns(mut self, n: u32) -> Self {
        self.max_turns = n;
        self
    }

    /// Repairs of final answers that do not parse (default 1).
    pub fn repairs(mut self, n: u32) -> Self {
        self.repairs = n;
        self
    }

    /// Instructions put first in the system message.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// Adds context the model sees with the goal.
    pub fn context(mut self, text: impl Into<String>) -> Self {
        self.context.push(text.into());
        self
    }

    /// The agent cannot return until `check` (a program: run the compiler tool, validate
    /// against a schema…) accepts its answer: a refusal is given back to it as context and
    /// it runs again, at most `rounds` times in all.
    pub fn verified(
        mut self,
        rounds: u32,
        check: impl Fn(&T) -> Op<S, Result<(), String>> + Send + Sync + 'static,
    ) -> Self {
        self.check = Some((Arc::new(check), rounds.max(1)));
        self
    }

    /// Transforms the conversation before each model call (after the layers added before
    /// it): [`Truncate`](crate::Truncate), [`ElideToolResults`](crate::ElideToolResults),
    /// [`Compact`](crate::Compact), or your own [`ContextLayer`]. The transformed
    /// conversation is the one the agent goes on with (a compaction's summary is made once,
    /// and what was elided or dropped stays so).
    pub fn middleware(mut self, layer: impl ContextLayer<S> + 'static) -> Self {
        self.layers.push(Arc::new(layer));
        self
    }

    /// How long a call of a tool that [needs approval](crate::TypedTool::needs_approval)
    /// waits for one (default 5 minutes); then it is a tool error.
    pub fn approval_timeout(mut self, limit: std::time::Duration) -> Self {
        self.approval_timeout = limit;
        self
    }

    /// Offers the model another agent as a tool ([`SubAgent`]): its run nests in this one's
    /// trace, under its own budget and (narrower) toolbox.
    pub fn sub_agent(mut self, sub: SubAgent<S>) -> Self {
        self.subagents.push(sub);
        self
    }

    /// The program running the agent.
    pub fn run(self) -> Op<S, Result<T, AgentError>> {
        match self.check.clone() {
            None => self.run_once(),
            Some((check, rounds)) => verify(self, check, rounds, 1),
        }
    }

    fn run_once(self) -> Op<S, Result<T, AgentError>> {
        let toolbox = self.toolbox.clone();
        let mut tools = toolbox.definitions();
        tools.extend(self.subagents.iter().map(|s| s.definition.clone()));
        let state = Turns {
            approval: toolbox.needing_approval().map(str::to_owned).collect(),
            approval_timeout: self.approval_timeout,
            subagents: self.subagents.clone().into(),
            layers: self.layers.clone().into(),
            messages: self.opening(),
            model: self.model,
            tools: tools.into(),
            turns_left: self.max_turns,
            max_turns: self.max_turns,
            repairs_left: self.repairs,
            attempts: Vec::new(),
            _t: PhantomData,
        };
        with_toolbox(&toolbox, state.turn())
    }

    fn opening(&self) -> Messages {
        let mut system = String::new();
        if let Some(instructions) = &self.instructions {
            system.push_str(instructions);
            system.push_str("\n\n");
        }
        system.push_str(
            "Use the tools when they help. When you have the answer, reply without calling a \
             tool.",
        );
        let format = T::format().instructions(true);
        if !format.is_empty() {
            system.push(' ');
            system.push_str(&format);
        }
        let mut goal = self.goal.clone();
        for context in &self.context {
            goal.push_str("\n\n");
            goal.push_str(context);
        }
        Messages::from([Message::system(system), Message::user(goal)])
    }
}

/// Runs the agent, checks its answer, and runs it again with the refusal as context.
fn verify<S, T>(
    agent: Agent<S, T>,
    check: Check<S, T>,
    rounds: u32,
    round: u32,
) -> Op<S, Result<T, AgentError>>
where
    S: Merge + Clone + Send + 'static,
    T: LlmOutput,
{
    let again = agent.clone();
    agent.run_once().and_then(move |answer| match answer {
        Err(e) => op::pure(Err(e)),
        Ok(value) => check(&value).and_then(move |verdict| match verdict {
            Ok(()) => op::pure(Ok(value)),
            Err(last) if round >= rounds => op::pure(Err(AgentError::Unverified { rounds, last })),
            Err(why) => verify(
                again.context(format!(
                    "A previous answer was refused: {why}. Fix that in your answer."
                )),
                check,
                rounds,
                round + 1,
            ),
        }),
    })
}

/// The loop's state between turns.
struct Turns<S, T> {
    approval: Arc<[String]>,
    approval_timeout: std::time::Duration,
    subagents: Arc<[SubAgent<S>]>,
    layers: Arc<[Arc<dyn ContextLayer<S>>]>,
    model: String,
    /// The conversation: each prompt shares it rather than copying it, so a turn costs the
    /// same however long the conversation is, and the trace holds each message once.
    messages: Messages,
    /// Shared by every turn's prompt.
    tools: Arc<[ToolDefinition]>,
    turns_left: u32,
    max_turns: u32,
    repairs_left: u32,
    attempts: Vec<Attempt>,
    _t: PhantomData<fn() -> T>,
}

impl<S: Merge + Clone + Send + 'static, T: LlmOutput> Turns<S, T> {
    fn turn(mut self) -> Op<S, Result<T, AgentError>> {
        if self.turns_left == 0 {
            return op::pure(Err(AgentError::MaxTurns {
                turns: self.max_turns,
            }));
        }
        self.turns_left -= 1;
        if self.layers.is_empty() {
            return self.ask();
        }
        // Layers rewrite the conversation as a vector of their own.
        let history = self.messages.to_vec();
        transform(self.layers.clone(), 0, history).and_then(move |messages| {
            self.messages = messages.into();
            self.ask()
        })
    }

    /// Asks the model with the conversation so far.
    fn ask(self) -> Op<S, Result<T, AgentError>> {
        let prompt = Prompt::from_messages(self.messages.clone()).tools(self.tools.clone());
        op::infer_raw(self.model.clone(), prompt).and_then(move |reply| self.answer(reply))
    }

    fn answer(mut self, reply: Response) -> Op<S, Result<T, AgentError>> {
        if !reply.tool_calls.is_empty() {
            let calls: Vec<ToolCall> = reply.tool_calls.clone();
            self.messages.push(reply.to_message());
            let runs: Vec<Op<S, serde_json::Value>> = calls
                .iter()
                .map(|call| {
                    let run = match self
                        .subagents
                        .iter()
                        .find(|s| s.definition.name == call.name)
                    {
                        Some(sub) => (sub.run)(call.clone()),
                        None if self.approval.contains(&call.name) => {
                            approved(call.clone(), self.approval_timeout)
                        }
                        None => op::tool_call(call.clone()),
                    };
                    run.map(|result| match result {
                        Ok(value) => value,
                        Err(error) => serde_json::Value::String(format!("error: {error}")),
                    })
                })
                .collect();
            return op::par(runs).and_then(move |results| {
                for (call, result) in calls.iter().zip(results) {
                    // Images a tool returned (MCP image blocks) become typed attachments.
                    self.messages
                        .push(Message::tool_output(call.id.clone(), &result));
                }
                self.turn()
            });
        }
        match T::parse(&reply.content) {
            Ok(value) => op::pure(Ok(value)),
            Err(error) => {
                let attempt = Attempt {
                    raw: reply.content.clone(),
                    error: AttemptError::Parse(error),
                };
                // The reply stays in the conversation: no need to quote it.
                let message = repair_message::<T>(&T::format(), &attempt, false);
                self.attempts.push(attempt);
                if self.repairs_left == 0 {
                    return op::pure(Err(AgentError::Output(OutputError {
                        type_name: T::name(),
                        attempts: self.attempts,
                    })));
                }
                self.repairs_left -= 1;
                self.messages.push(reply.to_message());
                self.messages.push(Message::user(message));
                self.turn()
            }
        }
    }
}

/// Runs `layers[from..]` over `messages`, in order.
fn transform<S: Send + 'static>(
    layers: Arc<[Arc<dyn ContextLayer<S>>]>,
    from: usize,
    messages: Vec<Message>,
) -> Op<S, Vec<Message>> {
    match layers.get(from).cloned() {
        None => op::pure(messages),
        Some(layer) => layer
            .apply(messages)
            .and_then(move |messages| transform(layers, from + 1, messages)),
    }
}

type RunSub<S> = Arc<dyn Fn(ToolCall) -> Op<S, Result<Value, ToolError>> + Send + Sync>;

/// An agent offered to another as a tool: typed input (its schema generated, arguments
/// validated), a budget of its own, and its own toolbox, which must be narrower than the
/// caller's (the runtime refuses a wider one). Its model and tool calls appear in the
/// caller's trace, in the branch of the call, between `agent_call` and `agent_result`
/// events.
pub struct SubAgent<S> {
    definition: ToolDefinition,
    run: RunSub<S>,
}

impl<S> Clone for SubAgent<S> {
    fn clone(&self) -> Self {
        SubAgent {
            definition: self.definition.clone(),
            run: self.run.clone(),
        }
    }
}

impl<S> fmt::Debug for SubAgent<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubAgent")
            .field("name", &self.definition.name)
            .finish_non_exhaustive()
    }
}

impl<S: Merge + Clone + Send + 'static> SubAgent<S> {
    /// The tool `name`, described by `description`: `make` builds the agent from the typed
    /// input; it runs under `budget`. Its answer (an `O`) is returned to the caller as JSON;
    /// its failure (no answer, budget spent) as a tool error.
    ///
    /// ```
    /// use agent_agents::{agent, SubAgent, Toolbox};
    /// use agent_op::Budget;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Topic { topic: String }
    /// #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    /// struct Notes { points: Vec<String> }
    ///
    /// let researcher = SubAgent::<()>::new("research", "Researches a topic", Budget::new().calls(5),
    ///     |t: Topic| agent::<(), Notes>("small", &Toolbox::new("none"), format!("Research {}", t.topic)));
    /// # let _ = researcher;
    /// ```
    pub fn new<I, O>(
        name: impl Into<String>,
        description: impl Into<String>,
        budget: Budget,
        make: impl Fn(I) -> Agent<S, O> + Send + Sync + 'static,
    ) -> SubAgent<S>
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        O: LlmOutput + Serialize,
    {
        let name = name.into();
        let schema = crate::output::schema_of::<I>();
        let validator = jsonschema::validator_for(&schema).ok().map(Arc::new);
        let definition = ToolDefinition {
            name: name.clone(),
            description: description.into(),
            parameters: schema,
        };
        let run: RunSub<S> = Arc::new(move |call: ToolCall| {
            let args = call.arguments;
            let input: I = match crate::tool::parse_args(validator.as_deref(), args.clone()) {
                Ok(input) => input,
                Err(e) => return op::pure(Err(e)),
            };
            let name = name.clone();
            let started = agent_op::EventKind::custom(
                "agent_call",
                serde_json::json!({"name": name, "call_id": call.id, "args": args}),
            );
            let scope_name = name.clone();
            let body = op::emit(started)
                .then(op::limit(budget.clone(), make(input).run()))
                .and_then(move |outcome| {
                    let result = match outcome {
                        Ok(Ok(answer)) => serde_json::to_value(&answer).map_err(|e| {
                            ToolError::failed(format!("the answer could not be serialized: {e}"))
                        }),
                        Ok(Err(e)) => Err(ToolError::failed(format!("sub-agent `{name}`: {e}"))),
                        Err(spent) => Err(ToolError::failed(format!(
                            "sub-agent `{name}` ran out of its budget: {spent}"
                        ))),
                    };
                    let ended = agent_op::EventKind::custom(
                        "agent_result",
                        serde_json::json!({"name": name, "ok": result.is_ok()}),
                    );
                    op::emit(ended).map(move |_| result)
                });
            op::invoke_agent(scope_name, Some(call.id), body)
        });
        SubAgent { definition, run }
    }
}

/// Runs `call` once approved on the steering channel: records `approval_requested`, waits for
/// `approve` / `approve <call id>` (run), anything else (denied) or nothing in time (error).
fn approved<S: 'static>(
    call: ToolCall,
    limit: std::time::Duration,
) -> Op<S, Result<Value, ToolError>> {
    let request = agent_op::EventKind::custom(
        "approval_requested",
        serde_json::json!({"tool": call.name, "call_id": call.id, "args": call.arguments}),
    );
    op::emit(request)
        .then(op::wait_steering(limit))
        .and_then(move |answer| match answer {
            Some(s)
                if s.message.trim().eq_ignore_ascii_case("approve")
                    || s.message.trim() == format!("approve {}", call.id) =>
            {
                op::tool_call(call)
            }
            Some(s) => op::pure(Err(ToolError::denied(format!(
                "the user did not approve `{}`: {}",
                call.name, s.message
            )))),
            None => op::pure(Err(ToolError::failed(format!(
                "no approval for `{}` within {limit:?}",
                call.name
            )))),
        })
}

#[cfg(test)]
mod tests {
    use super::AgentError;

    #[test]
    fn verification_rounds_are_counted_in_words() {
        let failed = |rounds| {
            AgentError::Unverified {
                rounds,
                last: "too long".into(),
            }
            .to_string()
        };
        assert_eq!(
            failed(1),
            "the answer failed verification once; the last: too long"
        );
        assert!(failed(2).contains("verification twice;"));
        assert!(failed(3).contains("verification 3 times;"));
    }
}
