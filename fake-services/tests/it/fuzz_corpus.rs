//! Every file of the `cargo fuzz` corpora of the fakes' parsers (`fuzz/corpus/<target>/`,
//! crash inputs included once fixed) replayed through the same function the fuzz target
//! runs, without libFuzzer: a parser that panics on one, or breaks a target's property,
//! fails here.

use std::path::{Path, PathBuf};

use fake_services::fuzzing;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no input", dir.display());
    files
}

/// Runs `body` over every file of the corpus and names every file it panics on.
fn replay(target: &str, body: fn(&[u8])) {
    let failed: Vec<String> = corpus(target)
        .into_iter()
        .filter_map(|path| {
            let data = std::fs::read(&path).unwrap();
            std::panic::catch_unwind(|| body(&data)).err().map(|_| path.display().to_string())
        })
        .collect();
    assert!(failed.is_empty(), "{target}: {} inputs fail: {failed:#?}", failed.len());
}

#[test]
fn forms_corpus_replays() {
    replay("forms", fuzzing::forms);
}

#[test]
fn s3_xml_corpus_replays() {
    replay("s3_xml", fuzzing::s3_xml);
}

#[test]
fn tx_decode_corpus_replays() {
    replay("tx_decode", fuzzing::tx_decode);
}

#[test]
fn json_rpc_corpus_replays() {
    replay("json_rpc", fuzzing::json_rpc);
}
