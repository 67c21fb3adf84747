//! `cargo fuzz run scenario_toml`: the body is [`scenarios::fuzzing::scenario_toml`], which
//! the suite also replays over `fuzz/corpus/scenario_toml/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| scenarios::fuzzing::scenario_toml(data));
