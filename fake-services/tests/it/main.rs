//! Integration tests of the fakes: one binary, modules by theme.

mod api;
mod bad_input;
mod chain;
mod client;
mod control;
mod events;
mod faults;
mod files;
mod fuzz_corpus;
mod limits;
mod messages;
mod multipart;
mod payment_intents;
mod pending;
mod props;
mod refusals;
mod retry_after;
mod tags;
mod webhooks;
