//! Hydration: [`ContextSource`]s turn a request (and the program's state, the run's memory)
//! into [`Section`]s.
//!
//! A source is called with the program's state borrowed and must read what it needs from it
//! right away; the future it returns owns everything it uses, so the [`Pipeline`](crate::Pipeline)
//! can run every source's future concurrently.

mod sources;

use std::fmt;
use std::sync::Arc;

use agent_op::context::ContextInput;
use agent_op::{BoxFuture, MemoryBackend, MemoryError, MemoryId};

use crate::section::Section;

pub use sources::{Conditional, Conversation, FromState, Knowledge, Semantic, Static};

/// What a source's hydration resolves to.
pub type SourceFuture = BoxFuture<'static, Result<Hydrated, SourceError>>;

/// A place context comes from: fixed text, the conversation, memory, the program's state…
///
/// ```
/// use agent_op::context::ContextInput;
/// use agent_prompt::{ContextSource, Hydrated, Section, SourceFuture};
///
/// /// The current UTC date, as a section.
/// struct Today;
///
/// impl ContextSource for Today {
///     fn name(&self) -> &str {
///         "today"
///     }
///
///     fn hydrate(&self, input: &ContextInput<'_>) -> SourceFuture {
///         let text = input.now.format("%A %-d %B %Y").to_string();
///         let section = Section::text("today", "## Today", text);
///         Box::pin(async move { Ok(Hydrated::new(vec![section])) })
///     }
/// }
/// ```
pub trait ContextSource: Send + Sync {
    /// Its name, in errors and in the trace.
    fn name(&self) -> &str;

    /// Starts gathering sections for one model call. Reads the state (and anything else
    /// borrowed from `input`) now; the returned future owns what it needs.
    fn hydrate(&self, input: &ContextInput<'_>) -> SourceFuture;
}

impl<T: ContextSource + ?Sized> ContextSource for Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn hydrate(&self, input: &ContextInput<'_>) -> SourceFuture {
        (**self).hydrate(input)
    }
}

/// What a source produced: its sections, and the memory entries behind them (so only the
/// entries the model is actually sent count as recalled).
#[derive(Default)]
#[non_exhaustive]
pub struct Hydrated {
    /// The sections, in the order they should appear.
    pub sections: Vec<Section>,
    /// The memory entries the sections show, and where they came from.
    pub recalled: Option<Recalled>,
}

impl Hydrated {
    /// These sections.
    pub fn new(sections: Vec<Section>) -> Hydrated {
        Hydrated {
            sections,
            recalled: None,
        }
    }

    /// Nothing this time (a condition did not hold, nothing matched): the trace says the
    /// source was skipped.
    pub fn nothing() -> Hydrated {
        Hydrated::default()
    }

    /// With the memory entries behind the sections.
    pub fn with_recalled(mut self, recalled: Recalled) -> Hydrated {
        self.recalled = Some(recalled);
        self
    }
}

impl fmt::Debug for Hydrated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hydrated")
            .field("sections", &self.sections)
            .field("recalled", &self.recalled)
            .finish()
    }
}

/// Memory entries shown by a source's sections: after compilation the pipeline records an
/// access ([`MemoryBackend::record_access`]) of the entries whose sections were sent.
#[derive(Clone)]
pub struct Recalled {
    /// The backend they came from.
    pub backend: Arc<dyn MemoryBackend>,
    /// For each section id, the entry it shows.
    pub entries: Vec<(String, MemoryId)>,
}

impl fmt::Debug for Recalled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recalled")
            .field("entries", &self.entries)
            .finish_non_exhaustive()
    }
}

/// Why a source could not hydrate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// A file could not be read.
    #[error("could not read `{path}`: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The memory backend failed.
    #[error("memory: {0}")]
    Memory(#[from] MemoryError),
    /// The source reads memory, but the run has no memory backend and the source was given
    /// none.
    #[error("the run has no memory backend (set one on the config, or give the source one)")]
    NoMemory,
    /// The source reads a state of another type than the program's.
    #[error("the source reads a `{expected}` but the program's state is another type")]
    StateType {
        /// The type the source reads.
        expected: &'static str,
    },
    /// Anything else (for sources outside this crate).
    #[error("{message}")]
    Other {
        /// What went wrong.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl SourceError {
    /// An error saying `message`.
    pub fn other(message: impl Into<String>) -> SourceError {
        SourceError::Other {
            message: message.into(),
            source: None,
        }
    }
}
