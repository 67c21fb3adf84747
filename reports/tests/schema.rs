//! `schemas/results.schema.json` is the schema generated from the types `results.json` is
//! written from (real runs are validated against it in `tests/it/results_schema.rs`).

use std::path::Path;

/// The committed file, byte for byte; `UPDATE_SCHEMAS=1 cargo test -p reports --test schema`
/// rewrites it.
#[test]
fn the_committed_results_schema_is_the_generated_one() {
    let want = vocabulary::schema::render(&reports::schema::results_schema());
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(reports::schema::RESULTS_SCHEMA_PATH);
    if std::env::var_os("UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, &want).expect("the schema file writes");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is out of date with the results types; run \
         UPDATE_SCHEMAS=1 cargo test -p reports --test schema",
        path.display()
    );
}
