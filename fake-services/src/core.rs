//! The processing pipeline every fake shares.
//!
//! A request goes through fixed points, and faults act at those points:
//!
//! 1. arrival: the engine plans the faults; `refuse` resets, `reject` answers and stops;
//! 2. key: an idempotency key is looked up (`forget_keys`, `ignore_keys`), replayed,
//!    refused as a mismatch or as in flight, or reserved;
//! 3. before commit: `latency.before_ms`;
//! 4. commit: now, late (`commit_after_timeout`, in a task of its own so that it happens
//!    even when the caller has gone), or never (`silent_noop`); reads see a lagged view
//!    (`stale_read`); `error_after_commit` replaces the result, which is what the key saves;
//! 5. after commit: `latency.after_ms`, then the answer is sent, dropped
//!    (`drop_after_commit`) or held and dropped (`timeout_after_commit`).
//!
//! Each service supplies what differs: how fields are read for matching, how its errors look,
//! what a commit does. All state of one service sits behind one mutex that is never held
//! across an await, so a cancelled request can never leave a half-made commit.
//!
//! The module is split by concept, from the bottom up: `error.rs` the errors a service
//! answers and the [`Shape`] it renders them in; `bounds.rs` what a service holds at most;
//! `state.rs` what the pipeline works on (a service's [`Inner`] state, one request's
//! [`Ctx`], the commit step's types); `service.rs` the [`ServiceCore`] itself (construction,
//! the lock, reset, bounds, what is pending); `pending.rs` what a fake still has to do that can
//! change its ledger ([`Pending`]) and the register of late commits; `pipeline.rs` the points above, one method each; `journal.rs`
//! where a request's journal entry ends, and its log line; and `control.rs` the control API
//! under `/__twice/` that every fake answers.

mod bounds;
mod control;
mod error;
mod journal;
mod pending;
mod pipeline;
mod service;
mod state;

pub use bounds::{Bounds, KEYS_MAX, LEDGER_EFFECTS_MAX, SEEDED_OBJECTS_MAX};
pub use control::{CONTROL_ROUTES, Control, control_methods, control_route};
pub use error::{ApiError, RETRY_AFTER_S, Shape};
pub use journal::Abandon;
pub use pending::{Pending, PendingKind};
pub use service::{RefusalReader, ServiceCore};
pub use state::{Check, Commit, Ctx, Inner, Mode, Outcome, Stamp};
