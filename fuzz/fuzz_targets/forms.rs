//! `cargo fuzz run forms`: the body is [`fake_services::fuzzing::forms`], which the suite also
//! replays over `fuzz/corpus/forms/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fake_services::fuzzing::forms(data));
