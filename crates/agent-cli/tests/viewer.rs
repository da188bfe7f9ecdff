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

/// `page` (its address ending in `#fragment`) as headless Chromium drew it, checked to have
/// finished its first render without failing.
fn load(chromium: &Chromium, page: &std::path::Path, fragment: &str) -> Dom {
    let dom = Dom::parse(
        &chromium
            .dump_dom(page, fragment)
            .expect("chromium loads the page"),
    );
    rendered(&dom);
    dom
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
    for external in ["http://", "https://", " href=", "@import", "url(", "fetch("] {
        assert!(!page.contains(external), "the page refers to {external:?}");
    }
    // The one `src` is an image thumbnail's, and it is a `data:` URL.
    for (at, _) in page.match_indices(" src=") {
        assert!(
            page[at..].starts_with(" src=\"data:"),
            "the page refers to {:?}",
            &page[at..(at + 40).min(page.len())]
        );
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
    let dom = load(&chromium, &page, "");

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
    let dom = load(&chromium, &page, "");
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
    let dom = load(&chromium, &page, "");
    let outcome = dom.by_id("outcome").expect("the header has the outcome");
    assert_eq!(dom.attr(outcome, "data-outcome"), Some("succeeded"));
}

/// The header's wall time reads as `agent trace summary` prints it, minutes and hours too.
#[test]
fn browser_shows_the_wall_time_in_the_units_of_trace_summary() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    for (name, us) in [("minutes", 421_293_600), ("hours", 7_500_000_000)] {
        let mut trace = traces::failed();
        for entry in &mut trace.events {
            if let EventKind::RunEnd(end) = &mut entry.event.kind {
                end.duration_us = us;
            }
        }
        assert_eq!(trace.wall_time().as_micros(), u128::from(us));
        let page = write_page(&format!("wall-{name}.html"), &trace, "a long run");
        let dom = load(&chromium, &page, "");
        let text = dom.text(dom.by_id("totals").expect("the page has totals"));
        let summary = agent_cli::trace_cmd::human_duration(us);
        assert!(
            text.contains(&format!("Wall time{summary}")),
            "the summary says {summary}: {text}"
        );
    }
}

#[test]
fn browser_filters_events_and_shows_their_details() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let trace = traces::par_and_race(100);
    let page = write_page("filters.html", &trace, "survey of 100 cities");
    let matches = |fragment: &str| -> u64 {
        let dom = load(&chromium, &page, fragment);
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
    let dom = load(&chromium, &page, &format!("event={context}"));
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
    let dom = load(&chromium, &page, &format!("event={call}"));
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
    let dom = load(&chromium, &page, "");
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
    // A branch's 400 calls are drawn as fewer, merged bars that still count every call.
    let branch = TraceId::from(RUN_ID).child(0);
    let lane = drawn_lanes(&dom)[branch.as_str()];
    let bars = dom.descendants_with_class(lane, "call");
    let counted: f64 = bars.iter().map(|&b| number(&dom, b, "data-calls")).sum();
    let calls = trace
        .events
        .iter()
        .filter(|e| {
            e.trace_id == branch
                && matches!(
                    e.event.kind,
                    EventKind::InferStart(_) | EventKind::ToolCall(_)
                )
        })
        .count();
    assert_eq!(counted as usize, calls);
    assert!(
        !bars.is_empty() && bars.len() <= 250,
        "{} bars for {calls} calls",
        bars.len()
    );
    let shown = dom.children(dom.by_id("event-rows").expect("the page has an event list"));
    assert!(
        !shown.is_empty() && shown.len() <= 200,
        "{} event rows in the DOM",
        shown.len()
    );
}

/// The lane elements the timeline drew, by their branch id.
fn drawn_lanes(dom: &Dom) -> BTreeMap<String, usize> {
    let lanes = dom.by_id("lanes").expect("the page has lanes");
    dom.children(lanes)
        .into_iter()
        .filter_map(|l| Some((dom.attr(l, "data-id")?.to_owned(), l)))
        .collect()
}

fn number(dom: &Dom, element: usize, attribute: &str) -> f64 {
    dom.attr(element, attribute)
        .unwrap_or_else(|| panic!("no {attribute}"))
        .parse()
        .unwrap_or_else(|e| panic!("{attribute}: {e}"))
}

/// The `left: …%` of an element's style.
fn left_percent(dom: &Dom, element: usize) -> f64 {
    let style = dom.attr(element, "style").expect("a positioned element");
    let at = style.find("left:").expect("a left position") + 5;
    style[at..]
        .split('%')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .expect("a percentage")
}

