//! Typed output, typed tools and toolboxes, run by both interpreters against scripted models.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_agents::{
    AttemptError, Lines, LlmOutput, ParseError, Structured, Toolbox, infer_as, tool, with_toolbox,
};
use agent_interp_seq::{Config, ErrorKind};
use agent_op::op::{self, Op};
use agent_op::{
    Budget, ContextRequest, EventType, Message, Prompt, Response, ResponseFormat, Tool, ToolError,
    ToolErrorKind,
};
use agent_provider::ScriptedProvider;
use serde_json::json;

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct City {
    name: String,
    country: String,
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
enum Mood {
    Happy,
    Sad,
}

#[test]
fn replies_parse_through_the_usual_wrappings_and_fail_with_typed_errors() {
    let good = City {
        name: "Paris".into(),
        country: "France".into(),
    };
    for reply in [
        r#"{"name": "Paris", "country": "France"}"#,
        "```json\n{\"name\": \"Paris\", \"country\": \"France\"}\n```",
        "Sure! The city is {\"name\": \"Paris\", \"country\": \"France\"} — hope that helps.",
        "```\n{\"name\": \"Paris\", \"country\": \"France\"}\n```",
    ] {
        assert_eq!(City::parse(reply).unwrap(), good, "{reply}");
    }
    assert_eq!(City::parse("   ").unwrap_err(), ParseError::Empty);
    assert_eq!(
        City::parse("I don't know.").unwrap_err(),
        ParseError::NoJson
    );
    assert!(matches!(
        City::parse(r#"{"name": "Par"#).unwrap_err(),
        ParseError::Truncated { .. }
    ));
    assert!(matches!(
        City::parse(r#"{"name": 3, "country": "France"}"#).unwrap_err(),
        ParseError::Invalid { .. }
    ));
    assert_eq!(Mood::parse("\"Sad\"").unwrap(), Mood::Sad);
    assert_eq!(Mood::parse("happy.").unwrap(), Mood::Happy);
    assert!(matches!(
        Mood::parse("angry").unwrap_err(),
        ParseError::NotAChoice { allowed, .. } if allowed == ["Happy", "Sad"]
    ));
    assert_eq!(f64::parse("About -3.5 degrees").unwrap(), -3.5);
    assert!(matches!(
        u8::parse("none").unwrap_err(),
        ParseError::NotANumber { .. }
    ));
    assert!(matches!(
        u8::parse("300").unwrap_err(),
        ParseError::Invalid { .. }
    ));
    assert_eq!(String::parse(" plain words ").unwrap(), "plain words");
    assert_eq!(Lines::parse("1. a\n2) b\n- c").unwrap().0, ["a", "b", "c"]);
    assert_eq!(Lines::parse("\n \n").unwrap_err(), ParseError::Empty);
}

async fn run_both<A: Send + 'static>(
    make_config: impl Fn() -> (Config, Arc<ScriptedProvider>),
    program: impl Fn() -> Op<(), A>,
) -> Vec<(agent_op::Trace, A, Arc<ScriptedProvider>)> {
    let mut out = Vec::new();
    for parallel in [false, true] {
        let (config, provider) = make_config();
        let outcome = if parallel {
            agent_interp_par::run(&config, (), program()).await
        } else {
            agent_interp_seq::run(&config, (), program()).await
        }
        .unwrap();
        out.push((outcome.trace, outcome.value, provider));
    }
    out
}

fn scripted(replies: &[&str]) -> impl Fn() -> (Config, Arc<ScriptedProvider>) {
    let replies: Vec<String> = replies.iter().map(|r| (*r).to_owned()).collect();
    move || {
        let provider = Arc::new(ScriptedProvider::new(replies.iter().map(Response::text)));
        (Config::new().shared_provider(provider.clone()), provider)
    }
}

fn ask() -> Prompt {
    Prompt::new().user("Which city hosts the Louvre?")
}

#[tokio::test]
async fn a_bad_reply_is_repaired_with_the_error_the_schema_and_the_reply_shown() {
    let runs = run_both(
        scripted(&[
            "It is {\"name\": \"Paris\", \"coun",
            "{\"name\": \"Paris\", \"country\": \"France\"}",
        ]),
        || infer_as::<_, City>("small", ask()),
    )
    .await;
    for (trace, value, provider) in runs {
        assert_eq!(value.unwrap().name, "Paris");
        assert_eq!(trace.infer_calls(), 2);
        let calls = provider.calls();
        // The first prompt is minimal: one line naming the fields, no schema.
        let first = &calls[0].prompt;
        let Message::System { content, .. } = &first.messages[0] else {
            panic!("{first:?}")
        };
        assert!(content.contains("fields name, country"), "{content}");
        assert!(!content.contains("\"type\""), "{content}");
        assert!(first.options.response_format.is_none());
        // The repair shows the reply, the error and the whole schema.
        let second = &calls[1].prompt;
        let n = second.messages.len();
        assert_eq!(
            second.messages[n - 2],
            Message::assistant("It is {\"name\": \"Paris\", \"coun")
        );
        let repair = second.messages[n - 1].content();
        assert!(repair.contains("cut off"), "{repair}");
        assert!(repair.contains("\"required\""), "{repair}");
    }
}

#[tokio::test]
async fn a_provider_that_enforces_schemas_gets_the_schema_natively() {
    let runs = run_both(
        || {
            let provider = Arc::new(
                ScriptedProvider::new([Response::text(
                    "{\"name\": \"Paris\", \"country\": \"France\"}",
                )])
                .with_json_schema(),
            );
            (Config::new().shared_provider(provider.clone()), provider)
        },
        || infer_as::<_, City>("gpt-4o", ask()),
    )
    .await;
    for (_, value, provider) in runs {
        assert!(value.is_ok());
        let prompt = &provider.calls()[0].prompt;
        assert_eq!(prompt.messages, ask().messages, "no instructions added");
        match &prompt.options.response_format {
            Some(ResponseFormat::JsonSchema { name, schema, .. }) => {
                assert_eq!(name, "City");
                assert_eq!(schema["required"], json!(["name", "country"]));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn exhausted_repairs_are_a_typed_error_with_every_attempt() {
    let runs = run_both(scripted(&["no idea", "still no idea", "never"]), || {
        Structured::<City>::new().repairs(2).ask("small", ask())
    })
    .await;
    for (trace, value, _) in runs {
        let error = value.unwrap_err();
        assert_eq!(error.type_name, "City");
        let raws: Vec<_> = error.attempts.iter().map(|a| a.raw.as_str()).collect();
        assert_eq!(raws, ["no idea", "still no idea", "never"]);
        assert!(
            error
                .attempts
                .iter()
                .all(|a| a.error == AttemptError::Parse(ParseError::NoJson))
        );
        assert_eq!(trace.infer_calls(), 3);
        assert!(error.to_string().contains("after 3 model call(s)"));
    }
}

#[tokio::test]
async fn a_refused_value_is_repaired_apart_from_parse_repairs() {
    let runs = run_both(
        scripted(&[
            "{\"name\": \"\", \"country\": \"France\"}",
            "oops",
            "{\"name\": \"Paris\", \"country\": \"France\"}",
        ]),
        || {
            Structured::<City>::new()
                .validate(1, |c: &City| {
                    if c.name.is_empty() {
                        Err("the name is empty".into())
                    } else {
                        Ok(())
                    }
                })
                .ask("small", ask())
        },
    )
    .await;
    for (_, value, provider) in runs {
        assert_eq!(value.unwrap().name, "Paris");
        let second = provider.calls()[1].prompt.clone();
        let repair = second.messages.last().unwrap().content().to_owned();
        assert!(
            repair.contains("not acceptable: the name is empty"),
            "{repair}"
        );
    }
}

#[tokio::test]
async fn repairs_are_model_calls_inside_the_run_budget() {
    let (config, _) = scripted(&["bad", "{\"name\": \"Paris\", \"country\": \"France\"}"])();
    let program: Op<(), _> = op::limit(Budget::new().calls(1), infer_as::<_, City>("small", ask()));
    let outcome = agent_interp_seq::run(&config, (), program).await.unwrap();
    assert!(outcome.value.is_err(), "the repair needs a second call");
    assert_eq!(outcome.trace.events_of(EventType::Exhausted).count(), 1);
}

#[tokio::test]
async fn a_context_request_gets_its_instructions_in_the_observation() {
    let runs = run_both(scripted(&["Sad."]), || {
        infer_as::<_, Mood>("small", ContextRequest::new("How do you feel?"))
    })
    .await;
    for (_, value, provider) in runs {
        assert_eq!(value.unwrap(), Mood::Sad);
        let prompt = &provider.calls()[0].prompt;
        let last = prompt.messages.last().unwrap().content();
        assert!(last.starts_with("How do you feel?"), "{last}");
        assert!(last.contains("exactly one of: Happy, Sad"), "{last}");
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

fn counted_add(runs: Arc<AtomicUsize>) -> agent_agents::TypedTool<Add, i64> {
    tool("add", "Adds two integers", move |args: Add| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move {
            args.a
                .checked_add(args.b)
                .ok_or_else(|| ToolError::failed("overflow"))
        }
    })
    .read_only()
}

#[tokio::test]
async fn typed_tools_validate_arguments_before_running() {
    let runs = Arc::new(AtomicUsize::new(0));
    let add = counted_add(runs.clone());
    assert_eq!(add.parameters()["properties"]["a"]["type"], "integer");
    assert_eq!(add.call(json!({"a": 2, "b": 3})).await.unwrap(), json!(5));
    for bad in [json!({"a": "two", "b": 3}), json!({"a": 1}), json!("nope")] {
        let error = add.call(bad.clone()).await.unwrap_err();
        assert_eq!(error.kind, ToolErrorKind::InvalidArguments, "{bad}");
        assert!(error.message.contains("schema"), "{}", error.message);
    }
    let error = add.call(json!({"a": 1})).await.unwrap_err();
    assert!(
        error.message.contains("\"b\" is a required property"),
        "{}",
        error.message
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "invalid arguments never reach the function"
    );
    assert_eq!(
        add.call(json!({"a": i64::MAX, "b": 1}))
            .await
            .unwrap_err()
            .kind,
        ToolErrorKind::Failed
    );
}

#[tokio::test]
async fn a_hanging_tool_times_out_and_a_panicking_one_is_contained() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Nothing {}
    let hang = tool("hang", "Never returns", |_: Nothing| async {
        std::future::pending::<Result<(), ToolError>>().await
    })
    .timeout(Duration::from_millis(50));
    let boom = tool("boom", "Panics", |_: Nothing| async {
        if true {
            panic!("kaboom");
        }
        Ok(())
    });
    let toolbox = Toolbox::new("risky").with(hang).with(boom);
    let config = Config::new().tools(toolbox.tool_set());
    let program: Op<(), _> = op::tool("hang", json!({}))
        .and_then(|hung| op::tool("boom", json!({})).map(move |boom| (hung, boom)));
    let outcome = agent_interp_par::run(&config, (), program).await.unwrap();
    let (hung, boom) = outcome.value;
    let hung = hung.unwrap_err();
    assert!(
        hung.message.contains("did not finish within 50ms"),
        "{}",
        hung.message
    );
    assert_eq!(boom.unwrap_err().kind, ToolErrorKind::Panicked);
}

#[tokio::test]
async fn toolboxes_scope_the_run_and_only_narrow() {
    let runs = Arc::new(AtomicUsize::new(0));
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Cmd {
        line: String,
    }
    let shell = tool(
        "shell",
        "Runs a command",
        |c: Cmd| async move { Ok(c.line) },
    )
    .needs("shell");
    let all = Toolbox::new("all")
        .with(counted_add(runs.clone()))
        .with(shell);
    let math = all.narrow("math", &["add"]).unwrap();
    assert_eq!(
        all.narrow("x", &["rm"]).unwrap_err().to_string(),
        "toolbox `all` has no tool(s) rm: a narrower toolbox can only keep tools it has"
    );
    assert!(math.capabilities().is_empty());
    let config = Config::new().tools(all.tool_set());
    let program: Op<(), _> = with_toolbox(
        &all,
        with_toolbox(
            &math,
            op::tool("shell", json!({"line": "rm -rf /"})).and_then(|denied| {
                op::tool("add", json!({"a": 1, "b": 1})).map(move |ok| (denied, ok))
            }),
        ),
    );
    let outcome = agent_interp_seq::run(&config, (), program).await.unwrap();
    let (denied, ok) = outcome.value;
    assert_eq!(denied.unwrap_err().kind, ToolErrorKind::Denied);
    assert_eq!(ok.unwrap(), json!(2));
    assert_eq!(outcome.trace.events_of(EventType::ToolDenied).count(), 1);
    // A nested toolbox needing a capability the enclosing one lacks is refused on entry.
    let widening: Op<(), ()> = with_toolbox(&math, with_toolbox(&all, op::pure(())));
    let error = agent_interp_seq::run(&config, (), widening)
        .await
        .unwrap_err();
    let ErrorKind::ScopeWidens(widening) = &error.kind else {
        panic!("{:?}", error.kind)
    };
    assert_eq!(widening.tools, ["shell"]);
    assert_eq!(widening.capabilities, ["shell"]);
}

#[tokio::test]
async fn a_typed_tool_reads_its_calls_idempotency_key() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Charge {
        cents: u64,
    }
    let charge = agent_agents::tool("charge", "Charges the card", |c: Charge| async move {
        let key = agent_agents::call_context()
            .map(|c| c.idempotency_key)
            .unwrap_or_default();
        Ok::<_, agent_op::ToolError>(format!("{} cents, key {key}", c.cents))
    });
    let config = Config::new().tool(charge).trace_id("calm-owl-4242");
    let program: Op<(), String> = op::tool("charge", json!({"cents": 250}))
        .and_then(|_| op::tool("charge", json!({"cents": 100})))
        .map(|r| r.unwrap().as_str().unwrap_or_default().to_owned());
    let out = agent_interp_seq::run(&config, (), program).await.unwrap();
    // The run's second effect; outside a call there is no context.
    assert_eq!(out.value, "100 cents, key calm-owl-4242/1");
    assert!(agent_agents::call_context().is_none());
}
