//! Context middleware: invariants over random conversations, and compaction as a traced
//! model call inside the agent loop.

use std::sync::Arc;

use agent_agents::{
    Compact, ElideToolResults, Toolbox, Truncate, agent, elide_tool_results, truncate,
};
use agent_interp_seq::Config;
use agent_op::{Message, Response, ToolCall};
use agent_prompt::TokenCounter;
use agent_provider::ScriptedProvider;
use proptest::prelude::*;
use serde_json::json;

/// A conversation: a system prompt, then turns of user messages, plain replies, and replies
/// calling 1–3 tools followed by their results.
fn conversation() -> impl Strategy<Value = Vec<Message>> {
    let turn = prop_oneof![
        "[a-z ]{0,80}".prop_map(|t| vec![Message::user(t)]),
        "[a-z ]{0,80}".prop_map(|t| vec![Message::assistant(t)]),
        (1usize..4, "[a-z ]{0,120}", any::<u16>()).prop_map(|(n, text, id)| {
            let calls: Vec<ToolCall> = (0..n)
                .map(|i| ToolCall {
                    id: format!("c{id}-{i}"),
                    name: "search".into(),
                    arguments: json!({"q": i}),
                })
                .collect();
            let mut reply = Response::text("");
            reply.tool_calls = calls.clone();
            let mut unit = vec![reply.to_message()];
            unit.extend(
                calls
                    .iter()
                    .map(|c| Message::tool_result(c.id.clone(), text.clone())),
            );
            unit
        }),
    ];
    (prop::collection::vec(turn, 0..12), "[a-z ]{1,40}").prop_map(|(turns, system)| {
        let mut messages = vec![Message::system(system)];
        messages.extend(turns.into_iter().flatten());
        messages
    })
}

/// Every tool call in `messages` is followed by its results, and every result follows its
/// call.
fn calls_keep_their_results(messages: &[Message]) -> bool {
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        match m {
            Message::Assistant { tool_calls, .. } => {
                if !open.is_empty() {
                    return false;
                }
                open = tool_calls.iter().map(|c| c.id.clone()).collect();
            }
            Message::Tool { tool_call_id, .. } => {
                match open.iter().position(|id| id == tool_call_id) {
                    Some(i) => {
                        open.remove(i);
                    }
                    None => return false,
                }
            }
            _ => {
                if !open.is_empty() {
                    return false;
                }
            }
        }
    }
    open.is_empty()
}

fn newest_user(messages: &[Message]) -> Option<&Message> {
    messages
        .iter()
        .rev()
        .find(|m| matches!(m, Message::User { .. }))
}

/// `small` is `big` with messages left out (order kept).
fn is_subsequence(small: &[Message], big: &[Message]) -> bool {
    let mut rest = big.iter();
    small.iter().all(|m| rest.any(|b| b == m))
}

proptest! {
    #[test]
    fn truncation_keeps_what_it_must_and_fits(messages in conversation(), limit in 0u32..400) {
        let counter = TokenCounter::for_model("gpt-4o");
        let out = truncate(&messages, limit, &counter);
        prop_assert_eq!(&out[0], &messages[0], "the system prompt stays");
        prop_assert_eq!(newest_user(&out), newest_user(&messages));
        prop_assert!(calls_keep_their_results(&out));
        prop_assert!(is_subsequence(&out, &messages));
        let mandatory = {
            let mut m = vec![messages[0].clone()];
            m.extend(newest_user(&messages).cloned());
            counter.count_messages(&m)
        };
        let used = counter.count_messages(&out);
        prop_assert!(used <= limit.max(mandatory), "{} > {}", used, limit);
        // Nothing is dropped when everything fits.
        if counter.count_messages(&messages) <= limit {
            prop_assert_eq!(&out, &messages);
        }
    }

    #[test]
    fn elision_keeps_every_result_and_the_newest_whole(messages in conversation(), keep in 0usize..4) {
        let out = elide_tool_results(&messages, keep);
        prop_assert_eq!(out.len(), messages.len());
        prop_assert!(calls_keep_their_results(&out));
        let results: Vec<_> = messages.iter().zip(&out).filter(|(m, _)| matches!(m, Message::Tool { .. })).collect();
        let n = results.len();
        for (i, (before, after)) in results.into_iter().enumerate() {
            if i + keep >= n {
                prop_assert_eq!(before, after);
            } else {
                prop_assert!(after.content().starts_with("[tool result elided: "));
            }
        }
    }
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Done {
    done: bool,
}

#[tokio::test]
async fn the_loop_sends_the_transformed_conversation_and_compaction_is_a_traced_call() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Q {
        q: String,
    }
    let search = agent_agents::tool("search", "Searches", |q: Q| async move {
        Ok(format!("{} results: {}", q.q, "lorem ipsum ".repeat(40)))
    });
    let toolbox = Toolbox::new("s").with(search);
    let call = |id: &str| {
        let mut r = Response::text("");
        r.tool_calls = vec![ToolCall {
            id: id.into(),
            name: "search".into(),
            arguments: json!({"q": id}),
        }];
        r
    };
    // Summaries whenever asked; the agent's turns search a, b, c, then answer.
    let turns = std::sync::atomic::AtomicUsize::new(0);
    let provider = Arc::new(ScriptedProvider::from_fn(move |model, _| {
        if model == "gpt-4o-mini" {
            return Ok(Response::text("Searched earlier; nothing useful."));
        }
        Ok(
            match turns.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 => call("a"),
                1 => call("b"),
                2 => call("c"),
                _ => Response::text("{\"done\": true}"),
            },
        )
    }));
    let config = Config::new()
        .shared_provider(provider.clone())
        .tools(toolbox.tool_set());
    let program = agent::<(), Done>("gpt-4o", &toolbox, "Find it")
        .middleware(ElideToolResults::keep(1))
        .middleware(Compact::new("gpt-4o-mini", 150, 1))
        .middleware(Truncate::new(4_000, "gpt-4o"))
        .run();
    let outcome = agent_interp_seq::run(&config, (), program).await.unwrap();
    assert_eq!(outcome.value.unwrap(), Done { done: true });
    let calls = provider.calls();
    let summaries = calls.iter().filter(|c| c.model == "gpt-4o-mini").count();
    assert!(summaries >= 1, "compaction ran");
    assert_eq!(
        outcome.trace.infer_calls(),
        4 + summaries,
        "every summary is a traced call"
    );
    let turns: Vec<_> = calls.iter().filter(|c| c.model == "gpt-4o").collect();
    // Turn 3 saw turn 1's result elided (or summarized) and turn 2's whole.
    let third = &turns[2].prompt.messages;
    assert!(
        !third.iter().any(|m| m.content().starts_with("a results")),
        "{third:?}"
    );
    assert!(third.last().unwrap().content().starts_with("b results"));
    // The last turn: the system prompt, the summary, the goal, and the newest unit whole.
    let last = &turns[3].prompt.messages.to_vec();
    assert!(
        last[1]
            .content()
            .starts_with("Summary of the earlier conversation"),
        "{last:?}"
    );
    assert!(last.contains(&Message::user("Find it")));
    assert!(last.last().unwrap().content().starts_with("c results"));
    assert!(calls_keep_their_results(last));
}
