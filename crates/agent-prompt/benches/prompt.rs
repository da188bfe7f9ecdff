//! What compiling a context costs.
//!
//! - `prompt.compile_200`: µs to compile an IR of 200 text sections (about 60k tokens,
//!   counts cached) into an 8k budget; baseline: a plain sort-and-take over the same sections
//!   (sort by priority then relevance, take while they fit, join the texts).
//! - `prompt.count_tokens`: MB/s of [`TokenCounter::count`] (o200k_base) on 1 MB of mixed
//!   English, code and CJK text; baseline: `bpe_openai` called directly.

use std::time::{Duration, Instant};

use agent_prompt::{
    Priority, PromptIr, PromptMeta, Section, SectionContent, TokenBudget, TokenCounter, compile,
};

const SECTIONS: usize = 200;

fn ir(counter: &TokenCounter) -> PromptIr {
    let now = chrono::DateTime::from_timestamp(1_760_000_000, 0).expect("a valid time");
    let mut ir = PromptIr::new(
        "What did we decide about the architecture?",
        PromptMeta::new(TokenBudget::new(8_192), now),
    );
    let priorities = [Priority::Low, Priority::Medium, Priority::High];
    for i in 0..SECTIONS {
        // About 300 tokens each: varied words, so that tokens are not trivially merged.
        let text: String = (0..240)
            .map(|w| format!("w{}x{} ", (i * 31 + w * 7) % 997, w % 13))
            .collect();
        let mut section = Section::text(format!("s{i}"), format!("## Section {i}"), text)
            .with_priority(priorities[i % 3])
            .with_relevance(((i * 37) % 100) as f32 / 100.0);
        if i % 4 == 0 {
            section = section.with_min_tokens(50);
        }
        ir = ir.section(section);
    }
    ir = ir.section(
        Section::text("rules", "## Rules", "Answer briefly and cite sections.")
            .with_priority(Priority::Critical),
    );
    ir.count(counter);
    ir
}

/// The sort-and-take a hand-written budgeter would do.
fn sort_and_take(ir: &PromptIr, available: u32) -> String {
    let mut order: Vec<usize> = (0..ir.sections.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&ir.sections[a], &ir.sections[b]);
        y.priority.cmp(&x.priority).then(
            y.relevance
                .unwrap_or(1.0)
                .total_cmp(&x.relevance.unwrap_or(1.0)),
        )
    });
    let mut used = 0u32;
    let mut kept = Vec::new();
    for i in order {
        let s = &ir.sections[i];
        if used + s.tokens <= available {
            used += s.tokens;
            kept.push(i);
        }
    }
    kept.sort_unstable();
    let mut out = String::new();
    for i in kept {
        let s = &ir.sections[i];
        if let SectionContent::Text(text) = &s.content {
            out.push_str(&s.label);
            out.push('\n');
            out.push_str(text);
            out.push_str("\n\n");
        }
    }
    out
}

fn per_call(calls: u32, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..calls {
        f();
    }
    start.elapsed() / calls
}

fn compile_200() {
    let counter = TokenCounter::for_model("gpt-4o");
    let ir = ir(&counter);
    let available = ir.meta.budget.available();
    let compiled = compile(&ir, &counter).expect("compiles");
    assert!(compiled.report.tokens_after <= available);
    assert!(
        compiled.report.tokens_before > 50_000,
        "{}",
        compiled.report.tokens_before
    );
    let (subject, baseline) = bench_kit::interleaved(
        15,
        || {
            per_call(50, || {
                std::hint::black_box(compile(&ir, &counter).expect("compiles"));
            })
        },
        || {
            per_call(50, || {
                std::hint::black_box(sort_and_take(&ir, available));
            })
        },
    );
    bench_kit::report(
        "prompt.compile_200",
        bench_kit::median_per(&subject, 1.0, bench_kit::us),
        "µs",
        bench_kit::median_per(&baseline, 1.0, bench_kit::us),
    );
}

/// About 1 MB of English prose, Rust code and Japanese/Chinese text, deterministic.
fn mixed_text() -> String {
    let english = "The agent reads its memory, weighs what it found against the budget, and \
                   answers in one sentence when it can. ";
    let code = "fn main() {\n    let xs: Vec<u32> = (0..10).map(|x| x * 2).collect();\n    \
                println!(\"{xs:?}\");\n}\n";
    let cjk = "エージェントは記憶を読み、予算と照らし合わせて答える。代理人读取记忆并回答。";
    let mut text = String::with_capacity(1 << 20);
    let mut i = 0u32;
    while text.len() < 1 << 20 {
        match i % 3 {
            0 => text.push_str(english),
            1 => text.push_str(code),
            _ => text.push_str(cjk),
        }
        text.push_str(&format!(" {i} "));
        i += 1;
    }
    text
}

fn count_tokens() {
    let text = mixed_text();
    let counter = TokenCounter::for_model("gpt-4o");
    let direct = bpe_openai::o200k_base();
    assert_eq!(counter.count(&text) as usize, direct.count(text.as_str()));
    let (subject, baseline) = bench_kit::interleaved(
        7,
        || bench_kit::time(|| std::hint::black_box(counter.count(&text))).0,
        || bench_kit::time(|| std::hint::black_box(direct.count(text.as_str()))).0,
    );
    let mb = text.len() as f64 / 1e6;
    let rate = |samples: &[Duration]| mb / bench_kit::median_per(samples, 1.0, bench_kit::secs);
    bench_kit::report(
        "prompt.count_tokens",
        rate(&subject),
        "MB/s",
        rate(&baseline),
    );
}

fn main() {
    if bench_kit::enabled("prompt.compile_200") {
        compile_200();
    }
    if bench_kit::enabled("prompt.count_tokens") {
        count_tokens();
    }
}
