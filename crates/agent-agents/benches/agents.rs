//! What the typed layer costs.
//!
//! - `agent.parse_typed`: MB/s parsing a 10 kB JSON reply into a derived struct through
//!   [`LlmOutput::parse`]; baseline: `serde_json::from_str` of the same text.
//! - `agent.parse_typed_fenced`: the same reply inside a Markdown code fence after a line of
//!   prose (the extraction path); baseline: `serde_json::from_str` of the bare JSON.

use std::hint::black_box;
use std::time::Duration;

use agent_agents::LlmOutput;

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)] // read only by the parser
struct Report {
    title: String,
    items: Vec<Item>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Item {
    id: u32,
    name: String,
    score: f64,
    tags: Vec<String>,
    done: bool,
}

fn reply() -> String {
    let mut items = Vec::new();
    let mut i = 0;
    loop {
        items.push(serde_json::json!({
            "id": i, "name": format!("item number {i}"), "score": f64::from(i) * 0.37,
            "tags": ["alpha", "beta"], "done": i % 2 == 0
        }));
        let text = serde_json::json!({"title": "Weekly report", "items": items}).to_string();
        if text.len() >= 10_000 {
            return text;
        }
        i += 1;
    }
}

fn rate(bytes: usize, samples: &[Duration], per: u32) -> f64 {
    bytes as f64 / 1e6 / bench_kit::median_per(samples, f64::from(per), bench_kit::secs)
}

fn main() {
    let json = reply();
    let fenced = format!("Here is the report you asked for:\n```json\n{json}\n```\n");
    const PER: u32 = 200;
    for (name, text) in [
        ("agent.parse_typed", &json),
        ("agent.parse_typed_fenced", &fenced),
    ] {
        if !bench_kit::enabled(name) {
            continue;
        }
        assert!(Report::parse(text).is_ok());
        let (subject, baseline) = bench_kit::interleaved(
            15,
            || {
                bench_kit::time(|| {
                    for _ in 0..PER {
                        black_box(Report::parse(black_box(text)).ok());
                    }
                })
                .0
            },
            || {
                bench_kit::time(|| {
                    for _ in 0..PER {
                        black_box(serde_json::from_str::<Report>(black_box(&json)).ok());
                    }
                })
                .0
            },
        );
        bench_kit::report(
            name,
            rate(json.len(), &subject, PER),
            "MB/s",
            rate(json.len(), &baseline, PER),
        );
    }
}
