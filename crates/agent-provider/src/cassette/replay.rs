//! [`ReplayProvider`]: serves the calls recorded in a cassette.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use agent_op::{
    BoxFuture, MicroUsd, PREVIEW_CHARS, Prompt, Provider, ProviderError, Response, preview,
};

use super::entry::{CassetteEntry, CassetteError, read_entries};
use super::fingerprint::fingerprint;

/// Answers each call with the outcome recorded for the same request (same [`fingerprint`]:
/// model and prompt), so a program runs exactly as it did when recorded, without a network.
///
/// A request recorded several times gets its outcomes in recorded order. A request that was
/// never recorded, or asked more often than recorded, fails with
/// [`ProviderError::Unexpected`] saying which request it was and where to look; it is never
/// answered with a near match.
///
/// Streamed calls receive the recorded reply as deltas (text first, then each tool call).
///
/// [`max_cost`](Provider::max_cost) answers what the recorded provider answered: the largest
/// recorded bound among the outcomes of that request not yet served, and `None` if one of them
/// has none (unknown, or recorded before cassettes kept it) or none is left.
///
/// ```
/// use agent_op::{Prompt, Provider, ProviderError, Response};
/// use agent_provider::cassette::{CassetteEntry, ReplayProvider};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let replay = ReplayProvider::from_entries([
///     CassetteEntry::new("m", Prompt::new().user("hi"), Ok(Response::text("hello"))),
/// ]);
/// assert_eq!(replay.chat("m", &Prompt::new().user("hi")).await.unwrap().content, "hello");
/// let unmatched = replay.chat("m", &Prompt::new().user("bye")).await.unwrap_err();
/// assert!(matches!(unmatched, ProviderError::Unexpected { .. }));
/// # });
/// ```
pub struct ReplayProvider {
    source: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    by_request: HashMap<String, Recorded>,
}

#[derive(Default)]
struct Recorded {
    /// Each outcome with the `max_cost` recorded for it.
    outcomes: VecDeque<(Result<Response, ProviderError>, Option<MicroUsd>)>,
    served: usize,
}

impl ReplayProvider {
    /// Serves the cassette at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<ReplayProvider, CassetteError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|source| CassetteError::Io {
            path: path.to_owned(),
            source,
        })?;
        let entries = read_entries(BufReader::new(file), path)?;
        let mut replay = ReplayProvider::from_entries(entries);
        replay.source = path.display().to_string();
        Ok(replay)
    }

    /// Serves `entries`. Requests are matched by the fingerprint of each entry's model and
    /// prompt (recomputed, so hand-edited entries match what they say).
    pub fn from_entries(entries: impl IntoIterator<Item = CassetteEntry>) -> ReplayProvider {
        let mut state = State::default();
        for entry in entries {
            let key = fingerprint(&entry.model, &entry.prompt);
            state
                .by_request
                .entry(key)
                .or_default()
                .outcomes
                .push_back((entry.outcome, entry.max_cost));
        }
        ReplayProvider {
            source: "<memory>".to_owned(),
            state: Mutex::new(state),
        }
    }

    /// How many recorded outcomes were not served (0 once a test made every recorded call).
    pub fn unused(&self) -> usize {
        self.lock()
            .by_request
            .values()
            .map(|r| r.outcomes.len())
            .sum()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is plain collections; a panic elsewhere cannot leave it inconsistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn answer(&self, model: &str, prompt: &Prompt) -> Result<Response, ProviderError> {
        let key = fingerprint(model, prompt);
        let mut state = self.lock();
        let last = prompt
            .messages
            .last()
            .map(|m| preview(m.content(), PREVIEW_CHARS))
            .unwrap_or_default();
        let Some(recorded) = state.by_request.get_mut(&key) else {
            return Err(ProviderError::Unexpected {
                message: format!(
                    "cassette `{}` has no recorded call for this request to `{model}` ({key}; last message: {last:?}); re-record the cassette if the program's requests changed",
                    self.source
                ),
            });
        };
        match recorded.outcomes.pop_front() {
            Some((outcome, _)) => {
                recorded.served += 1;
                outcome
            }
            None => Err(ProviderError::Unexpected {
                message: format!(
                    "cassette `{}` recorded this request to `{model}` {} time(s) and all were replayed ({key}; last message: {last:?})",
                    self.source, recorded.served
                ),
            }),
        }
    }
}

impl Provider for ReplayProvider {
    fn chat<'a>(
        &'a self,
        model: &'a str,
        prompt: &'a Prompt,
    ) -> BoxFuture<'a, Result<Response, ProviderError>> {
        Box::pin(async move { self.answer(model, prompt) })
    }

    /// The largest bound recorded for the outcomes of this request still to be served (so it
    /// holds whichever of them the next call gets); `None` if any of them has none.
    fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        let state = self.lock();
        let recorded = state.by_request.get(&fingerprint(model, prompt))?;
        let mut bounds = recorded.outcomes.iter().map(|(_, cost)| *cost);
        let first = bounds.next()??;
        bounds.try_fold(first, |max, cost| Some(max.max(cost?)))
    }

    fn name(&self) -> &str {
        "cassette"
    }
}

impl fmt::Debug for ReplayProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("ReplayProvider")
            .field("source", &self.source)
            .field("requests", &state.by_request.len())
            .field(
                "unused",
                &state
                    .by_request
                    .values()
                    .map(|r| r.outcomes.len())
                    .sum::<usize>(),
            )
            .finish()
    }
}