#[test]
fn browser_draws_calls_within_their_lanes_and_labels_branches_by_what_they_run() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let trace = traces::par_and_race(100);
    let page = write_page("calls.html", &trace, "survey of 100 cities");
    let dom = load(&chromium, &page, "");
    let lanes = drawn_lanes(&dom);
    let branch = TraceId::from(RUN_ID).child(5);
    let lane = lanes[branch.as_str()];
    // The branch asks a model, then looks a city up: one bar of each, each naming its event.
    let calls = dom.descendants_with_class(lane, "call");
    let kinds: Vec<&str> = calls
        .iter()
        .map(|&c| {
            if dom.has_class(c, "model") {
                "model"
            } else {
                "tool"
            }
        })
        .collect();
    assert_eq!(kinds, ["model", "tool"], "the branch's two calls, in order");
    for (&call, expected) in calls.iter().zip(["infer_start", "tool_call"]) {
        let event: usize = number(&dom, call, "data-event") as usize;
        assert_eq!(
            trace.events[event].event.kind.event_type().as_str(),
            expected
        );
        assert_eq!(trace.events[event].trace_id, branch);
    }
    assert!(left_percent(&dom, calls[0]) <= left_percent(&dom, calls[1]));
    // Labelled by what it runs, not only by its id.
    let label = dom.text(lane);
    assert!(label.contains("small-model → lookup"), "{label}");
    let loser = dom.text(lanes[TraceId::from(RUN_ID).child(102).as_str()]);
    assert!(loser.contains("slow-model"), "{loser}");
}

#[test]
fn browser_zooms_to_the_range_in_the_address_and_follows_the_filter() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let trace = traces::par_and_race(100);
    let page = write_page("zoom.html", &trace, "survey of 100 cities");
    let whole = load(&chromium, &page, "");
    let timeline = whole.by_id("timeline").expect("a timeline");
    let span = number(&whole, timeline, "data-view-to");
    assert_eq!(number(&whole, timeline, "data-view-from"), 0.0);
    // Zoom to the time before the race: the racers fall outside, the survey inside.
    let run = TraceId::from(RUN_ID);
    let lanes = drawn_lanes(&whole);
    let race_start = (100..103)
        .map(|k| number(&whole, lanes[run.child(k).as_str()], "data-start-us"))
        .fold(f64::INFINITY, f64::min);
    let to = (race_start - 1.0).floor();
    assert!(
        to > 0.0 && to < span,
        "the race starts inside the run: {to} of {span}"
    );
    let zoomed = load(&chromium, &page, &format!("zoom=0-{to}"));
    let timeline = zoomed.by_id("timeline").expect("a timeline");
    assert_eq!(number(&zoomed, timeline, "data-view-to"), to);
    let ticks = zoomed.descendants_with_class(zoomed.by_id("axis").unwrap(), "tick");
    assert!(!ticks.is_empty());
    assert!(ticks.iter().all(|&t| number(&zoomed, t, "data-us") <= to));
    let zoomed_lanes = drawn_lanes(&zoomed);
    for k in 100..103 {
        assert!(zoomed.has_class(zoomed_lanes[run.child(k).as_str()], "outside"));
    }
    let survey = run.child(50);
    assert!(!zoomed.has_class(zoomed_lanes[survey.as_str()], "outside"));
    // The same moment sits further right in the narrower range: span / to times further.
    let bar = |dom: &Dom, lanes: &BTreeMap<String, usize>| {
        left_percent(
            dom,
            dom.descendants_with_class(lanes[survey.as_str()], "bar")[0],
        )
    };
    let (before, after) = (bar(&whole, &lanes), bar(&zoomed, &zoomed_lanes));
    let expected = before * span / to;
    assert!(
        (after - expected).abs() < 0.5,
        "left {before}% of the run is {expected}% of the zoomed range, drawn at {after}%"
    );
    // A search draws only the lanes that hold a match (and the run, which leads to them).
    let filtered = load(&chromium, &page, "q=city-42");
    let shown: BTreeSet<String> = drawn_lanes(&filtered).into_keys().collect();
    let expected: BTreeSet<String> = [run.to_string(), run.child(42).to_string()].into();
    assert_eq!(shown, expected);
}

