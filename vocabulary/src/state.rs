//! Where an intent is in its life (`docs/protocol.md` §7). Executors report these names in
//! events and in `status`, scenarios expect them, the checker judges them and reports colour
//! them; this enum is the one list of them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where an intent is in its life. See `docs/protocol.md` for the transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Durable, not sent.
    Recorded,
    /// Waiting for the intent it replaces to be resolved.
    Blocked,
    /// May have been sent; no answer recorded yet.
    Submitted,
    /// The effect exists, with the authorised parameters.
    Confirmed,
    /// No effect exists and none can appear later.
    Failed,
    /// The outcome cannot be told yet; reconciliation will find out.
    Unknown,
    /// A person must decide; the evidence says what is known.
    Escalated,
}

/// A state name that is not one of [`State::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownState(pub String);

impl fmt::Display for UnknownState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown state \"{}\"; states are: {}", self.0, State::NAMES.join(", "))
    }
}

impl std::error::Error for UnknownState {}

impl State {
    /// Every state, in the order of `docs/protocol.md` §7 (and of the reports' legend).
    pub const ALL: [State; 7] = [
        State::Recorded,
        State::Blocked,
        State::Submitted,
        State::Confirmed,
        State::Failed,
        State::Unknown,
        State::Escalated,
    ];

    /// Every state's name, in [`State::ALL`] order: what `expect` tables and candidates for
    /// "did you mean" list.
    pub const NAMES: [&'static str; 7] = {
        let mut names = [""; 7];
        let mut i = 0;
        while i < State::ALL.len() {
            names[i] = State::ALL[i].as_str();
            i += 1;
        }
        names
    };

    /// The name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Recorded => "recorded",
            State::Blocked => "blocked",
            State::Submitted => "submitted",
            State::Confirmed => "confirmed",
            State::Failed => "failed",
            State::Unknown => "unknown",
            State::Escalated => "escalated",
        }
    }

    /// The state called exactly `text` (the wire's case).
    pub fn parse(text: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// The state `text` names, whatever its ASCII case and surrounding space: for reading
    /// what a third-party executor reported, which the checker judges without quibbling
    /// over spelling.
    pub fn parse_loosely(text: &str) -> Option<State> {
        let text = text.trim();
        State::ALL.into_iter().find(|s| s.as_str().eq_ignore_ascii_case(text))
    }

    /// Confirmed, failed or escalated: the executor will not act on it again by itself.
    pub const fn is_terminal(self) -> bool {
        matches!(self, State::Confirmed | State::Failed | State::Escalated)
    }

    /// Not yet known to have or not to have taken effect.
    pub const fn is_unresolved(self) -> bool {
        matches!(self, State::Recorded | State::Blocked | State::Submitted | State::Unknown)
    }

    /// Recorded, blocked or submitted: states a worker writes before any answer to the
    /// intent's request exists, so a timeline shows them before the requests of the same
    /// millisecond, and the other states after them.
    pub const fn precedes_answer(self) -> bool {
        matches!(self, State::Recorded | State::Blocked | State::Submitted)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for State {
    type Err = UnknownState;

    fn from_str(text: &str) -> Result<State, UnknownState> {
        State::parse(text).ok_or_else(|| UnknownState(text.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_text_and_json() {
        for s in State::ALL {
            assert_eq!(State::parse(s.as_str()), Some(s));
            assert_eq!(s.as_str().parse::<State>(), Ok(s));
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::Value::from(s.as_str()));
        }
        assert_eq!(State::NAMES.len(), State::ALL.len());
        assert_eq!(State::parse_loosely("  FAILED "), Some(State::Failed));
        assert_eq!(State::parse("Failed"), None);
        let err = "pending".parse::<State>().unwrap_err().to_string();
        assert!(err.contains("unknown state \"pending\"") && err.contains("escalated"), "{err}");
    }

    #[test]
    fn terminal_and_unresolved_are_apart() {
        for s in State::ALL {
            assert!(!(s.is_terminal() && s.is_unresolved()), "{s}");
            assert!(s.is_terminal() || s.is_unresolved(), "{s}");
            assert!(!(s.precedes_answer() && s.is_terminal()), "{s}");
        }
    }
}
