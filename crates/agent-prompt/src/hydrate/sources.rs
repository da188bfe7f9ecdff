//! The built-in sources: fixed text (or a file read once), the recent conversation, semantic
//! recall, long-term knowledge, values of the program's state, and conditional sources.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_op::context::{ContextInput, Priority, SectionSource};
use agent_op::{MemoryBackend, Message, Tag};

use super::{ContextSource, Hydrated, Recalled, SourceError, SourceFuture};
use crate::section::{CompositionMode, Section};

fn ready(result: Result<Hydrated, SourceError>) -> SourceFuture {
    Box::pin(std::future::ready(result))
}

/// Fixed text: base instructions, rules, a persona. Critical and hierarchical unless told
/// otherwise (instructions frame everything else and are never dropped).
///
/// [`Static::file`] reads its file on first use and keeps the text (a failed read is
/// retried on the next call, and fails that call with the path in the error).
pub struct Static {
    id: String,
    label: String,
    text: Mutex<Option<Arc<str>>>,
    path: Option<PathBuf>,
    priority: Priority,
    composition: CompositionMode,
}

impl Static {
    /// The section `id`, headed `label`, holding `text`.
    pub fn text(id: impl Into<String>, label: impl Into<String>, text: impl Into<String>) -> Self {
        Static {
            id: id.into(),
            label: label.into(),
            text: Mutex::new(Some(Arc::from(text.into()))),
            path: None,
            priority: Priority::Critical,
            composition: CompositionMode::Hierarchical,
        }
    }

    /// The section `id`, headed `label`, holding the text of the file at `path`.
    pub fn file(id: impl Into<String>, label: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Static {
            id: id.into(),
            label: label.into(),
            text: Mutex::new(None),
            path: Some(path.into()),
            priority: Priority::Critical,
            composition: CompositionMode::Hierarchical,
        }
    }

    /// With `priority` (default critical).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// With `mode` (default hierarchical).
    pub fn composition(mut self, mode: CompositionMode) -> Self {
        self.composition = mode;
        self
    }

    fn load(&self) -> Result<Arc<str>, SourceError> {
        let mut text = self.text.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(text) = &*text {
            return Ok(text.clone());
        }
        let Some(path) = &self.path else {
            return Ok(Arc::from(""));
        };
        let read = std::fs::read_to_string(path).map_err(|source| SourceError::Io {
            path: path.clone(),
            source,
        })?;
        let read: Arc<str> = Arc::from(read);
        *text = Some(read.clone());
        Ok(read)
    }
}

impl ContextSource for Static {
    fn name(&self) -> &str {
        &self.id
    }

    fn hydrate(&self, _input: &ContextInput<'_>) -> SourceFuture {
        let origin = match &self.path {
            Some(path) => std::borrow::Cow::Owned(path.display().to_string()),
            None => std::borrow::Cow::Borrowed("code"),
        };
        ready(self.load().map(|text| {
            Hydrated::new(vec![
                Section::text(&self.id, &self.label, &*text)
                    .with_source(SectionSource::Static { origin })
                    .with_priority(self.priority)
                    .with_composition(self.composition),
            ])
        }))
    }
}

type HistoryFn<S> = dyn for<'a> Fn(&'a S) -> &'a [Message] + Send + Sync;

/// The recent conversation, read from the program's state: the last
/// [`temporal_window`](agent_op::context::ContextStrategy::temporal_window) messages, as one
/// message section (`conversation`). High priority and shrinkable: under a tight budget its
/// oldest messages go first, and a tool call never loses its result.
pub struct Conversation<S> {
    history: Box<HistoryFn<S>>,
    min_tokens: u32,
}

