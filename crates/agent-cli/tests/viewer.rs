//! The HTML trace viewer: the page is one self-contained file that no trace text can break
//! out of, and in a real browser (headless Chromium) it draws what the trace holds: a lane per
//! run or branch with the race's loser marked cancelled, the totals, a virtualized event list
//! that stays small for 100,000 events, filters and details.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use agent_cli::viewer::render;
use agent_op::{EventKind, Trace, TraceId};
use serde_json::Value;
use support::chromium::{self, Chromium};
use support::dom::Dom;
use support::traces::{self, HOSTILE, RUN_ID};

/// The trace a page holds (its `#trace-data` header and `.trace-events` arrays), and in how
/// many event elements.
fn embedded_trace(page: &str) -> (Trace, usize) {
    let dom = Dom::parse(page);
    let head = dom
        .by_id("trace-data")
        .expect("the page has a trace-data element");
    assert_eq!(dom.attr(head, "type"), Some("application/json"));
    let mut trace: Value =
        serde_json::from_str(&dom.elements[head].text).expect("the header is JSON");
    assert!(
        trace.get("events").is_none(),
        "events come in their own elements"
    );
    let chunks: Vec<usize> = (0..dom.elements.len())
        .filter(|&e| dom.elements[e].name == "script" && dom.has_class(e, "trace-events"))
        .collect();
    let mut events = Vec::new();
    for &chunk in &chunks {
        assert_eq!(dom.attr(chunk, "type"), Some("application/json"));
        let part: Vec<Value> =
            serde_json::from_str(&dom.elements[chunk].text).expect("each part is a JSON array");
        assert!(!part.is_empty(), "no empty parts");
        events.extend(part);
    }
    assert_eq!(
        dom.attr(head, "data-events"),
        Some(events.len().to_string().as_str()),
        "the header counts the events"
    );
    // Messages, tools and replies are in one table, named by index.
    let content: Vec<Value> = dom
        .by_id("trace-content")
        .map(|e| serde_json::from_str(&dom.elements[e].text).expect("the content is a JSON array"))
        .unwrap_or_default();
    let resolve = |v: &mut Value| {
        let index = v.as_u64().expect("content is named by index") as usize;
        *v = content[index].clone();
    };
    for event in &mut events {
        let data = &mut event["event"]["data"];
        for list in ["messages", "tools"] {
            if let Some(items) = data
                .get_mut("prompt")
                .and_then(|p| p.get_mut(list))
                .and_then(Value::as_array_mut)
            {
                items.iter_mut().for_each(resolve);
            }
        }
        if let Some(reply) = data.get_mut("reply") {
            resolve(reply);
        }
    }
    trace["events"] = Value::Array(events);
    let trace = serde_json::from_value(trace).expect("header and events make a trace");
    (trace, chunks.len())
}

/// Chromium, or `None` after the one line saying why the browser test is skipped.
fn chromium_or_skip() -> Option<Chromium> {
    match chromium::find_or_install() {
        Ok(chromium) => Some(chromium),
        Err(reason) => {
            eprintln!("SKIPPED: viewer browser test needs chromium ({reason})");
            None
        }
    }
}

fn write_page(name: &str, trace: &Trace, title: &str) -> PathBuf {
    let path = support::output_dir().join(name);
    std::fs::write(&path, render(trace, title)).expect("the page can be written");
    path
}

/// The trace's run and branch ids, each with whether its events are marked cancelled.
fn ids(trace: &Trace) -> BTreeMap<String, bool> {
    let mut ids = BTreeMap::new();
    for entry in &trace.events {
        *ids.entry(entry.trace_id.to_string()).or_insert(false) |= entry.cancelled;
    }
    ids
}

fn body(dom: &Dom) -> usize {
    dom.elements
        .iter()
        .position(|e| e.name == "body")
        .expect("the page has a body")
}

/// Checks the page finished its first render without failing, and returns its render time.
fn rendered(dom: &Dom) -> f64 {
    let body = body(dom);
    let problem = dom
        .by_id("problem")
        .map(|p| dom.text(p))
        .unwrap_or_default();
    assert_eq!(
        dom.attr(body, "data-rendered"),
        Some("1"),
        "the viewer did not finish: {problem}"
    );
    assert_eq!(
        dom.attr(body, "data-injected"),
        None,
        "trace text ran as a script"
    );
    dom.attr(body, "data-render-ms")
        .expect("the render time is recorded")
        .parse()
        .expect("the render time is a number")
}

