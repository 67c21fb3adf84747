//! Acceptance tests: real client libraries against the fakes over loopback HTTP.
//!
//! The Python scripts in `tests/python` drive the real SDKs (stripe-python, requests with
//! tenacity) and print what the client observed; the tests assert on that and on the fake's
//! ledger and journal. They need the interpreter of the venv that `cargo xtask test` builds
//! from `tests/requirements.txt`, passed in `TWICE_PYTHON`.

mod accuracy;
mod action;
mod agents;
mod boundaries;
mod byo;
mod byo_python;
mod clients_doc;
mod examples;
mod executor_crash;
mod executor_decisions;
mod executor_faults;
mod executor_fencing;
mod executor_lineage;
mod executor_payload;
mod executor_process;
mod executor_protocol;
mod executor_rig;
mod executor_workflow;
mod executor_world;
mod mcp_clients;
mod modules;
mod mutant_naive;
mod mutant_table;
mod mutants;
mod node_kit;
mod packages;
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
