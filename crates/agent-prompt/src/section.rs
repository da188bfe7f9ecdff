//! [`Section`]: one labeled, budgeted piece of a context window, and what describes it.

use agent_op::context::{Priority, SectionSource};
use agent_op::{Message, Timestamp};
use serde::{Deserialize, Serialize};

/// How a section combines with others when two IRs are [`compose`](crate::compose)d — the
/// note's Bayesian reading in brackets.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompositionMode {
    /// Base instructions, which frame everything else [a hyperprior]: the first IR's come first.
    Hierarchical,
    /// A rule the answer must satisfy [a product of experts]: constraints of both IRs hold.
    Constraint,
    /// Extra information that may be dropped [a mixture]: collected from both IRs.
    Additive,
    /// An observation that updates what came before [a Bayesian update]: sequenced, the
    /// first IR's before the second's.
    Contextual,
}

/// What a section holds: text, or a run of conversation messages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SectionContent {
    /// Text, placed in the system message under the section's label.
    Text(String),
    /// Messages, placed in the conversation as they are. When shrunk, the oldest go first,
    /// and an assistant message with tool calls goes with the tool results that answer it.
    Messages(Vec<Message>),
}

impl SectionContent {
    /// Whether there is nothing in it.
    pub fn is_empty(&self) -> bool {
        match self {
            SectionContent::Text(text) => text.is_empty(),
            SectionContent::Messages(messages) => messages.is_empty(),
        }
    }
}

/// One labeled piece of a context window, with what the compiler needs to budget it.
///
/// Build one with [`Section::text`] or [`Section::messages`] and the `with_*` methods; the
/// token count is filled in by [`Section::count_with`] (or by
/// [`PromptIr::count`](crate::PromptIr::count) for all sections at once).
///
/// ```
/// use agent_prompt::{CompositionMode, Priority, Section, SectionSource};
///
/// let rules = Section::text("rules", "## Rules", "Answer in one sentence.")
///     .with_priority(Priority::Critical)
///     .with_composition(CompositionMode::Constraint);
/// assert_eq!(rules.source, SectionSource::Static { origin: "code".into() });
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Section {
    /// Unique within an IR; names the section in the trace.
    pub id: String,
    /// The heading shown to the model above a text section (may be empty).
    pub label: String,
    /// Where it came from.
    pub source: SectionSource,
    /// What it holds.
    pub content: SectionContent,
    /// Its size in tokens, label included, as last counted (`0` until counted).
    #[serde(default)]
    pub tokens: u32,
    /// The fewest tokens it is still useful at: it may be shrunk to this before being
    /// dropped. `None`: kept whole or dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<u32>,
    /// How much it matters.
    pub priority: Priority,
    /// How relevant it is to the task, 0–1 (`None`: fully).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relevance: Option<f32>,
    /// When its information was current (`None`: timeless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recency: Option<Timestamp>,
    /// How it composes with other sections.
    pub composition: CompositionMode,
    /// A precomputed embedding of its content, for [`estimate_impact`](crate::estimate_impact)
    /// and [`equivalent`](crate::equivalent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Vec<f32>>,
    /// A hash of its label and content (hex SHA-256, first 16 bytes): for deduplication and
    /// the token-count cache. Filled in with the count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

impl Section {
    /// A text section from code: medium priority, additive, not yet counted.
    pub fn text(id: impl Into<String>, label: impl Into<String>, text: impl Into<String>) -> Self {
        Section::new(id, label, SectionContent::Text(text.into()))
    }

    /// A section of conversation messages: high priority, contextual, from the recent
    /// conversation.
    pub fn messages(id: impl Into<String>, messages: Vec<Message>) -> Self {
        Section {
            priority: Priority::High,
            composition: CompositionMode::Contextual,
            source: SectionSource::Temporal,
            ..Section::new(id, "", SectionContent::Messages(messages))
        }
    }

    fn new(id: impl Into<String>, label: impl Into<String>, content: SectionContent) -> Self {
        Section {
            id: id.into(),
            label: label.into(),
            source: SectionSource::Static {
                origin: std::borrow::Cow::Borrowed("code"),
            },
            content,
            tokens: 0,
            min_tokens: None,
            priority: Priority::Medium,
            relevance: None,
            recency: None,
            composition: CompositionMode::Additive,
            embedding: None,
            hash: None,
        }
    }

    /// With `source` as its provenance.
    pub fn with_source(mut self, source: SectionSource) -> Self {
        self.source = source;
        self
    }

    /// With `priority`.
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// With `mode` as its composition mode.
    pub fn with_composition(mut self, mode: CompositionMode) -> Self {
        self.composition = mode;
        self
    }

    /// Shrinkable down to `min` tokens before being dropped.
    pub fn with_min_tokens(mut self, min: u32) -> Self {
        self.min_tokens = Some(min);
        self
    }

    /// With a relevance of `relevance` (0–1).
    pub fn with_relevance(mut self, relevance: f32) -> Self {
        self.relevance = Some(relevance);
        self
    }

    /// Current as of `at`.
    pub fn with_recency(mut self, at: Timestamp) -> Self {
        self.recency = Some(at);
        self
    }

    /// With a precomputed embedding.
    pub fn with_embedding(mut self, embedding: Vec<f32>) -> Self {
        self.embedding = Some(embedding);
        self
    }

    /// Counts its tokens (label included) with `counter`, and fills in its hash.
    pub fn count_with(&mut self, counter: &crate::TokenCounter) {
        let hash = crate::render::content_hash(self);
        self.tokens = counter.count_section(self, &hash);
        self.hash = Some(hash);
    }
}
