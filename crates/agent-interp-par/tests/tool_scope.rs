//! `op::with_tools`: a part of a program sees exactly its scope's tools, under both
//! interpreters; calls outside it are refused before anything runs and traced.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_interp_seq::{Config, ErrorKind, Outcome, RunError};
use agent_op::op::{self, Op};
use agent_op::{
    ContextRequest, EventKind, EventType, FnTool, Prompt, Response, ToolErrorKind, ToolScope,
    ToolSet,
};
use agent_provider::ScriptedProvider;
use serde_json::{Value, json};

fn counting(
    name: &'static str,
    calls: Arc<AtomicUsize>,
) -> FnTool<impl Fn(Value) -> std::future::Ready<Result<Value, agent_op::ToolError>> + Send + Sync>
{
    FnTool::new(
        name,
        format!("The {name} tool"),
        json!({"type": "object"}),
        move |_args: Value| {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(json!(name)))
        },
    )
}

struct Tools {
    reads: Arc<AtomicUsize>,
    writes: Arc<AtomicUsize>,
}

impl Tools {
    fn new() -> Tools {
        Tools {
            reads: Arc::new(AtomicUsize::new(0)),
            writes: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn set(&self) -> ToolSet {
        ToolSet::new()
            .with(counting("read", self.reads.clone()))
            .with(counting("write", self.writes.clone()))
    }

    fn reader(&self) -> ToolScope {
        ToolScope::new(
            "reader",
            ToolSet::new().with(counting("read", self.reads.clone())),
        )
        .grant("fs.read")
    }
}

async fn both<A: Send + 'static>(
    config: &Config,
    program: impl Fn() -> Op<(), A>,
) -> [Result<Outcome<(), A>, RunError>; 2] {
    [
        agent_interp_seq::run(config, (), program()).await,
        agent_interp_par::run(config, (), program()).await,
    ]
}

#[tokio::test]
async fn a_tool_outside_the_scope_is_refused_traced_and_never_runs() {
    let tools = Tools::new();
    let scope = tools.reader();
    let config = Config::new().tools(tools.set());
    let program = || {
        op::with_tools(
            scope.clone(),
            op::tool("write", json!({"path": "/etc/passwd"})).and_then(|denied| {
                op::tool("read", json!({})).and_then(move |read| {
                    op::tool_definitions().map(move |defs| (denied, read, defs))
                })
            }),
        )
        .and_then(|inside| op::tool("write", json!({})).map(move |outside| (inside, outside)))
    };
    for outcome in both(&config, program).await {
        let outcome = outcome.unwrap();
        let ((denied, read, defs), outside) = outcome.value;
        let denied = denied.unwrap_err();
        assert_eq!(denied.kind, ToolErrorKind::Denied);
        assert!(denied.message.contains("`write`") && denied.message.contains("reader"));
        assert_eq!(read.unwrap(), json!("read"));
        assert_eq!(
            defs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["read"]
        );
        // Outside the scope the run's tools apply again.
        assert_eq!(outside.unwrap(), json!("write"));
        let denied: Vec<_> = outcome.trace.events_of(EventType::ToolDenied).collect();
        assert_eq!(denied.len(), 1);
        let EventKind::ToolDenied(event) = &denied[0].event.kind else {
            unreachable!()
        };
        assert_eq!(
            (event.name.as_str(), event.scope.as_str()),
            ("write", "reader")
        );
        assert_eq!(event.allowed, ["read"]);
    }
    // Two runs: the write inside the scope never ran; the one outside ran each time.
    assert_eq!(tools.writes.load(Ordering::SeqCst), 2);
    assert_eq!(tools.reads.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_model_asking_for_an_out_of_scope_tool_by_name_never_executes_it() {
    let tools = Tools::new();
    let scope = tools.reader();
    let provider = Arc::new(ScriptedProvider::from_fn(move |_, _| {
        Ok(Response::tool_call(
            "call-1",
            "write",
            json!({"path": "/tmp/x", "text": "pwned"}),
        ))
    }));
    let config = Config::new()
        .tools(tools.set())
        .shared_provider(provider.clone());
    let program = || {
        op::with_tools(
            scope.clone(),
            op::infer("gpt-4o", ContextRequest::new("tidy up")).and_then(|reply| {
                let call = reply.tool_calls[0].clone();
                op::tool(call.name, call.arguments)
            }),
        )
    };
    for outcome in both(&config, program).await {
        let outcome = outcome.unwrap();
        assert_eq!(outcome.value.unwrap_err().kind, ToolErrorKind::Denied);
        assert_eq!(outcome.trace.events_of(EventType::ToolDenied).count(), 1);
        assert_eq!(outcome.trace.events_of(EventType::ToolCall).count(), 0);
    }
    assert_eq!(tools.writes.load(Ordering::SeqCst), 0);
    // The model was offered only the tool in scope.
    for call in provider.calls() {
        let offered: Vec<_> = call.prompt.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(offered, ["read"]);
    }
}

#[tokio::test]
async fn scopes_only_narrow() {
    let tools = Tools::new();
    let config = Config::new().tools(tools.set());
    let everything = ToolScope::new("everything", tools.set()).grant("fs.read");
    let widening = [
        // A tool the enclosing scope lacks.
        op::with_tools(
            tools.reader(),
            op::with_tools(everything.clone(), op::pure(())),
        ),
        // A capability the enclosing scope lacks.
        op::with_tools(
            tools.reader(),
            op::with_tools(tools.reader().grant("net"), op::pure(())),
        ),
        // A tool the run's config does not permit.
        op::with_tools(
            ToolScope::new(
                "shell",
                ToolSet::new().with(counting("shell", Arc::default())),
            ),
            op::pure(()),
        ),
    ];
    let expected = [
        ("everything", "reader", vec!["write"], vec![]),
        ("reader", "reader", vec![], vec!["net"]),
        ("shell", "the run's config", vec!["shell"], vec![]),
    ];
    for (program, (scope, enclosing, tools, capabilities)) in widening.into_iter().zip(expected) {
        let error = agent_interp_seq::run(&config, (), program)
            .await
            .unwrap_err();
        match &error.kind {
            ErrorKind::ScopeWidens(widening) => {
                let agent_interp_seq::ScopeWidening {
                    scope: s,
                    enclosing: e,
                    tools: t,
                    capabilities: c,
                } = &**widening;
                assert_eq!((s.as_str(), e.as_str()), (scope, enclosing));
                assert_eq!(t, &tools);
                assert_eq!(c, &capabilities);
            }
            other => panic!("{other:?}"),
        }
        assert!(error.kind.to_string().contains("asks for more than"));
    }
    // Narrowing is fine, and the inner scope's tools are what runs.
    let narrowed = op::with_tools(
        everything,
        op::with_tools(tools.reader(), op::tool("read", json!({}))),
    );
    let outcome = agent_interp_par::run(&config, (), narrowed).await.unwrap();
    assert_eq!(outcome.value.unwrap(), json!("read"));
    let _ = Prompt::new();
}
