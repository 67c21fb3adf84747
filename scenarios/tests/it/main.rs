//! Integration tests of the scenarios crate: one binary, one module per concern.

mod catalog;
mod coverage;
mod docs;
mod errors;
mod fidelity;
mod fuzz_corpus;
mod roundtrip;
mod schema;
