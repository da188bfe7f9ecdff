//! What both clients read the same way from a reply: why the model stopped.

use agent_op::FinishReason;

/// A reason as the APIs name it (OpenAI's `finish_reason`, Ollama's `done_reason`); `None`
/// and `""` mean "not said".
pub(crate) fn parse_finish_reason(reason: Option<&str>) -> Option<FinishReason> {
    Some(match reason? {
        "" => return None,
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    })
}

/// The reply's finish reason, by one rule for every client, plain or streamed: a reply that
/// calls tools finished with [`FinishReason::ToolCalls`], whatever the server said (servers
/// disagree: some say `stop`), unless it said `length` or `content_filter` — those say the
/// calls may be cut short or missing. A reply without tool calls keeps the reason said,
/// [`FinishReason::Stop`] if none was.
pub(crate) fn finish_reason(said: Option<FinishReason>, has_tool_calls: bool) -> FinishReason {
    match said {
        Some(reason @ (FinishReason::Length | FinishReason::ContentFilter)) => reason,
        _ if has_tool_calls => FinishReason::ToolCalls,
        Some(reason) => reason,
        None => FinishReason::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_as_named() {
        assert_eq!(parse_finish_reason(None), None);
        assert_eq!(parse_finish_reason(Some("")), None);
        assert_eq!(
            parse_finish_reason(Some("length")),
            Some(FinishReason::Length)
        );
        assert_eq!(
            parse_finish_reason(Some("function_call")),
            Some(FinishReason::ToolCalls)
        );
        assert_eq!(
            parse_finish_reason(Some("eos")),
            Some(FinishReason::Other("eos".into()))
        );
    }

    #[test]
    fn tool_calls_win_over_every_reason_but_length_and_content_filter() {
        use FinishReason::*;
        for (said, calls, expected) in [
            (None, false, Stop),
            (None, true, ToolCalls),
            (Some(Stop), true, ToolCalls),
            (Some(Stop), false, Stop),
            (Some(Other("unload".into())), true, ToolCalls),
            (Some(Other("unload".into())), false, Other("unload".into())),
            (Some(Length), true, Length),
            (Some(ContentFilter), true, ContentFilter),
            (Some(ToolCalls), false, ToolCalls),
        ] {
            assert_eq!(
                finish_reason(said.clone(), calls),
                expected,
                "{said:?}, {calls}"
            );
        }
    }
}
