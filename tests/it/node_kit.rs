//! The TypeScript kit's own suite (`clients/node/test/`: vitest, and the `node:test` fixture's
//! file) against the workspace's `twice`, through `TWICE_BIN`. `cargo xtask test` installs the
//! kit's lockfile and compiles it (the packaging step does both) before the suite runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::packages::run;
use super::process::bin;

/// The longest the kit's suite may take (it starts a serve per test, each in well under a
/// second).
const SUITE_WAIT: Duration = Duration::from_secs(300);

fn kit() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/node");
    assert!(
        dir.join("node_modules/.bin/vitest").exists(),
        "clients/node has no node_modules: run the suite with `cargo xtask test` (or `npm ci` in clients/node)"
    );
    dir
}

/// `npm run SCRIPT` in the kit, bounded; its output, after asserting it passed.
fn npm_run(script: &str) -> String {
    let mut command = Command::new("npm");
    command
        .args(["run", "--silent", script])
        .current_dir(kit())
        .env("TWICE_BIN", bin("twice"))
        .env("CI", "true");
    let (passed, output) = run(command, &format!("npm run {script} in clients/node"), SUITE_WAIT);
    assert!(passed, "npm run {script} in clients/node failed:\n{output}");
    output
}

#[test]
fn the_typescript_kit_passes_its_vitest_suite_against_twice() {
    let output = npm_run("test");
    assert!(output.contains("passed") && !output.contains("skipped"), "{output}");
}

#[test]
fn the_node_test_fixture_serves_a_test_and_stops_after_it() {
    let output = npm_run("test:node");
    assert!(output.contains("# pass") && output.contains("# fail 0"), "{output}");
}
