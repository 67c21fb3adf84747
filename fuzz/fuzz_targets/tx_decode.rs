//! `cargo fuzz run tx_decode`: the body is [`fake_services::fuzzing::tx_decode`], which the suite also
//! replays over `fuzz/corpus/tx_decode/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fake_services::fuzzing::tx_decode(data));
