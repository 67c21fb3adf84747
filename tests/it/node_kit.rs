//! The TypeScript kit's own suite (`clients/node/test/`: vitest, and the `node:test` fixture's
//! file) against the workspace's `twice`, through `TWICE_BIN`. `cargo xtask test` installs the
//! kit's lockfile and compiles it (the packaging step does both) before the suite runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::executor_process::bin;

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
    let dir = kit();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("node-kit-{script}-{}.txt", std::process::id()));
    let file = std::fs::File::create(&out).unwrap();
    let mut child = Command::new("npm")
        .args(["run", "--silent", script])
        .current_dir(&dir)
        .env("TWICE_BIN", bin("twice"))
        .env("CI", "true")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start npm: {e}"));
    let deadline = Instant::now() + SUITE_WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "npm run {script} did not finish within {SUITE_WAIT:?}:\n{}",
                std::fs::read_to_string(&out).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(status.success(), "npm run {script} in clients/node failed ({status}):\n{output}");
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
