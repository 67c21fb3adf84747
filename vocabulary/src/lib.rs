//! The words every part of `twice` shares, spelt out once.
//!
//! The fakes, the reference executor, the scenarios, the checker and the reports all talk
//! about the same things: what a service promises, what fault it injects, what took effect,
//! where an intent is in its life, which actions exist and what time it is. Each of those
//! used to be written down in several crates, kept in step by tests or by a JSON round trip;
//! here each is one type, and the other crates use it (or re-export it under its old path).
//! This crate depends on no other crate of the workspace, so that every one of them can use
//! it without learning about the others: `scenarios` and `reports` name faults, contracts and
//! effects without linking the fakes, and the executor stays a plain HTTP client.
//!
//! A guided tour:
//!
//! - [`Contract`] ([`contract`]): what a service promises (design §4), with the cautious
//!   reading for terms a JSON object leaves out (`docs/protocol.md` §3.1), each service's own
//!   terms ([`Contract::default_for`]), [`ContractPatch`] for the changes a scenario or the
//!   control API makes, and [`Contract::admits`], which says whether a fault stays inside it.
//! - [`FaultRule`] and [`FaultSpec`] ([`rule`]): the public rule format of `docs/faults.md`.
//! - [`Effect`] and [`JournalEntry`] ([`record`]): what took effect (a ledger's line, the
//!   truth a checker reads) and what was asked (a journal's line, with the worker life that
//!   sent it, and for a refusal that needs a decision ([`needs_decision`]) what it asked for).
//! - [`State`] ([`state`]): where an intent is in its life (`docs/protocol.md` §7).
//! - [`ActionSpec`] ([`action`]): one row per action an agent can propose, with its service,
//!   the ledger kind of its effects, its business key and its parameters. Adding an action is
//!   a row here, a fake and an executor module.
//! - [`Clock`] ([`clock`]): milliseconds since the Unix epoch, injected, so that the same code
//!   runs on wall time and on tokio's paused, virtual time ([`TokioClock`]).
//! - [`ParamRef`] ([`workflow`]): a parameter that takes its value from an earlier intent's
//!   result ([`ResultField`]), and the `workflows` feature an executor announces.
//! - [`protocol`]: the shapes of the stdio protocol `twice/1` (`init`'s services and limits,
//!   the version, the line limit, the error codes), which the harness and every executor share.
//! - [`schema`]: the JSON Schema parts serde's derives cannot say (a fault as a name or a
//!   table, parameters by kind), for the schemas in `schemas/`.

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

pub mod action;
pub mod clock;
pub mod contract;
pub mod protocol;
pub mod record;
pub mod rule;
pub mod schema;
pub mod state;
pub mod webhook;
pub mod workflow;

pub use action::{
    ACTION_NAMES, ACTIONS, ActionSpec, CHAIN_PRIVATE_KEY_SECRET, Guard, MESSAGES_API_KEY_SECRET, Param,
    ParamKind, ResultField, ResultSource, SERVICES, action, action_for_effect, is_email_address,
};
pub use clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use contract::{Acks, Contract, ContractPatch, DAY_MS, KeyPolicy, MESSAGES_READ_LAG_MS, Reads};
pub use record::{
    Applied, DECISION_STATUSES, Effect, INTENT_TAG, JournalEntry, PROVIDER_REDELIVERY, needs_decision,
};
pub use rule::{FaultRule, FaultSpec};
pub use state::State;
pub use webhook::{OnEvent, WEBHOOKS_FEATURE};
pub use workflow::{ParamRef, WORKFLOWS_FEATURE};