fn totals(dom: &Dom, name: &str) -> u64 {
    let totals = dom.by_id("totals").expect("the page has totals");
    dom.attr(totals, &format!("data-{name}"))
        .unwrap_or_else(|| panic!("totals have data-{name}"))
        .parse()
        .unwrap_or_else(|e| panic!("data-{name} is a number: {e}"))
}

#[test]
fn the_page_embeds_the_trace_and_loads_nothing_from_outside() {
    let trace = traces::par_and_race(8);
    let page = render(&trace, "survey of 8 cities");
    assert!(page.starts_with("<!DOCTYPE html>"));
    let (back, chunks) = embedded_trace(&page);
    assert_eq!(back, trace, "the page holds the whole trace");
    assert_eq!(chunks, 1, "a small trace's events fit one element");
    for external in [
        "http://", "https://", " src=", " href=", "@import", "url(", "fetch(",
    ] {
        assert!(!page.contains(external), "the page refers to {external:?}");
    }
    assert!(
        page.contains("default-src 'none'"),
        "the page forbids loading anything"
    );
    assert!(page.contains("<title>survey of 8 cities</title>"));
}

#[test]
fn trace_text_cannot_close_the_data_element() {
    let trace = traces::par_and_race(3);
    let hostile_in_trace = trace.events.iter().any(|e| match &e.event.kind {
        EventKind::Custom(c) => c.data["text"] == HOSTILE,
        _ => false,
    });
    assert!(hostile_in_trace, "the trace holds the hostile text");
    let page = render(&trace, "</title><script>alert(1)</script>");
    let (back, chunks) = embedded_trace(&page);
    assert_eq!(back, trace, "the escaped text reads back as it was");
    let lower = page.to_ascii_lowercase();
    assert_eq!(
        (
            lower.matches("<script").count(),
            lower.matches("</script").count()
        ),
        (3 + chunks, 3 + chunks),
        "only the data elements (header, events, content) and the viewer's script start and end"
    );
    assert!(
        !page.contains("<!--"),
        "nothing can start a comment-like state"
    );
    assert!(page.contains("<title>&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;</title>"));
}

#[test]
fn large_traces_are_embedded_in_parts_that_read_back_whole() {
    let trace = traces::large(10_000);
    let page = render(&trace, "10,000 events");
    let (back, chunks) = embedded_trace(&page);
    assert!(chunks > 4, "{} bytes in {chunks} part(s)", page.len());
    assert_eq!(back, trace);
}

