//! The catalog's coverage: no applicable cell of the matrix and no named check without a
//! scenario, and `docs/failure-modes.md` showing the matrix as it is.

use scenarios::coverage::Coverage;

const DOC_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/failure-modes.md");
const START: &str = "<!-- coverage:start (generated from the catalog by scenarios/tests/it/coverage.rs; do not edit by hand) -->\n";
const END: &str = "<!-- coverage:end -->";

fn coverage() -> Coverage {
    Coverage::of(&scenarios::catalog().expect("the catalog loads"))
}

#[test]
fn every_applicable_cell_and_every_check_has_a_scenario() {
    let coverage = coverage();
    let holes = coverage.holes();
    assert!(holes.is_empty(), "the catalog has holes:\n{}", holes.join("\n"));
    // A check declared unreachable that a scenario meets is no longer an exception.
    for (name, _) in scenarios::coverage::UNREACHABLE {
        let check = coverage.checks.iter().find(|c| c.name == *name);
        assert!(check.is_some(), "UNREACHABLE names {name:?}, which is no check");
        assert!(
            check.is_some_and(|c| c.scenarios.is_empty()),
            "{name:?} is met by {:?}: remove it from UNREACHABLE",
            check.map(|c| &c.scenarios)
        );
    }
}

/// The section between the markers is the rendering, byte for byte;
/// `UPDATE_FAILURE_MODES=1 cargo test -p scenarios --test it coverage` rewrites it.
#[test]
fn the_failure_modes_doc_shows_the_coverage_as_it_is() {
    let doc = std::fs::read_to_string(DOC_PATH).expect("docs/failure-modes.md reads");
    let (Some(start), Some(end)) = (doc.find(START), doc.find(END)) else {
        panic!("docs/failure-modes.md has no coverage section between {START:?} and {END:?}");
    };
    let body_start = start + START.len();
    assert!(body_start <= end, "the coverage markers are out of order");
    let want = coverage().to_markdown();
    if std::env::var_os("UPDATE_FAILURE_MODES").is_some() {
        let updated = format!("{}{want}{}", &doc[..body_start], &doc[end..]);
        std::fs::write(DOC_PATH, updated).expect("docs/failure-modes.md writes");
        return;
    }
    assert!(
        doc[body_start..end] == want,
        "docs/failure-modes.md's coverage section is out of date; run \
         UPDATE_FAILURE_MODES=1 cargo test -p scenarios --test it coverage"
    );
}
