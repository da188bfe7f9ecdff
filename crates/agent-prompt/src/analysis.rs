//! Heuristics over embeddings, from the design note: [`estimate_impact`] and
//! [`equivalent`]. They are proxies, not measurements: use them to sort or to flag, not to
//! decide correctness.

use agent_op::{EmbeddingError, EmbeddingProvider};

use crate::ir::PromptIr;
use crate::render;
use crate::section::{Section, SectionContent};

/// An estimate of how much information `section` carries: the magnitude of its embedding
/// (its own [`Section::embedding`] when it has one, else `embedder`'s of its content).
///
/// A heuristic, as the note proposes: for embedders that normalise their vectors (most do)
/// every section scores about 1, so it only separates sections under embedders that do not.
pub async fn estimate_impact(
    section: &Section,
    embedder: &dyn EmbeddingProvider,
) -> Result<f32, EmbeddingError> {
    let vector = match &section.embedding {
        Some(v) => v.clone(),
        None => embedder.embed(&section_text(section)).await?,
    };
    Ok(vector.iter().map(|x| x * x).sum::<f32>().sqrt())
}

/// Whether `a` and `b` are likely to make a model behave the same: the cosine similarity of
/// `embedder`'s embeddings of their text (sections in order, then the observation) is at
/// least `threshold`.
///
/// A heuristic: two prompts that embed alike can still differ in a detail that matters (a
/// negation, a number).
pub async fn equivalent(
    threshold: f32,
    a: &PromptIr,
    b: &PromptIr,
    embedder: &dyn EmbeddingProvider,
) -> Result<bool, EmbeddingError> {
    let (x, y) = (ir_text(a), ir_text(b));
    if x == y {
        return Ok(true);
    }
    let x = embedder.embed(&x).await?;
    let y = embedder.embed(&y).await?;
    Ok(cosine(&x, &y) >= threshold)
}

fn section_text(section: &Section) -> String {
    match &section.content {
        SectionContent::Text(text) => render::text_section(&section.label, text),
        SectionContent::Messages(messages) => messages
            .iter()
            .map(|m| m.content())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn ir_text(ir: &PromptIr) -> String {
    let mut text: String = ir.sections.iter().map(section_text).collect();
    text.push_str(&ir.observation);
    text
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let denominator = norm(a) * norm(b);
    if denominator == 0.0 || !denominator.is_finite() {
        0.0
    } else {
        dot / denominator
    }
}
