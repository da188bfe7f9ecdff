//! `docs/SPEC.md` against the parser: every key the parser takes is documented and every key
//! documented is taken, and every example in the page parses.

use std::collections::BTreeSet;
use std::path::Path;

use agent_spec::Spec;
use serde_json::Value;

fn page() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/SPEC.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every key path the parser takes, as the page writes them: `tools.mcp[].name`,
/// `model.replies[].calls[].tool`. Maps of free-form values (a tool's scripted arguments, the
/// output's JSON schema) are leaves.
fn parser_keys() -> BTreeSet<String> {
    let schema = serde_json::to_value(schemars::schema_for!(Spec)).unwrap();
    let mut keys = BTreeSet::new();
    walk(&schema, &schema, "", &mut keys);
    keys
}

fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let name = reference.rsplit('/').next().unwrap_or_default();
            resolve(root, &root["$defs"][name])
        }
        None => node,
    }
}

fn walk(root: &Value, node: &Value, at: &str, keys: &mut BTreeSet<String>) {
    let node = resolve(root, node);
    for alternatives in ["oneOf", "anyOf", "allOf"] {
        if let Some(list) = node.get(alternatives).and_then(Value::as_array) {
            for choice in list {
                walk(root, choice, at, keys);
            }
        }
    }
    if let Some(items) = node.get("items") {
        walk(root, items, &format!("{at}[]"), keys);
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (name, value) in properties {
            let path = if at.is_empty() {
                name.clone()
            } else {
                format!("{at}.{name}")
            };
            keys.insert(path.clone());
            walk(root, value, &path, keys);
        }
    }
}

/// The keys the page documents: the first cell of its key tables, in backticks.
fn documented_keys(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(key, _)| key.to_owned())
        .collect()
}

#[test]
fn every_key_the_parser_takes_is_documented_and_no_other() {
    let page = page();
    let (parsed, documented) = (parser_keys(), documented_keys(&page));
    assert!(parsed.len() > 20, "the schema walk found keys: {parsed:?}");
    let undocumented: Vec<_> = parsed.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&parsed).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/SPEC.md lacks {undocumented:?} and documents keys the parser refuses: {unknown:?}"
    );
}

#[test]
fn every_example_in_the_page_parses() {
    let page = page();
    let mut examples = 0;
    let mut block: Option<String> = None;
    for line in page.lines() {
        match (&mut block, line.trim_end()) {
            (None, "```toml") => block = Some(String::new()),
            (Some(text), "```") => {
                examples += 1;
                let text = std::mem::take(text);
                block = None;
                // Fragments (one or two tables) are checked as they sit in a whole spec.
                let mut whole = text;
                if !whole.contains("[model]") {
                    whole.push_str(
                        "\n[model]\nprovider = \"scripted\"\nname = \"m\"\nreplies = []\n",
                    );
                }
                if !whole.contains("[agent]") {
                    whole.push_str("\n[agent]\ngoal = \"x\"\n");
                }
                if let Err(e) = Spec::parse(&whole, Path::new("docs/SPEC.md")) {
                    panic!("an example does not parse: {e}\n{whole}");
                }
            }
            (Some(text), line) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(examples >= 5, "found {examples} examples");
}

#[test]
fn the_parser_refuses_a_key_the_page_does_not_have() {
    let spec = "[model]\nprovider = \"scripted\"\nname = \"m\"\nreplies = []\n\n[agent]\ngoal = \"x\"\nbogus = 1\n";
    let error = Spec::parse(spec, Path::new("s.toml"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("bogus"), "{error}");
}