impl<S: 'static> Conversation<S> {
    /// The conversation `history` reads from the state.
    ///
    /// ```
    /// use agent_op::Message;
    /// use agent_prompt::Conversation;
    ///
    /// struct Chat { history: Vec<Message> }
    /// let source = Conversation::from_state(|chat: &Chat| &chat.history);
    /// # let _ = source;
    /// ```
    pub fn from_state<F>(history: F) -> Self
    where
        F: for<'a> Fn(&'a S) -> &'a Vec<Message> + Send + Sync + 'static,
    {
        Conversation {
            history: Box::new(move |s| history(s).as_slice()),
            min_tokens: 64,
        }
    }

    /// The fewest tokens of conversation worth sending (default 64): below that it is
    /// dropped rather than cut further.
    pub fn min_tokens(mut self, min: u32) -> Self {
        self.min_tokens = min;
        self
    }
}

impl<S: 'static> ContextSource for Conversation<S> {
    fn name(&self) -> &str {
        "conversation"
    }

    fn hydrate(&self, input: &ContextInput<'_>) -> SourceFuture {
        let Some(state) = input.state::<S>() else {
            return ready(Err(SourceError::StateType {
                expected: std::any::type_name::<S>(),
            }));
        };
        let history = (self.history)(state);
        let window = input.request.strategy.temporal_window;
        let recent = &history[history.len().saturating_sub(window)..];
        if recent.is_empty() {
            return ready(Ok(Hydrated::nothing()));
        }
        let section = Section::messages("conversation", recent.to_vec())
            .with_min_tokens(self.min_tokens)
            .with_recency(input.now);
        ready(Ok(Hydrated::new(vec![section])))
    }
}

/// Memories related to the request, found by semantic search: up to
/// [`semantic_limit`](agent_op::context::ContextStrategy::semantic_limit) entries whose
/// cosine similarity to the observation (and goal) is at least
/// [`semantic_threshold`](agent_op::context::ContextStrategy::semantic_threshold), one section
/// each (`semantic:<memory id>`, relevance = similarity, recency = when it was stored),
/// medium priority. An entry the backend reports no similarity for is kept only when the
/// threshold is ≤ 0. Only the entries sent to the model count as recalled.
///
/// Reads the run's memory backend unless given one.
pub struct Semantic {
    backend: Option<Arc<dyn MemoryBackend>>,
    label: String,
    priority: Priority,
}

impl Semantic {
    /// Semantic recall from the run's memory backend.
    pub fn new() -> Semantic {
        Semantic {
            backend: None,
            label: "## Related memories".to_owned(),
            priority: Priority::Medium,
        }
    }

    /// Recalls from `backend` instead of the run's.
    pub fn backend(mut self, backend: Arc<dyn MemoryBackend>) -> Semantic {
        self.backend = Some(backend);
        self
    }

    /// Heads its sections with `label` (default `## Related memories`).
    pub fn label(mut self, label: impl Into<String>) -> Semantic {
        self.label = label.into();
        self
    }

    /// With `priority` (default medium).
    pub fn priority(mut self, priority: Priority) -> Semantic {
        self.priority = priority;
        self
    }
}

impl Default for Semantic {
    fn default() -> Self {
        Semantic::new()
    }
}

fn backend_of(
    own: &Option<Arc<dyn MemoryBackend>>,
    input: &ContextInput<'_>,
) -> Result<Arc<dyn MemoryBackend>, SourceError> {
    own.clone()
        .or_else(|| input.memory.cloned())
        .ok_or(SourceError::NoMemory)
}

impl ContextSource for Semantic {
    fn name(&self) -> &str {
        "semantic"
    }

