//! Cassettes: model calls recorded to a JSONL file and served back, so programs can be tested
//! deterministically without a network.
//!
//! - [`RecordingProvider`] wraps any provider and appends each call (request and reply, or
//!   error) to a cassette;
//! - [`ReplayProvider`] serves a cassette: each call gets the reply recorded for the same
//!   request ([`fingerprint`]), in recorded order when a request was made several times, and a
//!   call that was never recorded fails clearly with
//!   [`ProviderError::Unexpected`](agent_op::ProviderError::Unexpected).
//!
//! A cassette holds one [`CassetteEntry`] per line:
//!
//! ```text
//! {"fingerprint":"sha256:…","model":"gpt-4o-mini","prompt":{"messages":[…],"options":{}},"response":{"content":"…",…}}
//! {"fingerprint":"sha256:…","model":"gpt-4o-mini","prompt":{…},"error":{"kind":"rate_limited","status":429,"retry_after_ms":1000,"message":"…"}}
//! ```
//!
//! Requests are recorded as the provider-neutral [`Prompt`](agent_op::Prompt) a program sent,
//! never as HTTP: no URL, no headers, so no API key can end up in a cassette.
//!
//! ```no_run
//! use agent_op::{Prompt, Provider};
//! use agent_provider::OpenAiClient;
//! use agent_provider::cassette::{RecordingProvider, ReplayProvider};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! // Once, against the real API:
//! let recording = RecordingProvider::create(OpenAiClient::builder().build()?, "tests/cassettes/plan.jsonl")?;
//! recording.chat("gpt-4o-mini", &Prompt::new().user("Plan a trip")).await?;
//!
//! // Then in every test run, offline:
//! let replay = ReplayProvider::open("tests/cassettes/plan.jsonl")?;
//! let reply = replay.chat("gpt-4o-mini", &Prompt::new().user("Plan a trip")).await?;
//! assert!(replay.unused() == 0);
//! # let _ = reply;
//! # Ok(())
//! # }
//! ```

mod entry;
mod fingerprint;
mod record;
mod replay;

pub use entry::{CassetteEntry, CassetteError, read_entries};
pub use fingerprint::fingerprint;
pub use record::RecordingProvider;
pub use replay::ReplayProvider;
