//! The workspace's cross-crate tests: what no single crate can check alone. Grouped by what
//! they check, each group a prefix of its modules:
//!
//! - `sdk_*`, `clients_doc`, `python`: the real client libraries (stripe-python and -node,
//!   boto3, web3.py, resend, the AWS SDK for JavaScript) against the fakes over loopback HTTP,
//!   driven by the scripts of `tests/python` and `tests/node`.
//! - `executor_workflow`: workflows through the reference, Python and TypeScript executors (the
//!   reference executor's own integration tests are `executor/tests/it`).
//! - `mutant*`, `accuracy`, `soak`: the checker against executors that are wrong on purpose,
//!   over the catalog and generated cases; the accuracy grid; the long soak (`cargo xtask soak`).
//! - `python_executor`, `typescript_executor`, `agents`, `byo*`, `examples`, `pytest`,
//!   `node_kit`, `mcp_clients`, `action`, `packages`: the examples, the kits, MCP clients, the
//!   GitHub Action and the release packages, each run as its user runs it.
//! - `report_*`, `results_schema`, `readmes`: what a run writes and what the docs promise.
//! - `boundaries`, `modules`: the layout ARCHITECTURE.md states.
//!
//! Tests that need the SDK venv, Node or the packages are `#[ignore]`d with that reason: plain
//! `cargo test` lists them, and `cargo xtask test` prepares what they need and runs them.

mod accuracy;
mod action;
mod agents;
mod boundaries;
mod byo;
mod byo_python;
mod clients_doc;
mod example_webhooks;
mod examples;
// The executor's process and world rigs, kept with its own tests; these tests drive the binary
// with them too, and use only part of them.
mod executor_workflow;
mod mcp_clients;
mod modules;
mod mutant_naive;
mod mutant_table;
mod mutants;
mod newcomer;
mod node_kit;
mod packages;
#[path = "../../executor/tests/it/process.rs"]
#[allow(dead_code)]
mod process;
mod pytest;
mod python;
mod python_executor;
mod readmes;
mod report_files;
mod report_html;
mod results_schema;
mod sdk_chain;
mod sdk_files;
mod sdk_messages;
mod sdk_node;
mod sdk_payments;
mod soak;
mod typescript_executor;
mod webhooks_doc;
#[path = "../../executor/tests/it/world.rs"]
#[allow(dead_code)]
mod world;