    fn hydrate(&self, input: &ContextInput<'_>) -> SourceFuture {
        let strategy = &input.request.strategy;
        let (limit, threshold) = (strategy.semantic_limit, strategy.semantic_threshold);
        if limit == 0 {
            return ready(Ok(Hydrated::nothing()));
        }
        let backend = match backend_of(&self.backend, input) {
            Ok(backend) => backend,
            Err(e) => return ready(Err(e)),
        };
        let query = match &input.request.goal {
            Some(goal) => format!("{}\n{goal}", input.request.observation),
            None => input.request.observation.clone(),
        };
        let (label, priority) = (self.label.clone(), self.priority);
        Box::pin(async move {
            if query.trim().is_empty() {
                return Ok(Hydrated::nothing());
            }
            let candidates = backend.search_candidates(&query, limit).await?;
            let mut sections = Vec::new();
            let mut entries = Vec::new();
            for candidate in candidates {
                let similarity = match candidate.similarity {
                    Some(s) if s.is_finite() && s >= threshold => s,
                    Some(_) => continue,
                    None if threshold <= 0.0 => candidate.hit.score.clamp(0.0, 1.0),
                    None => continue,
                };
                let entry = candidate.hit.entry;
                let id = format!("semantic:{}", entry.id);
                sections.push(
                    Section::text(&id, &label, entry.content)
                        .with_source(SectionSource::Semantic { score: similarity })
                        .with_priority(priority)
                        .with_relevance(similarity.clamp(0.0, 1.0))
                        .with_recency(entry.created_at),
                );
                entries.push((id, entry.id));
            }
            Ok(Hydrated::new(sections).with_recalled(Recalled { backend, entries }))
        })
    }
}

/// Long-term knowledge: the memory entries tagged `kind` (newest first, at most
/// [`limit`](Knowledge::limit)), one section each (`knowledge:<memory id>`), medium priority.
/// Skipped when the strategy's
/// [`include_knowledge`](agent_op::context::ContextStrategy::include_knowledge) is off.
pub struct Knowledge {
    kind: Tag,
    backend: Option<Arc<dyn MemoryBackend>>,
    label: String,
    limit: usize,
    priority: Priority,
}

impl Knowledge {
    /// The entries tagged `kind`, from the run's memory backend.
    pub fn tagged(kind: impl Into<Tag>) -> Knowledge {
        Knowledge {
            kind: kind.into(),
            backend: None,
            label: "## What you know".to_owned(),
            limit: 20,
            priority: Priority::Medium,
        }
    }

    /// Reads `backend` instead of the run's.
    pub fn backend(mut self, backend: Arc<dyn MemoryBackend>) -> Knowledge {
        self.backend = Some(backend);
        self
    }

    /// At most `n` entries (default 20).
    pub fn limit(mut self, n: usize) -> Knowledge {
        self.limit = n;
        self
    }

    /// Heads its sections with `label` (default `## What you know`).
    pub fn label(mut self, label: impl Into<String>) -> Knowledge {
        self.label = label.into();
        self
    }

    /// With `priority` (default medium).
    pub fn priority(mut self, priority: Priority) -> Knowledge {
        self.priority = priority;
        self
    }
}

impl ContextSource for Knowledge {
    fn name(&self) -> &str {
        "knowledge"
    }

    fn hydrate(&self, input: &ContextInput<'_>) -> SourceFuture {
        if !input.request.strategy.include_knowledge || self.limit == 0 {
            return ready(Ok(Hydrated::nothing()));
        }
        let backend = match backend_of(&self.backend, input) {
            Ok(backend) => backend,
            Err(e) => return ready(Err(e)),
        };
        let (kind, label, limit, priority) = (
            self.kind.clone(),
            self.label.clone(),
            self.limit,
            self.priority,
        );
        Box::pin(async move {
            let found = backend.by_tags(std::slice::from_ref(&kind)).await?;
            let mut sections = Vec::new();
            let mut entries = Vec::new();
            for entry in found.into_iter().take(limit) {
                let id = format!("knowledge:{}", entry.id);
                sections.push(
                    Section::text(&id, &label, entry.content)
                        .with_source(SectionSource::Knowledge)
                        .with_priority(priority)
                        .with_recency(entry.created_at),
                );
                entries.push((id, entry.id));
            }
            Ok(Hydrated::new(sections).with_recalled(Recalled { backend, entries }))
        })
    }
}

