//! The runner: drives executors through scenarios against the fakes, has each case judged by
//! the checker (the `checker` crate) and hands back what was observed and judged (the
//! `results` crate). The `twice` command line, `twice serve` (the `serve` crate) and
//! `twice check-executor` (the `conformance` crate) are built on it.
//!
//! # The front door
//!
//! [`pipeline`] runs what `twice run` runs: pick an [`Executor`] (the reference executor in
//! sim or live, or any command speaking `twice/1`) and a [`Selection`] of scenarios, put them
//! in a [`RunPlan`], [`execute`] it (cases run side by side, failures shrunk), then write the
//! [`report`]:
//!
//! ```no_run
//! use runner::{Executor, RunPlan, Selection};
//!
//! let plan = RunPlan::new(Executor::Command("python3 my_executor.py".into()), Selection::Default { generated: Some(5) });
//! let ran = runner::execute(&plan, &runner::run::Quiet, &runner::shrink::QuietShrink)?;
//! runner::report(&ran.results, &plan.report_dir)?;
//! println!("{}", runner::run::summary(&ran.results));
//! # Ok::<(), anyhow::Error>(())
//! ```
//!
//! # Underneath
//!
//! - [`run`]: one case run and checked ([`run::run_case`]), many side by side
//!   ([`run::run_cases`]), their results and summary; [`shrink`]: failing generated cases
//!   made small.
//! - [`phase_engine`]: the phases of one scenario run (act, drain, heal, reconcile, finish), written
//!   once over a [`phase_engine::Backend`]; [`sim`] (in process, virtual time) and [`live`] (real
//!   processes, loopback HTTP, signals) are the two backends.
//! - [`process`]: the stdio client of `twice/1`, shared by [`live`] and `twice check-executor`.
//! - [`world`]: a scenario's world on the fakes, prepared once for every caller, and what a
//!   heal and a clock jump do; [`setup`]: the constants and steps it is made of; [`points`]:
//!   request points.
//! - [`exit`]: the exit codes every command of `twice` ends with.
//! - [`workdir`]: scratch directories gone on every path, an interrupt included;
//!   [`interrupt`]: whether one has come, and the hold that keeps the run from acting on it.

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

pub mod exit;
pub mod interrupt;
pub mod live;
pub mod phase_engine;
pub mod pipeline;
pub mod points;
pub mod process;
pub mod run;
pub mod setup;
pub mod shrink;
pub mod sim;
pub mod workdir;
pub mod world;

pub use pipeline::{Executor, Ran, RunPlan, Selection, execute, report};
pub use run::{Case, Driver};
