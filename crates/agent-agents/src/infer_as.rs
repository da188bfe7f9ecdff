//! [`infer_as`]: ask a model for a typed value, repairing bad replies progressively.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use agent_op::op::{self, Op};
use agent_op::{ContextRequest, Message, Prompt, Response, ResponseFormat};

use crate::output::{LlmOutput, OutputFormat, ParseError};

/// What to ask: a prompt built by the program, or a context request the run's pipeline
/// hydrates (see `op::infer`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Ask {
    /// A prompt, sent as it is (plus format instructions or a native response format).
    Prompt(Prompt),
    /// A context request; format instructions are added to its observation.
    Context(ContextRequest),
}

impl From<Prompt> for Ask {
    fn from(prompt: Prompt) -> Ask {
        Ask::Prompt(prompt)
    }
}

impl From<ContextRequest> for Ask {
    fn from(request: ContextRequest) -> Ask {
        Ask::Context(request)
    }
}

/// Why one attempt's reply was not used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttemptError {
    /// It did not parse.
    #[error("{0}")]
    Parse(#[from] ParseError),
    /// It parsed, and the validator refused it.
    #[error("{0}")]
    Invalid(String),
}

/// One model call of [`infer_as`]: the raw reply and why it was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// What the model replied.
    pub raw: String,
    /// Why it was not used.
    pub error: AttemptError,
}

/// No usable value after every allowed repair: every attempt's reply and error, in order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "no usable `{type_name}` after {} model call(s); the last: {}",
    .attempts.len(),
    .attempts.last().map(|a| a.error.to_string()).unwrap_or_default()
)]
pub struct OutputError {
    /// The type asked for.
    pub type_name: String,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
}

type Validator<T> = Arc<dyn Fn(&T) -> Result<(), String> + Send + Sync>;

/// How [`infer_as`] asks for a `T` and repairs bad replies: build one with
/// [`Structured::new`], set it up, then [`ask`](Structured::ask).
///
/// - When the provider enforces JSON schemas ([`op::supports_json_schema`]), a JSON type is
///   asked for with [`ResponseFormat::JsonSchema`]; otherwise (and for text, numbers, choices
///   and lines) one line of format instructions is added. The first prompt stays minimal.
/// - A reply that does not parse is repaired: the next call shows the model its reply, the
///   parse error, the full format (the JSON schema) and the examples. `repairs` of them
///   (default 1).
/// - A reply that parses but fails [`validate`](Structured::validate) is repaired the same
///   way, with the validator's message, `validation_repairs` times (default 1, counted
///   apart).
///
/// Every attempt is a model call of the run: traced, inside its budgets.
pub struct Structured<T> {
    repairs: u32,
    validation_repairs: u32,
    validate: Option<Validator<T>>,
    strict: bool,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Structured<T> {
    fn clone(&self) -> Self {
        Structured {
            repairs: self.repairs,
            validation_repairs: self.validation_repairs,
            validate: self.validate.clone(),
            strict: self.strict,
            _t: PhantomData,
        }
    }
}

impl<T> fmt::Debug for Structured<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Structured")
            .field("repairs", &self.repairs)
            .field("validation_repairs", &self.validation_repairs)
            .field("validates", &self.validate.is_some())
            .field("strict", &self.strict)
            .finish()
    }
}

impl<T: LlmOutput> Default for Structured<T> {
    fn default() -> Self {
        Structured::new()
    }
}

impl<T: LlmOutput> Structured<T> {
    /// One repair of a reply that does not parse, no validator, non-strict schemas.
    pub fn new() -> Structured<T> {
        Structured {
            repairs: 1,
            validation_repairs: 1,
            validate: None,
            strict: false,
            _t: PhantomData,
        }
    }

    /// Repairs of replies that do not parse (default 1; 0 fails on the first bad reply).
    pub fn repairs(mut self, n: u32) -> Self {
        self.repairs = n;
        self
    }

    /// Checks a parsed value; a refusal (the message is shown to the model) triggers a
    /// repair, at most `repairs` times (counted apart from parse repairs).
    pub fn validate(
        mut self,
        repairs: u32,
        check: impl Fn(&T) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.validation_repairs = repairs;
        self.validate = Some(Arc::new(check));
        self
    }

    /// Asks providers to enforce the schema strictly (OpenAI's `strict: true`, which only
    /// accepts schemas whose objects list every property as required and allow no others).
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// The program asking `model` for a `T`.
    pub fn ask<S: 'static>(
        self,
        model: impl Into<String>,
        ask: impl Into<Ask>,
    ) -> Op<S, Result<T, OutputError>> {
        let model = model.into();
        let ask = ask.into();
        let native_possible =
            matches!((&ask, T::format()), (Ask::Prompt(_), OutputFormat::Json(_)));
        let state = Repair {
            settings: self,
            model: model.clone(),
            ask,
            native: false,
            attempts: Vec::new(),
            parse_left: 0,
            validation_left: 0,
        };
        if native_possible {
            op::supports_json_schema(model).and_then(move |native| state.start(native))
        } else {
            state.start(false)
        }
    }
}