#[test]
fn browser_draws_lanes_totals_and_the_cancelled_race_loser() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let trace = traces::par_and_race(100);
    let run = TraceId::from(RUN_ID);
    let (par_branches, failed, winner, loser) =
        (100, run.child(100), run.child(101), run.child(102));
    let ids = ids(&trace);
    assert!(ids.len() >= 1 + par_branches + 3, "{} ids", ids.len());
    assert!(ids[loser.as_str()], "the slow racer was cancelled");
    assert!(!ids[winner.as_str()] && !ids[failed.as_str()]);

    let page = write_page("par-and-race.html", &trace, "survey of 100 cities");
    let dom = Dom::parse(
        &chromium
            .dump_dom(&page, "")
            .expect("chromium loads the page"),
    );
    rendered(&dom);

    // One lane per run or branch id, in the DOM, marked as the trace marks them.
    let lanes = dom.by_id("lanes").expect("the page has lanes");
    let rows = dom.children(lanes);
    assert!(rows.iter().all(|&l| dom.has_class(l, "lane")));
    let drawn: BTreeMap<String, bool> = rows
        .iter()
        .map(|&l| {
            let id = dom
                .attr(l, "data-id")
                .expect("a lane names its id")
                .to_owned();
            (id, dom.has_class(l, "cancelled"))
        })
        .collect();
    assert_eq!(rows.len(), ids.len(), "one lane per id");
    assert_eq!(drawn, ids, "lanes and their cancelled marks");
    let lane = |id: &TraceId| {
        *rows
            .iter()
            .find(|&&l| dom.attr(l, "data-id") == Some(id.as_str()))
            .expect("the lane is drawn")
    };
    assert!(dom.has_class(lane(&loser), "cancelled"));
    assert!(
        dom.text(lane(&loser)).contains("cancelled"),
        "the mark is visible"
    );
    assert!(dom.has_class(lane(&winner), "won"));
    assert!(dom.has_class(lane(&failed), "error"));
    assert!(!dom.has_class(lane(&run), "cancelled"));

    // The totals are the trace's.
    let spend = trace.spend().total();
    let cancelled = ids.values().filter(|&&c| c).count() as u64;
    assert!(cancelled >= 1);
    assert_eq!(totals(&dom, "events"), trace.events.len() as u64);
    assert_eq!(totals(&dom, "calls"), trace.infer_calls() as u64);
    assert_eq!(totals(&dom, "tools"), trace.tool_calls().len() as u64);
    assert_eq!(totals(&dom, "cancelled"), cancelled);
    assert_eq!(totals(&dom, "errors"), trace.errors().len() as u64);
    assert_eq!(totals(&dom, "input-tokens"), spend.tokens.input_tokens);
    assert_eq!(totals(&dom, "output-tokens"), spend.tokens.output_tokens);
    assert_eq!(totals(&dom, "cost-micro"), spend.cost.known.0);
    assert_eq!(totals(&dom, "cost-unknown-calls"), spend.cost.unknown_calls);
    assert_eq!(totals(&dom, "lanes"), ids.len() as u64);

    // The event list draws the rows in view, not one per event.
    let shown = dom.children(dom.by_id("event-rows").expect("the page has an event list"));
    assert!(
        !shown.is_empty() && shown.len() < trace.events.len(),
        "{} rows",
        shown.len()
    );

    let png = support::output_dir().join("par-and-race.png");
    let _ = std::fs::remove_file(&png);
    chromium
        .screenshot(&page, &png, 1400, 900)
        .expect("chromium captures the page");
    let bytes = std::fs::read(&png).expect("the screenshot exists");
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "the screenshot is a PNG"
    );
    assert!(
        bytes.len() > 30_000,
        "a drawn page, not a blank one: {} bytes",
        bytes.len()
    );
}

#[test]
fn browser_shows_a_failed_runs_error_in_the_header() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let trace = traces::failed();
    let page = write_page("failed.html", &trace, "a failed run");
    let dom = Dom::parse(
        &chromium
            .dump_dom(&page, "")
            .expect("chromium loads the page"),
    );
    rendered(&dom);
    let outcome = dom.by_id("outcome").expect("the header has the outcome");
    assert_eq!(dom.attr(outcome, "data-outcome"), Some("failed"));
    assert!(dom.has_class(outcome, "bad"));
    let text = dom.text(outcome);
    assert!(text.contains(traces::FAILURE), "{text}");
    assert!(text.contains("program"), "the error's kind: {text}");
    // One wall time: the run's own, as `agent trace summary` reports it.
    assert_eq!(
        totals(&dom, "wall-us"),
        trace.wall_time().as_micros() as u64
    );

    // A run that succeeded says so.
    let page = write_page("tiny-outcome.html", &traces::tiny(), "a tiny run");
    let dom = Dom::parse(
        &chromium
            .dump_dom(&page, "")
            .expect("chromium loads the page"),
    );
    rendered(&dom);
    let outcome = dom.by_id("outcome").expect("the header has the outcome");
    assert_eq!(dom.attr(outcome, "data-outcome"), Some("succeeded"));
}

