//! Per-key limits: concurrent runs and runs per minute, checked when a run starts; tokens
//! and cost per day, enforced inside each run by the runtime's own budget (`op::limit`), so
//! a run cannot spend past what its key has left.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use agent_op::{Budget, MicroUsd};
use chrono::{DateTime, Utc};

use super::record::Spent;

/// What one API key may do. `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Limits {
    /// Runs going at once.
    pub concurrent_runs: Option<u32>,
    /// Runs started in any 60 seconds.
    pub runs_per_minute: Option<u32>,
    /// Tokens (input and output) its runs spend per UTC day.
    pub tokens_per_day: Option<u64>,
    /// Dollars its runs spend per UTC day (known costs).
    pub cost_per_day_usd: Option<f64>,
}

impl Limits {
    /// No limits.
    pub fn none() -> Limits {
        Limits::default()
    }

    /// At most `n` runs at once.
    pub fn concurrent_runs(mut self, n: u32) -> Limits {
        self.concurrent_runs = Some(n);
        self
    }

    /// At most `n` runs started per minute.
    pub fn runs_per_minute(mut self, n: u32) -> Limits {
        self.runs_per_minute = Some(n);
        self
    }

    /// At most `n` tokens per day.
    pub fn tokens_per_day(mut self, n: u64) -> Limits {
        self.tokens_per_day = Some(n);
        self
    }

    /// At most `usd` dollars per day.
    pub fn cost_per_day_usd(mut self, usd: f64) -> Limits {
        self.cost_per_day_usd = Some(usd);
        self
    }

    /// Parses `concurrent=4 per_minute=60 tokens_per_day=100000 cost_per_day=5.0` (any of
    /// them, in any order); `Err` names the word it does not understand.
    pub fn parse<'a>(words: impl Iterator<Item = &'a str>) -> Result<Limits, String> {
        let mut limits = Limits::default();
        for word in words {
            let bad = || {
                format!(
                    "`{word}` (expected concurrent=N, per_minute=N, tokens_per_day=N or cost_per_day=USD)"
                )
            };
            let (key, value) = word.split_once('=').ok_or_else(bad)?;
            match key {
                "concurrent" => limits.concurrent_runs = Some(value.parse().map_err(|_| bad())?),
                "per_minute" => limits.runs_per_minute = Some(value.parse().map_err(|_| bad())?),
                "tokens_per_day" => {
                    limits.tokens_per_day = Some(value.parse().map_err(|_| bad())?);
                }
                "cost_per_day" => {
                    let usd: f64 = value.parse().map_err(|_| bad())?;
                    if !(usd.is_finite() && usd >= 0.0) {
                        return Err(bad());
                    }
                    limits.cost_per_day_usd = Some(usd);
                }
                _ => return Err(bad()),
            }
        }
        Ok(limits)
    }
}

/// A run refused by its key's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) what: String,
    pub(crate) retry_after: u64,
}

/// What each key has used.
#[derive(Default)]
struct Usage {
    running: u32,
    started: VecDeque<Instant>,
    day: Option<chrono::NaiveDate>,
    tokens: u64,
    cost: u64,
}

/// The keys' limits and what they have used.
#[derive(Default)]
pub(crate) struct Limiter {
    limits: HashMap<String, Limits>,
    usage: Mutex<HashMap<String, Usage>>,
}

/// A run's claim on its key's allowance: its budget, released when the run ends.
pub(crate) struct Claim {
    pub(crate) key: String,
    pub(crate) budget: Option<Budget>,
}

impl Limiter {
    pub(crate) fn new(limits: HashMap<String, Limits>) -> Limiter {
        Limiter {
            limits,
            usage: Mutex::default(),
        }
    }

    /// Counts the spend of runs a previous server recorded today (so a restart does not
    /// reset the day).
    pub(crate) fn seed(&self, key: &str, spent: Spent, at: DateTime<Utc>) {
        let mut usage = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
        let usage = usage.entry(key.to_owned()).or_default();
        roll(usage, Utc::now());
        if Some(at.date_naive()) == usage.day {
            usage.tokens = usage
                .tokens
                .saturating_add(spent.input_tokens.saturating_add(spent.output_tokens));
            usage.cost = usage.cost.saturating_add(spent.cost_micro_usd);
        }
    }

