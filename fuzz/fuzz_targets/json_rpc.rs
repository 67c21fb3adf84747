//! `cargo fuzz run json_rpc`: the body is [`fake_services::fuzzing::json_rpc`], which the suite also
//! replays over `fuzz/corpus/json_rpc/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fake_services::fuzzing::json_rpc(data));
