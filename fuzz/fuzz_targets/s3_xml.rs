//! `cargo fuzz run s3_xml`: the body is [`fake_services::fuzzing::s3_xml`], which the suite also
//! replays over `fuzz/corpus/s3_xml/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fake_services::fuzzing::s3_xml(data));
