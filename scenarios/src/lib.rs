//! Scenarios: the model, the TOML format, the catalog and the generators.
//!
//! - [`model`]: what a scenario is ([`Scenario`]), shared with the harness.
//! - [`parse`]: reading the TOML form, with `file:line:col` errors ([`parse_scenario`]).
//! - [`validate`]: the rules a scenario obeys, fairness included ([`Scenario::validate`]).
//! - [`mod@write`]: writing a scenario back as TOML ([`to_toml`]), for shrunk failures.
//! - [`mod@catalog`]: the hand-written scenarios, embedded in the binary ([`catalog()`]).
//! - [`schema`]: the format's JSON Schema, generated from the model
//!   (`schemas/scenario.schema.json`).
//! - [`generate`]: property-based generation of fair scenarios, and shrinking.
//! - [`coverage`]: what a set of scenarios exercises (service × fault or event, and named
//!   checks), and its holes; `docs/failure-modes.md` holds its rendering of the catalog.
//!
//! The format is documented in `docs/scenarios.md`.

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

// The format's bounds, below the model whose schema states some of them; public through
// `validate`, which checks them.
mod bounds;
pub mod catalog;
pub mod coverage;
// The body of the `cargo fuzz` target in `fuzz/`, which the suite replays too.
#[doc(hidden)]
pub mod fuzzing;
pub mod generate;
pub mod model;
pub mod parse;
pub mod schema;
// The schema parts the model's derives name, below the model; `schema` renders the whole.
mod schema_parts;
pub mod validate;
pub mod write;

pub use catalog::{CATALOG, catalog};
pub use model::{
    Event, EventAction, Expected, IntentSpec, LimitOverrides, ObjectSeed, PhaseName, Point, Scenario,
    ServiceFault, TRIGGER_EVENT, Trigger,
};
pub use parse::{LoadError, ScenarioError, parse_file, parse_scenario};
pub use validate::{FieldPath, Invalid};
pub use write::to_toml;
