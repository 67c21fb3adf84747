//! The reference executor: turns intents into effects, and never does anything twice.
//!
//! A guided tour:
//!
//! - An agent proposes an [`Proposal`]; [`Executor::propose`] checks the action and its
//!   parameters ([`model::Action`]), writes the intent with its canonical payload, the
//!   payload's hash and a fresh idempotency key to a SQLite file ([`log::IntentLog`]), and
//!   returns once that is durable.
//! - [`Executor::pass`] drives intents: `recorded` → `submitted` → `confirmed` | `failed` |
//!   `unknown`; `unknown` → reconciliation → `confirmed` | `failed` | `escalated`; `blocked`
//!   while the intent it replaces is unresolved. [`services`] says what each answer means
//!   (a timeout is never a "no") and how to look an effect up.
//! - What is safe depends on the service's [`config::Contract`]: a write is sent again with
//!   the same key only where keys are honoured and still retained; otherwise the executor
//!   looks first, and trusts "not there" only after the settle and read-lag bounds.
//! - Some actions record what their first send needs before it leaves: `files.put` the
//!   object's version (its precondition, `If-Match` or `If-None-Match: *`), `chain.transfer`
//!   the signed transaction ([`signing`]), re-broadcast byte for byte and never signed anew.
//! - Leases with epochs let several workers share one log; the epoch is the fencing token.
//! - An intent an event starts is kept as a trigger until a genuine webhook of that event
//!   reaches the worker ([`Executor::receive_webhook`]; the process listens on loopback,
//!   [`webhook_listener`]), and then proposed once, however often the event comes.
//! - The world is injected ([`World`]: clock, ids, transport), so a simulation runs the same
//!   code on virtual time. `twice-executor` (in `src/bin`) speaks the stdio protocol
//!   `twice/1` of `docs/protocol.md`.

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

pub mod intent_engine;
pub mod log;
pub mod model;
pub mod protocol;
pub mod services;
pub mod signing;
pub mod webhook_listener;
pub mod world;

pub use intent_engine::{
    DrainError, Executor, OpenError, PassReport, Proposal, ProposeError, Transition, WebhookAnswer, World,
};
pub use log::Durability;
pub use model::{Action, Evidence, Intent};