#[test]
fn browser_filters_events_and_shows_their_details() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let trace = traces::par_and_race(100);
    let page = write_page("filters.html", &trace, "survey of 100 cities");
    let matches = |fragment: &str| -> u64 {
        let dom = Dom::parse(
            &chromium
                .dump_dom(&page, fragment)
                .expect("chromium loads the page"),
        );
        rendered(&dom);
        let count = dom.by_id("match-count").expect("the page counts matches");
        dom.attr(count, "data-matches")
            .expect("the count is recorded")
            .parse()
            .expect("the count is a number")
    };

    let errors = trace.errors().len() as u64;
    assert!(errors >= 1);
    assert_eq!(matches("type=error"), errors);
    assert_eq!(matches("type=infer_start"), trace.infer_calls() as u64);
    // Text search looks at the type, the branch id and the payload, as the page's help says.
    let text = |needle: &str| {
        trace
            .events
            .iter()
            .filter(|e| {
                let data =
                    serde_json::to_value(&e.event).expect("events serialize")["data"].to_string();
                let hay = format!("{} {} {}", e.event.kind.event_type(), e.trace_id, data);
                hay.to_lowercase().contains(needle)
            })
            .count() as u64
    };
    assert_eq!(matches("q=city-42"), text("city-42"));
    assert!(text("city-42") >= 2, "the call and its result");
    let branch = format!("{RUN_ID}.57");
    assert_eq!(
        matches(&format!("branch={branch}")),
        trace.events_in(&TraceId::from(branch.as_str())).count() as u64
    );

    // A context event's details list every section, with what happened to it and why.
    let context = trace
        .events
        .iter()
        .position(|e| matches!(e.event.kind, EventKind::Context(_)))
        .expect("the trace has a context event");
    let EventKind::Context(report) = &trace.events[context].event.kind else {
        unreachable!()
    };
    let dom = Dom::parse(
        &chromium
            .dump_dom(&page, &format!("event={context}"))
            .expect("chromium loads the page"),
    );
    rendered(&dom);
    let details = dom.text(dom.by_id("details").expect("the page has details"));
    for section in &report.compile.sections {
        assert!(
            details.contains(&section.id),
            "section {} is listed",
            section.id
        );
    }
    let outcomes: BTreeSet<&str> = report
        .compile
        .sections
        .iter()
        .map(|s| match &s.outcome {
            agent_op::context::Outcome::Kept => "kept",
            agent_op::context::Outcome::Shrunk => "shrunk",
            _ => "dropped",
        })
        .collect();
    assert_eq!(
        outcomes.len(),
        3,
        "the report keeps, shrinks and drops: {outcomes:?}"
    );
    for reason in ["dropped: duplicate", "dropped: over_budget"] {
        assert!(
            details.contains(reason),
            "the details say {reason:?}: {details}"
        );
    }
}

#[test]
fn browser_shows_the_whole_prompt_and_reply_of_a_call() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let trace = traces::tiny();
    let page = write_page("prompt.html", &trace, "a tiny run");
    let (call, prompt) = trace
        .events
        .iter()
        .enumerate()
        .find_map(|(i, e)| match &e.event.kind {
            EventKind::InferStart(start) => start.prompt.as_ref().map(|p| (i, p)),
            _ => None,
        })
        .expect("the run recorded its prompts");
    let dom = Dom::parse(
        &chromium
            .dump_dom(&page, &format!("event={call}"))
            .expect("chromium loads the page"),
    );
    rendered(&dom);
    let details = dom.text(dom.by_id("details").expect("the page has details"));
    assert!(!prompt.messages.is_empty());
    for message in &prompt.messages {
        // Whole, not a 200-character preview (the viewer keeps whitespace as it is).
        assert!(
            details.contains(message.content().trim()),
            "the details hold {:?}: {details}",
            message.content()
        );
    }
    let reply = trace.events[call + 1..]
        .iter()
        .find_map(|e| match &e.event.kind {
            EventKind::InferEnd(end) => end.reply.clone(),
            _ => None,
        })
        .expect("the reply was recorded");
    assert!(details.contains(reply.content()), "{details}");
}

#[test]
fn browser_renders_100k_events() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let trace = traces::large(100_000);
    assert!(
        trace.events.len() >= 100_000,
        "{} events",
        trace.events.len()
    );
    let page = write_page("large.html", &trace, "100,000 events");
    let size = std::fs::metadata(&page).expect("the page exists").len();
    let dom = Dom::parse(
        &chromium
            .dump_dom(&page, "")
            .expect("chromium loads the page"),
    );
    let ms = rendered(&dom);
    eprintln!(
        "viewer: {} events, page of {:.1} MB, first render after {ms} ms",
        trace.events.len(),
        size as f64 / 1e6
    );
    assert!(ms > 0.0 && ms < 20_000.0, "first render after {ms} ms");
    assert_eq!(totals(&dom, "events"), trace.events.len() as u64);
    assert_eq!(totals(&dom, "calls"), trace.infer_calls() as u64);
    let lanes = dom.by_id("lanes").expect("the page has lanes");
    assert_eq!(dom.children(lanes).len(), ids(&trace).len());
    let shown = dom.children(dom.by_id("event-rows").expect("the page has an event list"));
    assert!(
        !shown.is_empty() && shown.len() <= 200,
        "{} event rows in the DOM",
        shown.len()
    );
}
