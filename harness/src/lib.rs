//! The harness: drives executors through scenarios against the fakes, and checks what they
//! claim against what the ledgers show.

pub mod check;
pub mod cli;
pub mod conformance;
pub mod exit;
pub mod live;
pub mod observe;
pub mod points;
pub mod run;
pub mod setup;
pub mod sim;
