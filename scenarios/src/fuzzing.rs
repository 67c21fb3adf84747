//! The body of the `scenario_toml` coverage-guided fuzz target in `fuzz/` (`cargo fuzz`).
//!
//! It lives here, compiled with the crate, and not in `fuzz/` so that the normal suite
//! (`tests/it/fuzz_corpus.rs`) replays every corpus file through the very code libFuzzer
//! runs, without libFuzzer or a nightly flag. Not an API: hidden from the docs.

use crate::{parse_scenario, to_toml};

/// A scenario file's text ([`parse_scenario`]). It may be refused with an error; it must
/// not panic. Property: a scenario that loads is written back by [`to_toml`] (which refuses
/// nothing that validates) to a file that loads as the same scenario, as `twice replay`
/// relies on for the files the generator writes.
pub fn scenario_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(scenario) = parse_scenario(text, "fuzz.toml") else { return };
    let written = match to_toml(&scenario, "") {
        Ok(written) => written,
        Err(invalid) => panic!("a scenario that loaded does not write back: {invalid:?}"),
    };
    match parse_scenario(&written, "written.toml") {
        Ok(again) => assert_eq!(again, scenario, "a scenario written back reads differently:\n{written}"),
        Err(e) => panic!("a scenario written back does not load: {e}\n{written}"),
    }
}
