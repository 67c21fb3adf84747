//! What a pass plans before it commits: a write (the row as it should become, and the
//! version and state it was read with) and a send (that write, with the action and the row
//! as it was leased). `reconcile`, `prepare` and `send` decide in these shapes and `pass`
//! commits them; they live in a file of their own, below all four, so that `pass` uses the
//! others and none of them uses `pass`.

use crate::model::{Action, Intent};
use vocabulary::State;

/// A planned write: the row as it should become, and what it was.
pub(super) struct Planned {
    pub(super) new: Intent,
    pub(super) expect_version: u64,
    pub(super) from: State,
    pub(super) note: String,
}

/// A send decided in a pass, before its commit: the row as it will be sent, and as it was
/// (leased) before it was marked submitted, for when its first send cannot be prepared.
pub(super) struct Sending {
    pub(super) planned: Planned,
    pub(super) action: Action,
    pub(super) before: Intent,
    /// A step whose references this pass resolved (its first send).
    pub(super) resolved_now: bool,
}
