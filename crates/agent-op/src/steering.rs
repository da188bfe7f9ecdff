//! Steering: messages from outside a running program, read with `op::next_steering()`.

use serde::{Deserialize, Serialize};

/// A message sent to a running agent from outside (a user interrupting, an operator
/// redirecting). Programs poll for it with `op::next_steering()`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Steering {
    /// The message.
    pub message: String,
}

impl Steering {
    /// A steering message.
    pub fn new(message: impl Into<String>) -> Steering {
        Steering {
            message: message.into(),
        }
    }
}