    /// Takes a run's place under `key`'s limits, or says which limit refuses it and when to
    /// try again.
    pub(crate) fn claim(&self, key: &str) -> Result<Option<Claim>, Refused> {
        let Some(limits) = self.limits.get(key) else {
            return Ok(None);
        };
        let now = Instant::now();
        let mut usage = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
        let usage = usage.entry(key.to_owned()).or_default();
        roll(usage, Utc::now());
        while usage
            .started
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            usage.started.pop_front();
        }
        if let Some(n) = limits.concurrent_runs {
            if usage.running >= n {
                return Err(Refused {
                    what: format!("this key may run {n} runs at once"),
                    retry_after: 1,
                });
            }
        }
        if let Some(n) = limits.runs_per_minute {
            if usage.started.len() >= n as usize {
                let oldest = usage.started.front().copied().unwrap_or(now);
                let wait = Duration::from_secs(60).saturating_sub(now.duration_since(oldest));
                return Err(Refused {
                    what: format!("this key may start {n} runs per minute"),
                    retry_after: wait.as_secs().max(1),
                });
            }
        }
        let mut budget = Budget::new();
        let mut limited = false;
        let until_tomorrow = seconds_to_midnight();
        if let Some(n) = limits.tokens_per_day {
            let left = n.saturating_sub(usage.tokens);
            if left == 0 {
                return Err(Refused {
                    what: format!("this key's {n} tokens for today are spent"),
                    retry_after: until_tomorrow,
                });
            }
            budget = budget.tokens(left);
            limited = true;
        }
        if let Some(usd) = limits.cost_per_day_usd {
            let allowed = (usd * 1e6) as u64;
            let left = allowed.saturating_sub(usage.cost);
            if left == 0 {
                return Err(Refused {
                    what: format!("this key's ${usd} for today is spent"),
                    retry_after: until_tomorrow,
                });
            }
            budget = budget.cost(MicroUsd(left));
            limited = true;
        }
        usage.running += 1;
        usage.started.push_back(now);
        Ok(Some(Claim {
            key: key.to_owned(),
            budget: limited.then_some(budget),
        }))
    }

    /// Gives back a run's place and counts what it spent.
    pub(crate) fn release(&self, claim: &Claim, spent: Spent) {
        let mut usage = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
        let usage = usage.entry(claim.key.clone()).or_default();
        usage.running = usage.running.saturating_sub(1);
        roll(usage, Utc::now());
        usage.tokens = usage
            .tokens
            .saturating_add(spent.input_tokens.saturating_add(spent.output_tokens));
        usage.cost = usage.cost.saturating_add(spent.cost_micro_usd);
    }
}

/// Starts a new day's counts when the UTC day changed.
fn roll(usage: &mut Usage, now: DateTime<Utc>) {
    let today = now.date_naive();
    if usage.day != Some(today) {
        usage.day = Some(today);
        usage.tokens = 0;
        usage.cost = 0;
    }
}

fn seconds_to_midnight() -> u64 {
    let now = Utc::now();
    let tomorrow = (now.date_naive() + chrono::Days::new(1))
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc());
    tomorrow.map_or(3600, |t| (t - now).num_seconds().max(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_and_rate_refuse_with_a_wait_and_a_release_frees_a_place() {
        let limiter = Limiter::new(HashMap::from([(
            "k".to_owned(),
            Limits::none().concurrent_runs(1).runs_per_minute(2),
        )]));
        let first = limiter.claim("k").unwrap().unwrap();
        let refused = limiter.claim("k").err().unwrap();
        assert_eq!(refused.retry_after, 1);
        limiter.release(&first, Spent::default());
        let second = limiter.claim("k").unwrap().unwrap();
        limiter.release(&second, Spent::default());
        let refused = limiter.claim("k").err().unwrap();
        assert!(refused.what.contains("per minute"), "{refused:?}");
        assert!(refused.retry_after >= 1 && refused.retry_after <= 60);
        assert!(limiter.claim("unlimited").unwrap().is_none());
    }

    #[test]
    fn a_day_of_tokens_is_a_budget_then_a_refusal() {
        let limiter = Limiter::new(HashMap::from([(
            "k".to_owned(),
            Limits::none().tokens_per_day(100),
        )]));
        let claim = limiter.claim("k").unwrap().unwrap();
        assert!(claim.budget.is_some());
        limiter.release(
            &claim,
            Spent {
                input_tokens: 80,
                output_tokens: 20,
                ..Spent::default()
            },
        );
        let refused = limiter.claim("k").err().unwrap();
        assert!(refused.what.contains("tokens"), "{refused:?}");
        assert!(refused.retry_after >= 1);
    }

    #[test]
    fn limits_parse_from_words_and_name_a_bad_one() {
        let limits = Limits::parse(
            "concurrent=2 per_minute=30 tokens_per_day=1000 cost_per_day=1.5".split(' '),
        )
        .unwrap();
        assert_eq!(limits.concurrent_runs, Some(2));
        assert_eq!(limits.cost_per_day_usd, Some(1.5));
        assert!(
            Limits::parse(["speed=9"].into_iter())
                .unwrap_err()
                .contains("speed=9")
        );
        assert!(Limits::parse(["cost_per_day=-1"].into_iter()).is_err());
    }
}
