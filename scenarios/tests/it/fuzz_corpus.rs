//! Every file of the `cargo fuzz` corpus of the scenario parser
//! (`fuzz/corpus/scenario_toml/`, crash inputs included once fixed) replayed through the
//! same function the fuzz target runs, without libFuzzer: a file that makes the parser panic,
//! or that loads but does not write back to the same scenario, fails here.

use std::path::Path;

#[test]
fn scenario_toml_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/scenario_toml");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no input", dir.display());
    let failed: Vec<String> = files
        .into_iter()
        .filter_map(|path| {
            let data = std::fs::read(&path).unwrap();
            std::panic::catch_unwind(|| scenarios::fuzzing::scenario_toml(&data))
                .err()
                .map(|_| path.display().to_string())
        })
        .collect();
    assert!(failed.is_empty(), "{} inputs fail: {failed:#?}", failed.len());
}
