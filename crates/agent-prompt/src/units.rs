//! [`message_units`]: where a conversation may be cut.

use agent_op::Message;

/// Messages grouped so that none is split from what it needs: an assistant message with
/// tool calls together with the tool results that follow it; any other message alone. Tool
/// results at the start, whose call is not here, are left out.
///
/// Whatever cuts a conversation (compilation under a budget, context middleware) cuts it
/// between units, so a tool call never loses its result and no part starts with an orphan
/// result.
///
/// ```
/// use agent_op::{Message, Response};
/// use agent_prompt::message_units;
///
/// let call = Response::tool_call("c1", "search", serde_json::json!({})).to_message();
/// let talk = [Message::tool_result("c0", "orphan"), Message::user("hi"), call, Message::tool_result("c1", "found")];
/// let units = message_units(&talk);
/// assert_eq!(units.len(), 2);
/// assert_eq!(units[1].len(), 2); // the call with its result
/// ```
pub fn message_units(messages: &[Message]) -> Vec<&[Message]> {
    let messages = sendable(messages);
    let mut start = 0;
    let mut units = Vec::new();
    while start < messages.len() {
        let mut end = start + 1;
        if matches!(&messages[start], Message::Assistant { tool_calls, .. } if !tool_calls.is_empty())
        {
            while end < messages.len() && matches!(messages[end], Message::Tool { .. }) {
                end += 1;
            }
        }
        units.push(&messages[start..end]);
        start = end;
    }
    units
}

/// `messages` without the tool results at their start (their call is not here): what of a
/// conversation can be sent at all. Counts and emptiness are of this part.
pub(crate) fn sendable(messages: &[Message]) -> &[Message] {
    let start = messages
        .iter()
        .position(|m| !matches!(m, Message::Tool { .. }))
        .unwrap_or(messages.len());
    &messages[start..]
}
