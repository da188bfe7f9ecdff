//! `viewer.render_100k`: milliseconds from navigation start to the viewer's first complete
//! render (the page's own `data-render-ms`) of a 100,000-event trace in headless Chromium.
//! Baseline: the same for a 10-event trace, in the same run. Target: under 2,000 ms.

#[path = "../tests/support/chromium.rs"]
mod chromium;
#[path = "../tests/support/dom.rs"]
mod dom;
#[path = "../tests/support/traces.rs"]
mod traces;

use std::path::Path;

use agent_cli::viewer::render;

const NAME: &str = "viewer.render_100k";
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
    if !bench_kit::enabled(NAME) {
        return;
    }
    let chromium = match chromium::find_or_install() {
        Ok(chromium) => chromium,
        Err(reason) => {
            eprintln!("{NAME}: not measured, chromium is unavailable ({reason})");
            return;
        }
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    let large = traces::large(100_000);
    let tiny = traces::tiny();
    let large_page = dir.path().join("large.html");
    let tiny_page = dir.path().join("tiny.html");
    let html = render(&large, "100,000 events");
    eprintln!(
        "{NAME}: {} events, page of {:.1} MB; baseline {} events",
        large.events.len(),
        html.len() as f64 / 1e6,
        tiny.events.len()
    );
    std::fs::write(&large_page, html).expect("the page can be written");
    std::fs::write(&tiny_page, render(&tiny, "10 events")).expect("the page can be written");
    // Page loads alternate so both see the same machine; the first of each warms the caches.
    // A cold first load of the large page can outlast Chromium's virtual-time budget, so the
    // warm-up gets one more try; measured loads get none.
    let warm = |page: &Path| render_ms(&chromium, page).or_else(|_| render_ms(&chromium, page));
    let measured = warm(&large_page)
        .and_then(|_| warm(&tiny_page))
        .and_then(|_| {
            let mut large_ms = Vec::new();
            let mut tiny_ms = Vec::new();
            for _ in 0..RUNS {
                large_ms.push(render_ms(&chromium, &large_page)?);
                tiny_ms.push(render_ms(&chromium, &tiny_page)?);
            }
            Ok((
                bench_kit::stats(&large_ms).median,
                bench_kit::stats(&tiny_ms).median,
            ))
        });
    match measured {
        Ok((value, baseline)) => bench_kit::report(NAME, value, "ms", baseline),
        Err(problem) => eprintln!("{NAME}: not measured: {problem}"),
    }
}
