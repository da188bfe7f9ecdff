//! Exact money accounting.
//!
//! Costs are integer micro-dollars so sums are exact; cents are derived only for display.
//! An unknown cost is represented by `Option::None`, never by zero.

use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

/// An amount of money in millionths of a US dollar.
///
/// ```
/// use agent_op::MicroUsd;
/// let c = MicroUsd::from_dollars(0.0025) + MicroUsd(500);
/// assert_eq!(c, MicroUsd(3_000));
/// assert_eq!(c.to_string(), "$0.003000");
/// assert_eq!(c.cents(), 0.3);
/// ```
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct MicroUsd(pub u64);

impl MicroUsd {
    /// Zero dollars.
    pub const ZERO: MicroUsd = MicroUsd(0);

    /// Converts a dollar amount, rounding to the nearest micro-dollar (negative and NaN become
    /// zero). Meant for configuration such as price tables; accounting stays in integers.
    pub fn from_dollars(dollars: f64) -> MicroUsd {
        let micros = (dollars * 1_000_000.0).round();
        if micros.is_nan() || micros <= 0.0 {
            MicroUsd(0)
        } else if micros >= u64::MAX as f64 {
            MicroUsd(u64::MAX)
        } else {
            MicroUsd(micros as u64)
        }
    }

    /// The amount in cents, for display.
    pub fn cents(self) -> f64 {
        self.0 as f64 / 10_000.0
    }

    /// The amount in dollars, for display.
    pub fn dollars(self) -> f64 {
        self.0 as f64 / 1_000_000.0
    }

    /// Adds, saturating at the maximum instead of overflowing.
    pub fn saturating_add(self, other: MicroUsd) -> MicroUsd {
        MicroUsd(self.0.saturating_add(other.0))
    }
}

impl Add for MicroUsd {
    type Output = MicroUsd;
    fn add(self, rhs: MicroUsd) -> MicroUsd {
        self.saturating_add(rhs)
    }
}

impl AddAssign for MicroUsd {
    fn add_assign(&mut self, rhs: MicroUsd) {
        *self = *self + rhs;
    }
}

impl Sum for MicroUsd {
    fn sum<I: Iterator<Item = MicroUsd>>(iter: I) -> MicroUsd {
        iter.fold(MicroUsd::ZERO, Add::add)
    }
}

impl fmt::Display for MicroUsd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}.{:06}", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}
