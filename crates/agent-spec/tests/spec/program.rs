//! The program a spec builds for a served message: what the model is shown, what memory is
//! asked, and that `program` is `program_for` with nothing given.

use std::path::Path;
use std::sync::{Arc, Mutex};

use agent_op::{EventKind, Prompt, Response};
use agent_spec::{Input, Role, Spec, Turn};
use serde_json::{Value, json};

const SPEC: &str = r#"
[model]
provider = "scripted"
name = "m"
replies = []

[agent]
goal = "Summarize the notes."
context = ["The notes are short."]
"#;

/// Runs `spec`'s program for `input` against a model that answers `done`; returns each
/// prompt's messages as text, one string per model call, and the run's recall queries.
async fn asked(spec: &Spec, input: &Input) -> (Vec<String>, Vec<String>) {
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let seen = prompts.clone();
    let provider = agent_provider::ScriptedProvider::from_fn(move |_, prompt: &Prompt| {
        let text: Vec<&str> = prompt.messages.iter().map(|m| m.content()).collect();
        seen.lock().unwrap().push(text.join("\n---\n"));
        Ok(Response::text("done"))
    });
    let toolbox = agent_agents::Toolbox::new("spec");
    let program = agent_spec::program_for(spec, &toolbox, input).unwrap();
    let config = agent_interp_seq::Config::new()
        .provider(provider)
        .memory(agent_memory::InMemoryBackend::new());
    let outcome = agent_interp_seq::run(&config, (), program).await.unwrap();
    assert_eq!(outcome.value, Value::String("done".into()));
    let recalls = outcome
        .trace
        .events
        .iter()
        .filter_map(|entry| match &entry.event.kind {
            EventKind::Recall(recall) => Some(recall.query_preview.clone()),
            _ => None,
        })
        .collect();
    let prompts = prompts.lock().unwrap().clone();
    (prompts, recalls)
}

#[tokio::test]
async fn a_message_replaces_the_goal_which_stays_as_the_standing_task() {
    let spec = Spec::parse(SPEC, Path::new("notes.toml")).unwrap();
    let input = Input {
        message: Some("What do the notes say about replay?".into()),
        history: vec![Turn::user("Hi"), Turn::assistant("Hello. Ask away.")],
    };
    let (prompts, _) = asked(&spec, &input).await;
    let prompt = &prompts[0];
    for shown in [
        "What do the notes say about replay?",
        "Your standing task: Summarize the notes.",
        "The notes are short.",
        "Earlier in this conversation:\nuser: Hi\nassistant: Hello. Ask away.",
    ] {
        assert!(prompt.contains(shown), "{shown:?} is not in {prompt}");
    }
}

#[tokio::test]
async fn no_message_runs_the_specs_goal_as_agent_run_does() {
    let spec = Spec::parse(SPEC, Path::new("notes.toml")).unwrap();
    let toolbox = agent_agents::Toolbox::new("spec");
    // `program` is `program_for` with nothing given: the same prompts.
    let (given, _) = asked(&spec, &Input::default()).await;
    assert!(given[0].contains("Summarize the notes."), "{}", given[0]);
    assert!(!given[0].contains("standing task"), "{}", given[0]);
    assert!(!given[0].contains("Earlier in this"), "{}", given[0]);
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let seen = prompts.clone();
    let provider = agent_provider::ScriptedProvider::from_fn(move |_, prompt: &Prompt| {
        let text: Vec<&str> = prompt.messages.iter().map(|m| m.content()).collect();
        seen.lock().unwrap().push(text.join("\n---\n"));
        Ok(Response::text("done"))
    });
    let program = agent_spec::program(&spec, &toolbox).unwrap();
    let config = agent_interp_seq::Config::new().provider(provider);
    agent_interp_seq::run(&config, (), program).await.unwrap();
    assert_eq!(*prompts.lock().unwrap(), given);
}

#[tokio::test]
async fn memory_is_asked_for_the_goal_the_agent_was_given() {
    let text = format!("{SPEC}\n[memory]\ndb = \"memory.db\"\n");
    let spec = Spec::parse(&text, Path::new("notes.toml")).unwrap();
    let (_, recalls) = asked(&spec, &Input::message("Anything on replay?")).await;
    assert_eq!(recalls, ["Anything on replay?"]);
    let (_, recalls) = asked(&spec, &Input::default()).await;
    assert_eq!(recalls, ["Summarize the notes."]);
}

#[test]
fn input_reads_the_json_its_schema_describes() {
    let input: Input = serde_json::from_value(json!({
        "message": "Why?",
        "history": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
    }))
    .unwrap();
    assert_eq!(input.message.as_deref(), Some("Why?"));
    assert_eq!(input.history[1].role, Role::Assistant);
    assert_eq!(
        serde_json::from_value::<Input>(json!({})).unwrap(),
        Input::default()
    );
    // A misspelt key would otherwise run the spec's own goal.
    assert!(serde_json::from_value::<Input>(json!({"mesage": "Why?"})).is_err());
    assert_eq!(
        serde_json::to_value(Input::message("Why?")).unwrap(),
        json!({"message": "Why?"})
    );

    let spec = Spec::parse(SPEC, Path::new("notes.toml")).unwrap();
    let schema = spec.input_schema();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["message"]["type"], "string");
    assert_eq!(
        schema["properties"]["history"]["items"]["properties"]["role"]["enum"],
        json!(["user", "assistant"])
    );
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&serde_json::to_value(&input).unwrap()));
    assert!(!validator.is_valid(&json!({"mesage": "Why?"})));
}

#[test]
fn the_output_schema_is_the_specs_for_json_and_a_string_otherwise() {
    let text = Spec::parse(SPEC, Path::new("notes.toml")).unwrap();
    assert_eq!(text.output_schema(), json!({"type": "string"}));
    let typed = format!(
        "{SPEC}\n[output]\ntype = \"json\"\nschema = {{ type = \"object\", required = [\"answer\"] }}\n"
    );
    let typed = Spec::parse(&typed, Path::new("notes.toml")).unwrap();
    assert_eq!(
        typed.output_schema(),
        json!({"type": "object", "required": ["answer"]})
    );
}

#[test]
fn a_spec_knows_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("research.toml");
    std::fs::write(&path, SPEC).unwrap();
    let spec = Spec::read(&path).unwrap();
    assert_eq!(spec.path(), Some(path.as_path()));
    assert_eq!(spec.dir(), dir.path());
    assert_eq!(spec.name(), "research");
    let bare = Spec::parse(SPEC, Path::new("research.toml")).unwrap();
    assert_eq!(bare.dir(), Path::new("."));
    let named = format!("{SPEC}name = \"scout\"\n");
    assert_eq!(
        Spec::parse(&named, Path::new("x/research.toml"))
            .unwrap()
            .name(),
        "scout"
    );

    let missing = Spec::read(&dir.path().join("none.toml")).unwrap_err();
    assert!(
        matches!(missing, agent_spec::SpecError::Io { .. }),
        "{missing:?}"
    );
    assert!(std::error::Error::source(&missing).is_some());
}