type ReadFn<S> = dyn Fn(&S) -> Option<String> + Send + Sync;

/// A value read from the program's state (the project, the user, the clock…): one text
/// section with the source's key as its id, high priority, contextual. `None` skips it.
pub struct FromState<S> {
    key: String,
    label: String,
    read: Box<ReadFn<S>>,
    priority: Priority,
    composition: CompositionMode,
}

impl<S: 'static> FromState<S> {
    /// The section `key`, headed `label`, holding what `read` finds in the state.
    ///
    /// ```
    /// use agent_prompt::FromState;
    ///
    /// struct Session { user: Option<String> }
    /// let user = FromState::new("user", "## Current user", |s: &Session| {
    ///     s.user.as_ref().map(|name| format!("You are talking to {name}."))
    /// });
    /// # let _ = user;
    /// ```
    pub fn new<F>(key: impl Into<String>, label: impl Into<String>, read: F) -> Self
    where
        F: Fn(&S) -> Option<String> + Send + Sync + 'static,
    {
        FromState {
            key: key.into(),
            label: label.into(),
            read: Box::new(read),
            priority: Priority::High,
            composition: CompositionMode::Contextual,
        }
    }

    /// With `priority` (default high).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// With `mode` (default contextual).
    pub fn composition(mut self, mode: CompositionMode) -> Self {
        self.composition = mode;
        self
    }
}

impl<S: 'static> ContextSource for FromState<S> {
    fn name(&self) -> &str {
        &self.key
    }

    fn hydrate(&self, input: &ContextInput<'_>) -> SourceFuture {
        let Some(state) = input.state::<S>() else {
            return ready(Err(SourceError::StateType {
                expected: std::any::type_name::<S>(),
            }));
        };
        let sections = (self.read)(state)
            .map(|text| {
                Section::text(&self.key, &self.label, text)
                    .with_source(SectionSource::State {
                        key: self.key.clone(),
                    })
                    .with_priority(self.priority)
                    .with_composition(self.composition)
                    .with_recency(input.now)
            })
            .into_iter()
            .collect();
        ready(Ok(Hydrated::new(sections)))
    }
}

type PredicateFn = dyn Fn(&ContextInput<'_>) -> bool + Send + Sync;

/// Another source, included only when a predicate on the call (the state, the request, the
/// model) holds; its sections' source becomes
/// [`SectionSource::Conditional`] with the condition's name.
pub struct Conditional<T> {
    condition: String,
    predicate: Box<PredicateFn>,
    inner: T,
}

impl<T: ContextSource> Conditional<T> {
    /// `inner`, when `predicate` holds; `condition` names it in the trace.
    ///
    /// ```
    /// use agent_prompt::{Conditional, Static};
    ///
    /// struct Session { admin: bool }
    /// let admin_rules = Conditional::new(
    ///     "admin",
    ///     |call| call.state::<Session>().is_some_and(|s| s.admin),
    ///     Static::text("admin-rules", "## Admin", "You may change other users' settings."),
    /// );
    /// # let _ = admin_rules;
    /// ```
    pub fn new<F>(condition: impl Into<String>, predicate: F, inner: T) -> Self
    where
        F: Fn(&ContextInput<'_>) -> bool + Send + Sync + 'static,
    {
        Conditional {
            condition: condition.into(),
            predicate: Box::new(predicate),
            inner,
        }
    }
}

impl<T: ContextSource> ContextSource for Conditional<T> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn hydrate(&self, input: &ContextInput<'_>) -> SourceFuture {
        if !(self.predicate)(input) {
            return ready(Ok(Hydrated::nothing()));
        }
        let condition = self.condition.clone();
        let inner = self.inner.hydrate(input);
        Box::pin(async move {
            let mut hydrated = inner.await?;
            for section in &mut hydrated.sections {
                section.source = SectionSource::Conditional {
                    condition: condition.clone(),
                };
            }
            Ok(hydrated)
        })
    }
}
