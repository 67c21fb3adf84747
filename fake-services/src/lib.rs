//! Stateful fakes of the services an agent changes the world through, with faults injected
//! at exact points of their own processing and a ledger of what really happened.
//!
//! A guided tour:
//!
//! - A fake is a [`Fake`]: [`payments::Payments`] (Stripe-style PaymentIntents and refunds),
//!   [`workspaces::Workspaces`] (a SaaS create API), [`files::Files`] (S3, multipart uploads
//!   included), [`chain::Chain`] (Ethereum JSON-RPC) or [`messages::Messages`] (Resend's
//!   email API, with the recipients' inboxes as a test mailbox). It turns a [`FakeRequest`] into a
//!   [`Disposition`]: an answer, a closed connection or a reset one. It knows nothing of
//!   sockets, so the same fake serves loopback HTTP ([`server::Server`], behind
//!   `twice serve`) and in-process callers on virtual time.
//! - Every fake shares one pipeline ([`core`]): arrival, key lookup, before commit, commit,
//!   after commit. A [`FaultRule`] selects requests (method, path, fields, n-th match, seeded
//!   probability) and a [`FaultSpec`] says what goes wrong at which point.
//! - A [`Contract`] is what a service promises (keys honoured, retention, read freshness,
//!   honest acks, settle bound, unique business keys, fencing, conditional writes). Some terms
//!   change what the fake does; [`Contract::admits`] says which faults stay inside the promise.
//! - Time is a [`ServiceClock`]: an injected base [`Clock`] plus jumps. Randomness is one
//!   seeded RNG per service. The same seed and the same requests give the same bytes.
//! - What happened is in the ledger ([`record::Effect`]); what was asked is in the journal
//!   ([`record::JournalEntry`]). A checker reads the ledger, never the caller's word, and
//!   reads it once [`Fake::pending`] names nothing that can still change it (a request being
//!   worked on, a late commit, a delivery still due, a transaction in the pool).
//! - The control API under `/__twice/` (documented in `docs/faults.md`) exposes all of it
//!   over HTTP.
//!
//! The shapes the fakes share with the executor, the scenarios and the reports (contracts,
//! rules, effects, journal entries, the clock) live in the `vocabulary` crate; the modules
//! [`contract`], [`rule`], [`record`] and [`clock`] re-export them, so every path above still
//! names the one type.

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

pub mod chain;
pub mod clock;
pub mod core;
pub mod fake;
pub mod fault_engine;
pub mod files;
pub mod form;
// The bodies of the `cargo fuzz` targets in `fuzz/`, which the suite replays too.
#[doc(hidden)]
pub mod fuzzing;
pub mod messages;
pub mod metadata;
mod outbound;
pub mod payments;
pub mod record;
pub mod server;
pub mod wire;
pub mod workspaces;

pub use clock::ServiceClock;
pub use core::{Bounds, Pending, PendingKind};
pub use fake::{Fake, Fakes};
pub use server::{Gate, Listener, Server, Tap};
pub use wire::{Disposition, FakeRequest, FakeResponse};
