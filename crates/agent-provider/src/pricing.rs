//! [`Pricing`]: what each model costs per token, in exact integer micro-dollars.
//!
//! Clients use a pricing table to fill [`Response::cost`](agent_op::Response::cost) and to answer
//! [`Provider::max_cost`](agent_op::Provider::max_cost). A model the table does not know has no
//! cost (`None`), never a guessed zero.

use std::collections::BTreeMap;

use agent_op::{MicroUsd, Prompt, Usage};
use serde::{Deserialize, Serialize};

/// Tokens a chat template may add per message (role markers, separators), beyond its text.
const MESSAGE_OVERHEAD_TOKENS: u64 = 8;
/// Tokens a template may add per tool definition, beyond its name, description and schema.
const TOOL_OVERHEAD_TOKENS: u64 = 32;
/// Tokens a template may add once per prompt (reply priming).
const PROMPT_OVERHEAD_TOKENS: u64 = 16;

/// The price of one model, per million tokens.
///
/// ```
/// use agent_op::{MicroUsd, Usage};
/// use agent_provider::ModelPrice;
///
/// // $2.50 per million input tokens, $10 per million output tokens.
/// let price = ModelPrice::per_million(MicroUsd(2_500_000), MicroUsd(10_000_000));
/// let usage = Usage { input_tokens: 1_000, output_tokens: 200 };
/// assert_eq!(price.cost(usage), MicroUsd(4_500)); // $0.0025 + $0.002
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelPrice {
    /// Price of one million input (prompt) tokens.
    pub input_per_million: MicroUsd,
    /// Price of one million output (completion) tokens.
    pub output_per_million: MicroUsd,
}

impl ModelPrice {
    /// A price from the cost of a million input tokens and of a million output tokens.
    pub const fn per_million(input: MicroUsd, output: MicroUsd) -> ModelPrice {
        ModelPrice {
            input_per_million: input,
            output_per_million: output,
        }
    }

    /// What `usage` costs, rounded up to the next micro-dollar so sums never undercount.
    pub fn cost(&self, usage: Usage) -> MicroUsd {
        // Each product fits in a u128; only their sum can overflow.
        let micro_millionths = (u128::from(usage.input_tokens)
            * u128::from(self.input_per_million.0))
        .saturating_add(u128::from(usage.output_tokens) * u128::from(self.output_per_million.0));
        let micros = micro_millionths.div_ceil(1_000_000);
        MicroUsd(u64::try_from(micros).unwrap_or(u64::MAX))
    }
}

/// A table of model prices that users can extend or replace.
///
/// Lookups try the exact model name, then the name without a trailing snapshot date
/// (`gpt-4o-2024-08-06` is priced as `gpt-4o`).
///
/// ```
/// use agent_op::{MicroUsd, Usage};
/// use agent_provider::{ModelPrice, Pricing};
///
/// let pricing = Pricing::openai()
///     .with("my-finetune", ModelPrice::per_million(MicroUsd(3_000_000), MicroUsd(12_000_000)));
/// let usage = Usage { input_tokens: 1_000_000, output_tokens: 0 };
/// assert_eq!(pricing.cost("my-finetune", usage), Some(MicroUsd(3_000_000)));
/// assert_eq!(pricing.cost("gpt-4o-mini-2024-07-18", usage), Some(MicroUsd(150_000)));
/// assert_eq!(pricing.cost("some-local-model", usage), None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pricing {
    models: BTreeMap<String, ModelPrice>,
}

impl Pricing {
    /// An empty table: every cost is unknown.
    pub fn new() -> Pricing {
        Pricing::default()
    }

    /// OpenAI's list prices for its common chat and embedding models (standard tier, per
    /// million tokens, as published in 2025–2026). Prices change: check them, and override or
    /// extend the table with [`Pricing::with`] when they do.
    pub fn openai() -> Pricing {
        const TABLE: &[(&str, u64, u64)] = &[
            ("gpt-5", 1_250_000, 10_000_000),
            ("gpt-5-mini", 250_000, 2_000_000),
            ("gpt-5-nano", 50_000, 400_000),
            ("gpt-4.1", 2_000_000, 8_000_000),
            ("gpt-4.1-mini", 400_000, 1_600_000),
            ("gpt-4.1-nano", 100_000, 400_000),
            ("gpt-4o", 2_500_000, 10_000_000),
            ("gpt-4o-mini", 150_000, 600_000),
            ("o3", 2_000_000, 8_000_000),
            ("o4-mini", 1_100_000, 4_400_000),
            ("text-embedding-3-small", 20_000, 0),
            ("text-embedding-3-large", 130_000, 0),
        ];
        TABLE
            .iter()
            .fold(Pricing::new(), |pricing, &(model, input, output)| {
                pricing.with(
                    model,
                    ModelPrice::per_million(MicroUsd(input), MicroUsd(output)),
                )
            })
    }

