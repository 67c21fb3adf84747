//! Generated scenarios: contracts × intents × faults × process events, with shrinking.
//!
//! Every generated scenario stays inside the contracts it announces (only faults that
//! [`vocabulary::Contract::admits`] accepts), so a correct executor exists for each one and
//! a violation is always the executor's fault. Shrinking (proptest's) drops intents, faults
//! and events and moves numbers towards the simplest values, so a failure comes back as a
//! small scenario that replays by itself.
//!
//! Four things make the search find bugs in few cases, where uniform random choice would
//! need many (the first and the last are known from the testing literature to do so):
//!
//! - **Swarm testing**: each case first draws which actions, fault kinds and process events
//!   it may use at all, then draws its steps from those only. A case with one fault kind
//!   enabled hammers that kind, where a uniform draw over every kind spreads a few faults
//!   thinly; across cases every combination still comes up.
//! - **Faults where they bite**: a fault lands on a write (the request that changes the
//!   world) three times in four, and on the reads after it otherwise; the kinds that leave
//!   the caller unsure whether a write happened weigh three times as much as the others.
//!   Some faults fire on every matching request with a seeded probability instead of on
//!   one, and some aim at one intent's requests only (`where` on its business key).
//! - **Aimed steps** ([`aimed_steps`](draw::aimed_steps)): a few sequences that independent
//!   draws almost never line up (a refusal of an intent that a later one replaces; a worker
//!   stopped while its read-back of a late commit is out) are set up whole where a case has
//!   what they need.
//! - **Size that grows with the index** ([`size_for`]): the first cases are small (a bug a
//!   small case shows is found, and shrunk, fastest); later ones have more intents, faults
//!   and events, so bugs that need several steps still come up.
//!
//! The work is in three files, one step each: `draw.rs` draws a case (its size, the terms,
//! the swarm, the raw intents, faults and events, the aimed steps), `build.rs` turns the
//! draws into a [`Scenario`](crate::Scenario), and `replay.rs` makes case `index` of a
//! seed again and shrinks it.

mod build;
mod draw;
mod replay;

pub use build::scenario_strategy;
pub use draw::{CASES_PER_SIZE, LEASE_MS, REQUEST_TIMEOUT_MS, SHARP_CASES, Size, size_for};
pub use replay::{ShrinkStop, Shrunk, case, case_tree, shrink, steps};
