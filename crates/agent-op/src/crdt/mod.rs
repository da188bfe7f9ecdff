//! Merge-able state: ready-made joins for the state of programs that fork with `par`.
//!
//! `par` runs every branch from the same state and merges their end states with
//! [`Merge`](crate::Merge).
//! The types here are true joins (commutative, associative, idempotent), so the merged state
//! is the same whichever branch finishes first, under every interpreter:
//!
//! | Type | Holds | Merge |
//! |---|---|---|
//! | [`GCounter`] | a count that only goes up | each writer's largest count |
//! | [`PNCounter`] | a count that goes up and down | two `GCounter`s |
//! | [`MaxRegister`], [`MinRegister`] | the largest / smallest value seen | max / min |
//! | [`LwwRegister`] | the last value written | the later write; ties by writer id |
//! | [`GSet`] | a set that only grows | union |
//! | [`ORSet`] | a set with adds and removes | an add wins over a concurrent remove |
//! | [`AppendLog`] | an append-only list | union, in one deterministic order |
//! | [`MergeMap`] | a map of merge-able values | merge per key |
//!
//! `Option<T>` merges too (`None` is the bottom), and `#[derive(Merge)]` makes a struct of
//! merge-able fields merge-able, field by field.
//!
//! # Writers
//!
//! Operations that must tell replicas apart take `writer: &TraceId`: the id of the run or
//! branch making the change (`brave-otter-3f2a`, `brave-otter-3f2a.1`, ...). Programs get it
//! with [`op::trace_id`](crate::op::trace_id) or [`op::modify_as`](crate::op::modify_as).
//! Concurrent branches have distinct ids and every interpreter names a branch the same way,
//! which is what makes these merges deterministic: nothing here reads the wall clock. Use
//! each writer id only for changes made by that run or branch.
//!
//! # A state struct, merged field by field
//!
//! ```
//! use agent_op::{Merge, TraceId};
//! use agent_op::crdt::{AppendLog, GCounter, GSet, LwwRegister, MaxRegister};
//! use agent_op::op::{self, Op};
//!
//! #[derive(Clone, Debug, Default, PartialEq, Merge)]
//! struct Research {
//!     sources: GSet<String>,
//!     pages_read: GCounter,
//!     best_score: MaxRegister<u32>,
//!     summary: LwwRegister<String>,
//!     notes: AppendLog<String>,
//! }
//!
//! // In a program, each branch writes as itself:
//! let read_one: Op<Research, ()> = op::modify_as(|s: &mut Research, me| {
//!     s.pages_read.increment(me, 1);
//!     s.notes.append(format!("{me} read a page"), me);
//! });
//! let _both: Op<Research, Vec<()>> = op::par(vec![read_one, op::pure(())]);
//!
//! // By hand: two branches of the run `brave-otter-3f2a` diverge from the same state...
//! let run = TraceId::from("brave-otter-3f2a");
//! let mut base = Research::default();
//! base.summary.set("nothing yet".to_string(), &run);
//!
//! let left = run.child(0);
//! let mut a = base.clone();
//! a.sources.insert("arxiv.org".to_string());
//! a.pages_read.increment(&left, 3);
//! a.best_score.set(7);
//! a.notes.append("found a survey".to_string(), &left);
//!
//! let right = run.child(1);
//! let mut b = base.clone();
//! b.sources.insert("docs.rs".to_string());
//! b.pages_read.increment(&right, 2);
//! b.best_score.set(9);
//! b.summary.set("two sources agree".to_string(), &right);
//! b.notes.append("checked the API".to_string(), &right);
//!
//! // ...and merge, each field with its own join.
//! let mut merged = a.clone();
//! merged.merge(b.clone());
//! assert_eq!(merged.sources.len(), 2);
//! assert_eq!(merged.pages_read.value(), 5);
//! assert_eq!(*merged.best_score.get(), 9);
//! assert_eq!(merged.summary.get(), "two sources agree");
//! assert_eq!(
//!     merged.notes.iter().collect::<Vec<_>>(),
//!     ["found a survey", "checked the API"],
//! );
//!
//! // The other merge order gives the same state.
//! b.merge(a);
//! assert_eq!(merged, b);
//! ```
//!
//! Only structs can derive `Merge`: two different variants of an enum have no field-by-field
//! join.
//!
//! ```compile_fail
//! use agent_op::Merge;
//!
//! #[derive(Merge)] // error: Merge can only be derived for structs
//! enum Phase {
//!     Plan,
//!     Act,
//! }
//! ```

mod append_log;
mod counter;
mod dot;
mod gset;
mod lww;
mod map;
mod orset;
mod register;

pub use append_log::AppendLog;
pub use counter::{GCounter, PNCounter};
pub use gset::GSet;
pub use lww::LwwRegister;
pub use map::MergeMap;
pub use orset::ORSet;
pub use register::{MaxRegister, MinRegister};
