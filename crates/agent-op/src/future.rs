//! The boxed future type the effect-handler traits return.
//!
//! The traits in this crate must be object safe (interpreters hold `Arc<dyn Provider>`), so their
//! async methods return a boxed, `Send` future instead of using `async fn` in traits.

use std::future::Future;
use std::pin::Pin;

/// A pinned, boxed, `Send` future borrowing for `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