#[test]
fn browser_stays_usable_with_5000_branches() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let trace = traces::wide(5_000);
    assert!(
        trace.events.len() >= 11_000,
        "{} events",
        trace.events.len()
    );
    let page = write_page("wide.html", &trace, "5,000 branches");
    let dom = load(&chromium, &page, "");
    let ms = rendered(&dom);
    eprintln!(
        "viewer: {} events in 5,000 branches, first render after {ms} ms (the benchmark viewer.render_5000_branches times it)",
        trace.events.len()
    );
    // What the issue asked of a page this wide (an absolute bound, as the 100,000-event test
    // has; about 0.3-0.4 s here, so a loaded machine still passes).
    assert!(ms > 0.0 && ms < 2_000.0, "first render after {ms} ms");
    assert_eq!(totals(&dom, "events"), trace.events.len() as u64);
    assert_eq!(totals(&dom, "lanes"), 5_001);
    // The timeline draws a screenful: the run, the first branches, and one row for the rest.
    let lanes = dom.by_id("lanes").expect("the page has lanes");
    let rows = dom.children(lanes);
    assert!(rows.len() <= 30, "{} timeline rows", rows.len());
    let group = *rows
        .iter()
        .find(|&&r| dom.has_class(r, "group"))
        .expect("the rest of the fork is grouped");
    let grouped = number(&dom, group, "data-lanes") as usize;
    assert_eq!(
        rows.len() - 2 + grouped,
        5_000,
        "every branch is drawn or grouped"
    );
    assert!(
        dom.text(group).contains("more branches"),
        "{}",
        dom.text(group)
    );
    // Selecting a grouped branch (here, by the address) opens its group and draws it.
    let deep = TraceId::from(RUN_ID).child(4_321);
    let opened = load(&chromium, &page, &format!("lane={deep}"));
    let lanes = opened.by_id("lanes").expect("the page has lanes");
    assert_eq!(number(&opened, lanes, "data-rows"), 5_001.0);
    let drawn = drawn_lanes(&opened);
    assert!(drawn.len() < 200, "{} lanes in the DOM", drawn.len());
    assert!(opened.has_class(drawn[deep.as_str()], "selected"));
}

#[test]
fn browser_shows_a_small_image_as_a_thumbnail_and_a_large_one_by_its_hash() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let trace = traces::with_images();
    let page = write_page("images.html", &trace, "images");
    // The page holds the small image's bytes and not the large one's.
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(traces::PIXEL_PNG));
    assert!(html.len() < 100_000, "{} bytes", html.len());
    let start = trace
        .events
        .iter()
        .position(|e| matches!(e.event.kind, EventKind::InferStart(_)))
        .expect("a model call");
    let dom = load(&chromium, &page, &format!("event={start}"));
    let details = dom.by_id("details").expect("a details pane");
    let figures = dom.descendants_with_class(details, "attachment");
    assert_eq!(figures.len(), 2, "{}", dom.text(details));
    let thumbs = dom.descendants_with_class(details, "thumb");
    assert_eq!(thumbs.len(), 1, "only the small image has its bytes");
    assert!(
        dom.attr(thumbs[0], "src")
            .unwrap()
            .starts_with("data:image/png;base64,iVBOR")
    );
    let large = dom.text(figures[1]);
    assert!(
        large.contains("image/jpeg") && large.contains("97.7 KB"),
        "{large}"
    );
    assert!(large.contains("keeps its hash"), "{large}");
}

/// Real input events over the timeline (through the DevTools protocol): the wheel zooms in
/// around the pointer, a drag pans without selecting what it ends over, a double click shows
/// the whole run again.
#[test]
fn browser_zooms_with_the_wheel_and_pans_with_a_drag() {
    let Some(chromium) = chromium_or_skip() else {
        return;
    };
    let page = write_page(
        "drive.html",
        &traces::par_and_race(100),
        "survey of 100 cities",
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/drive.mjs");
    let Some(out) = chromium.drive(&script, &page).expect("the driver runs") else {
        eprintln!("SKIPPED: driving the viewer needs node");
        return;
    };
    let out: Value = serde_json::from_str(out.trim()).expect("the driver prints JSON");
    let range = |key: &str| -> (f64, f64) {
        (
            out[key][0].as_f64().unwrap_or_else(|| panic!("{out}")),
            out[key][1].as_f64().unwrap_or_else(|| panic!("{out}")),
        )
    };
    let (from, to) = range("before");
    assert_eq!(from, 0.0, "{out}");
    let (axis, track) = (&out["widths"][0], &out["widths"][1]);
    for k in 0..2 {
        let (a, t) = (axis[k].as_f64().unwrap(), track[k].as_f64().unwrap());
        assert!(
            (a - t).abs() <= 1.0,
            "the axis lines up with the lanes: {out}"
        );
    }
    let (zf, zt) = range("zoomed");
    assert!(zt - zf < (to - from) * 0.7, "the wheel zoomed in: {out}");
    // Around the pointer, a quarter of the way in: that moment stays a quarter of the way.
    let anchor = from + (to - from) / 4.0;
    let at = (anchor - zf) / (zt - zf);
    assert!(
        (at - 0.25).abs() < 0.05,
        "zoomed around the pointer: {at} ({out})"
    );
    let (pf, pt) = range("panned");
    assert!(pf < zf, "dragging right shows earlier times: {out}");
    assert!(
        ((pt - pf) - (zt - zf)).abs() <= 2.0,
        "a pan keeps the width: {out}"
    );
    let hash = out["hashAfterDrag"].as_str().unwrap_or_default();
    assert!(
        hash.contains("zoom="),
        "the range is in the address: {hash}"
    );
    assert!(!hash.contains("lane="), "the drag selected nothing: {hash}");
    assert_eq!(
        range("reset"),
        (from, to),
        "a double click shows the whole run"
    );
}