/// Asks `model` for a `T` with the default [`Structured`] settings (one repair).
///
/// ```
/// use agent_agents::infer_as;
/// use agent_op::op::Op;
/// use agent_op::Prompt;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Plan { steps: Vec<String> }
///
/// let plan: Op<(), _> = infer_as::<_, Plan>("gpt-4o-mini", Prompt::new().user("Plan a picnic."));
/// # let _ = plan;
/// ```
pub fn infer_as<S: 'static, T: LlmOutput>(
    model: impl Into<String>,
    ask: impl Into<Ask>,
) -> Op<S, Result<T, OutputError>> {
    Structured::<T>::new().ask(model, ask)
}

/// The state of one `infer_as` between attempts.
struct Repair<T> {
    settings: Structured<T>,
    model: String,
    ask: Ask,
    native: bool,
    attempts: Vec<Attempt>,
    parse_left: u32,
    validation_left: u32,
}

impl<T: LlmOutput> Repair<T> {
    fn start<S: 'static>(mut self, native: bool) -> Op<S, Result<T, OutputError>> {
        self.native = native;
        self.parse_left = self.settings.repairs;
        self.validation_left = self.settings.validation_repairs;
        self.attempt()
    }

    fn attempt<S: 'static>(self) -> Op<S, Result<T, OutputError>> {
        let call: Op<S, Response> = match self.request() {
            Ask::Prompt(prompt) => op::infer_raw(self.model.clone(), prompt),
            Ask::Context(request) => op::infer(self.model.clone(), request),
        };
        call.and_then(move |reply| self.judge(reply.content))
    }

    fn judge<S: 'static>(mut self, raw: String) -> Op<S, Result<T, OutputError>> {
        let error = match T::parse(&raw) {
            Ok(value) => match self.settings.validate.as_ref().map(|check| check(&value)) {
                None | Some(Ok(())) => return op::pure(Ok(value)),
                Some(Err(message)) => AttemptError::Invalid(message),
            },
            Err(e) => AttemptError::Parse(e),
        };
        let left = match error {
            AttemptError::Parse(_) => &mut self.parse_left,
            AttemptError::Invalid(_) => &mut self.validation_left,
        };
        let retry = *left > 0;
        *left = left.saturating_sub(1);
        self.attempts.push(Attempt { raw, error });
        if retry {
            self.attempt()
        } else {
            op::pure(Err(OutputError {
                type_name: T::name(),
                attempts: self.attempts,
            }))
        }
    }

    /// The request of the next attempt: minimal the first time; with the last reply, its
    /// error, the whole format and the examples after a failure.
    fn request(&self) -> Ask {
        let format = T::format();
        let last = self.attempts.last();
        let instructions = match last {
            // The schema itself is sent natively: no instructions needed.
            None if self.native => String::new(),
            None => format.instructions(true),
            Some(attempt) => repair_message::<T>(&format, attempt, !self.native),
        };
        match &self.ask {
            Ask::Prompt(prompt) => {
                let mut prompt = prompt.clone();
                if self.native
                    && let OutputFormat::Json(schema) = &format
                {
                    prompt = prompt.response_format(ResponseFormat::JsonSchema {
                        name: T::name(),
                        schema: schema.clone(),
                        strict: self.settings.strict,
                    });
                }
                match last {
                    None if !instructions.is_empty() => add_to_system(&mut prompt, &instructions),
                    None => {}
                    Some(attempt) => {
                        prompt
                            .messages
                            .push(Message::assistant(attempt.raw.clone()));
                        prompt.messages.push(Message::user(instructions));
                    }
                }
                Ask::Prompt(prompt)
            }
            Ask::Context(request) => {
                let mut request = request.clone();
                if !instructions.is_empty() {
                    request.observation = format!("{}\n\n{instructions}", request.observation);
                }
                Ask::Context(request)
            }
        }
    }
}

/// What the model is told after a reply that could not be used: why, the reply itself when
/// `quote_reply` (when the model will not see it in the conversation), the whole format, the
/// description and the examples. Shared by [`infer_as`] and the agent loop.
pub(crate) fn repair_message<T: LlmOutput>(
    format: &OutputFormat,
    attempt: &Attempt,
    quote_reply: bool,
) -> String {
    let mut message = match &attempt.error {
        AttemptError::Parse(e) => format!("Your reply could not be read: {e}."),
        AttemptError::Invalid(why) => format!("Your reply is not acceptable: {why}."),
    };
    if quote_reply {
        message.push_str(&format!(
            "\nYour reply was:\n{}\n",
            attempt.raw.chars().take(2_000).collect::<String>()
        ));
    }
    let full = format.instructions(false);
    if !full.is_empty() {
        message.push('\n');
        message.push_str(&full);
    }
    let description = T::description();
    if !description.is_empty() {
        message.push_str(&format!("\nIt describes: {description}"));
    }
    let examples = T::examples();
    if !examples.is_empty() {
        message.push_str("\nExamples of good replies:");
        for example in examples {
            message.push('\n');
            message.push_str(&example);
        }
    }
    message.push_str("\nReply again, with the corrected answer only.");
    message
}

/// Adds `text` to the prompt's system message (creating one first if there is none).
fn add_to_system(prompt: &mut Prompt, text: &str) {
    // A prompt's messages may be shared with others: the prompt gets a changed copy.
    let mut messages = prompt.messages.to_vec();
    match messages.first_mut() {
        Some(Message::System { content }) => {
            content.push_str("\n\n");
            content.push_str(text);
        }
        _ => messages.insert(0, Message::system(text)),
    }
    prompt.messages = messages.into();
}
