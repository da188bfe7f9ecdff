//! The `run_end` event: how a run ended and what it spent, recorded last in its trace.

use std::any::Any;

use agent_op::trace::event::{RunEnd, RunFailure, RunOutcome};
use agent_op::{Event, EventKind, PREVIEW_CHARS, Trace, preview};
use serde_json::Value;

use super::machine::{micros, value_preview};
use crate::error::ErrorKind;

/// The `run_end` event of a run that produced `trace` and ended with `result`, stamped with
/// the run's end (its wall time is the one every reader reports).
pub(crate) fn run_end<A: 'static>(trace: &Trace, result: Result<&A, &ErrorKind>) -> Event {
    let end = trace.end.unwrap_or_else(agent_op::trace::now);
    let spend = trace.spend();
    let (outcome, value_preview, error) = match result {
        Ok(value) => (RunOutcome::Succeeded, any_preview(value as &dyn Any), None),
        Err(kind) => (
            match kind {
                ErrorKind::Aborted => RunOutcome::Aborted,
                _ => RunOutcome::Failed,
            },
            None,
            Some(RunFailure {
                kind: kind.kind_name().to_owned(),
                message: kind.to_string(),
            }),
        ),
    };
    let duration_us = (end - trace.start).to_std().map_or(0, micros);
    Event::at(
        end,
        EventKind::RunEnd(RunEnd {
            outcome,
            value_preview,
            error,
            spent: (&spend.kept).into(),
            discarded: (&spend.discarded).into(),
            duration_us,
        }),
    )
}

/// A preview of values the engine can show without knowing their type (see [`any_text`]).
fn any_preview(value: &dyn Any) -> Option<String> {
    if let Some(json) = value.downcast_ref::<Value>() {
        return Some(value_preview(json));
    }
    any_text(value).map(|text| preview(&text, PREVIEW_CHARS))
}

/// The whole text of values the engine can show without knowing their type: text, JSON (a
/// string as its text, anything else compact), numbers, booleans and `()`.
pub(crate) fn any_text(value: &dyn Any) -> Option<String> {
    macro_rules! shown {
        ($($ty:ty),*) => {$(
            if let Some(v) = value.downcast_ref::<$ty>() {
                return Some(v.to_string());
            }
        )*};
    }
    if let Some(text) = value.downcast_ref::<String>() {
        return Some(text.clone());
    }
    if let Some(text) = value.downcast_ref::<&'static str>() {
        return Some((*text).to_owned());
    }
    if let Some(json) = value.downcast_ref::<Value>() {
        return Some(match json {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    if value.downcast_ref::<()>().is_some() {
        return Some("()".to_owned());
    }
    shown!(bool, i32, i64, u32, u64, usize, f32, f64);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_known_types_are_previewed_and_others_are_not() {
        assert_eq!(any_preview(&"hi".to_owned()).as_deref(), Some("hi"));
        assert_eq!(
            any_preview(&serde_json::json!({"a": 1})).as_deref(),
            Some(r#"{"a":1}"#)
        );
        assert_eq!(any_preview(&42u32).as_deref(), Some("42"));
        assert_eq!(any_preview(&()).as_deref(), Some("()"));
        assert_eq!(any_preview(&vec![1u8]), None);
        let long = "x".repeat(500);
        assert_eq!(
            any_preview(&long).map(|p| p.chars().count()),
            Some(PREVIEW_CHARS + 1)
        );
    }
}