    /// The table with `model` priced at `price` (replacing any earlier price).
    pub fn with(mut self, model: impl Into<String>, price: ModelPrice) -> Pricing {
        self.insert(model, price);
        self
    }

    /// Prices `model` at `price`, replacing any earlier price.
    pub fn insert(&mut self, model: impl Into<String>, price: ModelPrice) {
        self.models.insert(model.into(), price);
    }

    /// Adds every price of `other`, replacing prices of the same models.
    pub fn extend(&mut self, other: Pricing) {
        self.models.extend(other.models);
    }

    /// The price of `model`, if known.
    pub fn get(&self, model: &str) -> Option<ModelPrice> {
        self.models
            .get(model)
            .or_else(|| self.models.get(without_snapshot_date(model)?))
            .copied()
    }

    /// What `usage` of `model` costs, if the model's price is known.
    pub fn cost(&self, model: &str, usage: Usage) -> Option<MicroUsd> {
        self.get(model).map(|price| price.cost(usage))
    }

    /// The most a call of `model` with `prompt` can cost: its input bounded by the prompt's
    /// size in bytes plus template overhead, its output by `max_tokens`. `None` when the price
    /// is unknown or the prompt sets no `max_tokens` (the output is then unbounded).
    pub fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        let price = self.get(model)?;
        let max_output = u64::from(prompt.options.max_tokens?);
        let overhead = PROMPT_OVERHEAD_TOKENS
            + MESSAGE_OVERHEAD_TOKENS * prompt.messages.len() as u64
            + TOOL_OVERHEAD_TOKENS * prompt.tools.len() as u64;
        let usage = Usage {
            input_tokens: prompt.text_bytes().saturating_add(overhead),
            output_tokens: max_output,
        };
        Some(price.cost(usage))
    }

    /// The priced model names, sorted.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }
}

/// `gpt-4o-2024-08-06` → `gpt-4o`; names without a `-YYYY-MM-DD` suffix → `None`.
fn without_snapshot_date(model: &str) -> Option<&str> {
    let (base, date) = model.split_at_checked(model.len().checked_sub(11)?)?;
    let date = date.strip_prefix('-')?;
    let shape_ok = date.len() == 10
        && date.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    shape_ok.then_some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_round_up_and_never_overflow() {
        let price = ModelPrice::per_million(MicroUsd(150_000), MicroUsd(600_000));
        // 1 token at $0.15/M is 0.15 micro-dollars: rounds up to 1.
        assert_eq!(
            price.cost(Usage {
                input_tokens: 1,
                output_tokens: 0
            }),
            MicroUsd(1)
        );
        assert_eq!(price.cost(Usage::default()), MicroUsd(0));
        let huge = ModelPrice::per_million(MicroUsd(u64::MAX), MicroUsd(u64::MAX));
        assert_eq!(
            huge.cost(Usage {
                input_tokens: u64::MAX,
                output_tokens: u64::MAX
            }),
            MicroUsd(u64::MAX)
        );
    }

    #[test]
    fn snapshot_dates() {
        assert_eq!(without_snapshot_date("gpt-4o-2024-08-06"), Some("gpt-4o"));
        assert_eq!(
            without_snapshot_date("gpt-4o-mini-2024-07-18"),
            Some("gpt-4o-mini")
        );
        assert_eq!(without_snapshot_date("gpt-4o"), None);
        assert_eq!(without_snapshot_date("model-2024-0806x"), None);
        assert_eq!(without_snapshot_date("é-2024-08-06"), Some("é"));
        assert_eq!(without_snapshot_date("ééééééé"), None);
    }

    #[test]
    fn max_cost_needs_a_price_and_max_tokens() {
        let pricing = Pricing::new().with(
            "m",
            ModelPrice::per_million(MicroUsd(1_000_000), MicroUsd(2_000_000)),
        );
        let prompt = Prompt::new().user("0123456789");
        assert_eq!(pricing.max_cost("m", &prompt), None);
        let prompt = prompt.max_tokens(100);
        // input ≤ 10 bytes + 16 + 8 overhead tokens at $1/M, output ≤ 100 tokens at $2/M.
        assert_eq!(pricing.max_cost("m", &prompt), Some(MicroUsd(34 + 200)));
        assert_eq!(pricing.max_cost("other", &prompt), None);
    }

    #[test]
    fn tables_extend_and_replace() {
        let mut pricing = Pricing::openai();
        let custom = ModelPrice::per_million(MicroUsd(1), MicroUsd(2));
        pricing.extend(Pricing::new().with("gpt-4o", custom));
        assert_eq!(pricing.get("gpt-4o"), Some(custom));
        assert!(pricing.models().any(|m| m == "gpt-4o-mini"));
    }
}
