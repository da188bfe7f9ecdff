//! Milliseconds from navigation start to the viewer's first complete render (the page's own
//! `data-render-ms`) in headless Chromium:
//!
//! - `viewer.render_100k`: a 100,000-event trace (100 branches);
//! - `viewer.render_5000_branches`: an 11,000-event trace of 5,000 branches in one `par`.
//!
//! Baseline for both: the same for a 10-event trace, in the same run. Target: under 2,000 ms.

#[path = "../tests/support/chromium.rs"]
mod chromium;
#[path = "../tests/support/dom.rs"]
mod dom;
#[path = "../tests/support/traces.rs"]
mod traces;

use std::path::Path;

use agent_cli::viewer::render;

const NAME: &str = "viewer.render_100k";
const WIDE: &str = "viewer.render_5000_branches";
const RUNS: usize = 5;

/// The page's first-render time, as it recorded it.
fn render_ms(chromium: &chromium::Chromium, page: &Path) -> Result<f64, String> {
    let html = chromium.dump_dom(page, "")?;
    let dom = dom::Dom::parse(&html);
    let body = dom
        .elements
        .iter()
        .position(|e| e.name == "body")
        .ok_or("the page has no body")?;
    if dom.attr(body, "data-rendered") != Some("1") {
        return Err(format!(
            "the viewer did not finish rendering: {}",
            dom.by_id("problem")
                .map(|p| dom.text(p))
                .unwrap_or_default()
        ));
    }
    dom.attr(body, "data-render-ms")
        .ok_or("no data-render-ms")?
        .parse()
        .map_err(|e| format!("data-render-ms is not a number: {e}"))
}

fn main() {
    let (large_wanted, wide_wanted) = (bench_kit::enabled(NAME), bench_kit::enabled(WIDE));
    if !large_wanted && !wide_wanted {
        return;
    }
    let chromium = match chromium::find_or_install() {
        Ok(chromium) => chromium,
        Err(reason) => {
            eprintln!("{NAME}, {WIDE}: not measured, chromium is unavailable ({reason})");
            return;
        }
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    let tiny = traces::tiny();
    let tiny_page = dir.path().join("tiny.html");
    std::fs::write(&tiny_page, render(&tiny, "10 events")).expect("the page can be written");
    let mut pages = Vec::new();
    if large_wanted {
        pages.push((NAME, traces::large(100_000), "100,000 events"));
    }
    if wide_wanted {
        pages.push((WIDE, traces::wide(5_000), "5,000 branches"));
    }
    for (name, trace, title) in pages {
        let page = dir.path().join(format!("{name}.html"));
        let html = render(&trace, title);
        eprintln!(
            "{name}: {} events, page of {:.1} MB; baseline {} events",
            trace.events.len(),
            html.len() as f64 / 1e6,
            tiny.events.len()
        );
        std::fs::write(&page, html).expect("the page can be written");
        match measure(&chromium, &page, &tiny_page) {
            Ok((value, baseline)) => bench_kit::report(name, value, "ms", baseline),
            Err(problem) => eprintln!("{name}: not measured: {problem}"),
        }
    }
}

/// The median first-render times of `page` and of `baseline`, loaded alternately.
fn measure(
    chromium: &chromium::Chromium,
    page: &Path,
    baseline: &Path,
) -> Result<(f64, f64), String> {
    // Page loads alternate so both see the same machine; the first of each warms the caches.
    // A cold first load of a large page can outlast Chromium's virtual-time budget, so the
    // warm-up gets one more try; measured loads get none.
    let warm = |page: &Path| render_ms(chromium, page).or_else(|_| render_ms(chromium, page));
    warm(page)?;
    warm(baseline)?;
    let mut page_ms = Vec::new();
    let mut baseline_ms = Vec::new();
    for _ in 0..RUNS {
        page_ms.push(render_ms(chromium, page)?);
        baseline_ms.push(render_ms(chromium, baseline)?);
    }
    Ok((
        bench_kit::stats(&page_ms).median,
        bench_kit::stats(&baseline_ms).median,
    ))
}
