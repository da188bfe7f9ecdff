//! [`Pricing`]: what each model costs per token, in exact integer micro-dollars.
//!
//! Clients use a pricing table to fill [`Response::cost`](agent_op::Response::cost) and to answer
//! [`Provider::max_cost`](agent_op::Provider::max_cost). A model the table does not know has no
//! cost (`None`), never a guessed zero or a neighbour's price.

use std::collections::BTreeMap;

use agent_op::{MicroUsd, Prompt, Usage};
use serde::{Deserialize, Serialize};

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
/// Lookups are by exact model name. A dated snapshot is not priced as its base model (a
/// snapshot can cost more or less: `gpt-4o-2024-05-13` lists at $5/$15 per million tokens,
/// `gpt-4o` at $2.50/$10); it is priced only if the table lists it, as [`Pricing::openai`]
/// does for the snapshots it knows. An unknown name has no price, never a guessed one.
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

    /// OpenAI's list prices for its common chat and embedding models and their dated
    /// snapshots (standard tier, per million tokens, as published in 2025–2026). Prices
    /// change: check them, and override or extend the table with [`Pricing::with`] when they
    /// do. A snapshot not listed here (a newer one, say) has no price until added.
    pub fn openai() -> Pricing {
        const TABLE: &[(&str, u64, u64)] = &[
            ("gpt-5", 1_250_000, 10_000_000),
            ("gpt-5-2025-08-07", 1_250_000, 10_000_000),
            ("gpt-5-mini", 250_000, 2_000_000),
            ("gpt-5-mini-2025-08-07", 250_000, 2_000_000),
            ("gpt-5-nano", 50_000, 400_000),
            ("gpt-5-nano-2025-08-07", 50_000, 400_000),
            ("gpt-4.1", 2_000_000, 8_000_000),
            ("gpt-4.1-2025-04-14", 2_000_000, 8_000_000),
            ("gpt-4.1-mini", 400_000, 1_600_000),
            ("gpt-4.1-mini-2025-04-14", 400_000, 1_600_000),
            ("gpt-4.1-nano", 100_000, 400_000),
            ("gpt-4.1-nano-2025-04-14", 100_000, 400_000),
            ("gpt-4o", 2_500_000, 10_000_000),
            ("gpt-4o-2024-11-20", 2_500_000, 10_000_000),
            ("gpt-4o-2024-08-06", 2_500_000, 10_000_000),
            // The first gpt-4o snapshot kept its launch price.
            ("gpt-4o-2024-05-13", 5_000_000, 15_000_000),
            ("gpt-4o-mini", 150_000, 600_000),
            ("gpt-4o-mini-2024-07-18", 150_000, 600_000),
            ("o3", 2_000_000, 8_000_000),
            ("o3-2025-04-16", 2_000_000, 8_000_000),
            ("o4-mini", 1_100_000, 4_400_000),
            ("o4-mini-2025-04-16", 1_100_000, 4_400_000),
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

    /// The price of `model` (by exact name), if known.
    pub fn get(&self, model: &str) -> Option<ModelPrice> {
        self.models.get(model).copied()
    }

    /// What `usage` of `model` costs, if the model's price is known.
    pub fn cost(&self, model: &str, usage: Usage) -> Option<MicroUsd> {
        self.get(model).map(|price| price.cost(usage))
    }

    /// The most a call of `model` with `prompt` can cost: its input bounded by the size in
    /// bytes of the whole prompt as JSON (every message with its tool calls, ids and tool
    /// call ids, every tool with its schema, and the options, `response_format`'s schema
    /// included: a token covers at least one byte) plus template overhead, its output by
    /// `max_tokens`. `None` when the price is unknown or the prompt sets no `max_tokens` (the
    /// output is then unbounded).
    pub fn max_cost(&self, model: &str, prompt: &Prompt) -> Option<MicroUsd> {
        let price = self.get(model)?;
        let max_output = u64::from(prompt.options.max_tokens?);
        let usage = Usage {
            input_tokens: prompt.max_input_tokens(),
            output_tokens: max_output,
        };
        Some(price.cost(usage))
    }

    /// The priced model names, sorted.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }
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
    fn snapshots_are_priced_only_when_listed() {
        let pricing = Pricing::openai();
        let per_million =
            |input, output| Some(ModelPrice::per_million(MicroUsd(input), MicroUsd(output)));
        assert_eq!(pricing.get("gpt-4o"), per_million(2_500_000, 10_000_000));
        assert_eq!(
            pricing.get("gpt-4o-2024-05-13"),
            per_million(5_000_000, 15_000_000),
            "the first gpt-4o snapshot costs more than gpt-4o"
        );
        assert_eq!(
            pricing.get("gpt-4o-2024-08-06"),
            per_million(2_500_000, 10_000_000)
        );
        assert_eq!(
            pricing.get("gpt-4o-mini-2024-07-18"),
            per_million(150_000, 600_000)
        );
        // An unlisted snapshot has no price, not its base model's.
        assert_eq!(pricing.get("gpt-4o-2099-01-01"), None);
        let mine = Pricing::new().with("m", ModelPrice::per_million(MicroUsd(1), MicroUsd(1)));
        assert_eq!(mine.get("m-2024-08-06"), None);
        // Every dated entry is a snapshot of a listed base model.
        for model in pricing.models() {
            if let Some((base, _)) = model.split_once("-20") {
                assert!(pricing.get(base).is_some(), "{model}");
            }
        }
    }

    #[test]
    fn max_cost_counts_every_byte_of_the_prompt() {
        use agent_op::{Message, ResponseFormat, ToolCall};
        use serde_json::json;
        let pricing = Pricing::new().with(
            "m",
            ModelPrice::per_million(MicroUsd(1_000_000), MicroUsd(0)),
        );
        // A large response schema: sent to the model, so it counts.
        let properties: serde_json::Map<String, serde_json::Value> = (0..2000)
            .map(|i| {
                (
                    format!("field_{i}"),
                    json!({"type": "string", "description": "a field of the answer"}),
                )
            })
            .collect();
        let schema = json!({"type": "object", "properties": properties});
        let schema_bytes = schema.to_string().len() as u64;
        assert!(schema_bytes > 100_000);
        let prompt =
            Prompt::new()
                .user("hi")
                .max_tokens(1)
                .response_format(ResponseFormat::JsonSchema {
                    name: "answer".into(),
                    schema,
                    strict: true,
                });
        let bound = pricing.max_cost("m", &prompt).unwrap();
        assert!(bound.0 >= schema_bytes, "{bound:?} < {schema_bytes}");
        // Tool-call ids and the ids of tool results count too.
        let long_id = "call_".to_owned() + &"x".repeat(10_000);
        let prompt = Prompt::from_messages(vec![
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: long_id.clone(),
                    name: "f".into(),
                    arguments: json!({}),
                }],
            },
            Message::tool_result(long_id.clone(), "ok"),
        ])
        .max_tokens(1);
        let bound = pricing.max_cost("m", &prompt).unwrap();
        assert!(bound.0 >= 2 * long_id.len() as u64, "{bound:?}");
        // $1 per million input tokens, output free: the bound is the input estimate itself.
        assert_eq!(bound.0, prompt.max_input_tokens());
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
        // input ≤ the prompt's JSON + 16 + 8 overhead tokens at $1/M, output ≤ 100 tokens at
        // $2/M.
        let json = serde_json::to_string(&prompt).unwrap();
        assert_eq!(json.len(), 82, "{json}");
        assert_eq!(
            pricing.max_cost("m", &prompt),
            Some(MicroUsd(82 + 24 + 200))
        );
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
