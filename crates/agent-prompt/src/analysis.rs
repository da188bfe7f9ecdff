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

#[cfg(test)]
mod tests {
    use agent_op::BoxFuture;
    use chrono::DateTime;

    use super::*;
    use crate::{PromptMeta, TokenBudget};

    /// Counts words by their length into 8 buckets: unnormalised, so more text is a longer
    /// vector, and texts made of the same kinds of words point the same way.
    struct Bag;

    impl EmbeddingProvider for Bag {
        fn model(&self) -> &str {
            "bag"
        }

        fn dimensions(&self) -> usize {
            8
        }

        fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
            let mut v = vec![0.0; 8];
            for word in text.split_whitespace() {
                v[word.len() % 8] += 1.0;
            }
            Box::pin(std::future::ready(Ok(v)))
        }
    }

    /// Fails every call: proves a result needed no embedding.
    struct Down;

    impl EmbeddingProvider for Down {
        fn model(&self) -> &str {
            "down"
        }

        fn dimensions(&self) -> usize {
            8
        }

        fn embed<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
            Box::pin(std::future::ready(Err(EmbeddingError::Other(
                "down".into(),
            ))))
        }
    }

    fn ir(sections: &[(&str, &str)], observation: &str) -> PromptIr {
        let at = DateTime::from_timestamp(1_760_000_000, 0).expect("a valid time");
        let mut ir = PromptIr::new(observation, PromptMeta::new(TokenBudget::new(1_000), at));
        for (id, text) in sections {
            ir = ir.section(Section::text(*id, "", *text));
        }
        ir
    }

    #[tokio::test]
    async fn impact_is_the_embeddings_magnitude() {
        let mut own = Section::text("a", "", "ignored");
        own.embedding = Some(vec![3.0, 4.0]);
        assert_eq!(estimate_impact(&own, &Down).await.unwrap(), 5.0);

        let short = Section::text("s", "", "one two");
        let long = Section::text("l", "", "one two three four five six seven eight");
        let (short, long) = (
            estimate_impact(&short, &Bag).await.unwrap(),
            estimate_impact(&long, &Bag).await.unwrap(),
        );
        assert!(long > short, "{long} > {short}");
        assert!(
            estimate_impact(&Section::text("x", "", "y"), &Down)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn equivalence_is_a_cosine_threshold() {
        let a = ir(&[("rules", "answer briefly and politely")], "what now?");
        // The same text needs no embedding at all.
        assert!(equivalent(0.99, &a, &a.clone(), &Down).await.unwrap());
        // Reworded with words of the same lengths: alike at 0.9.
        let b = ir(&[("rules", "answer quickly and politely")], "what now?");
        assert!(equivalent(0.9, &a, &b, &Bag).await.unwrap());
        // Other kinds of words: not alike at 0.9, though alike at a threshold of 0.
        let c = ir(&[("rules", "a b c d e f g")], "x");
        assert!(!equivalent(0.9, &a, &c, &Bag).await.unwrap());
        assert!(equivalent(0.0, &a, &c, &Bag).await.unwrap());
        // An embedder failure is the caller's error, not a guess.
        assert!(equivalent(0.9, &a, &b, &Down).await.is_err());
    }
}
