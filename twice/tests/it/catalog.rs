//! The whole catalog against the reference executor, in both drivers: the same scenario files
//! pass in process on virtual time and through the stdio protocol with real processes.

use results::{Outcome, ScenarioResult, Source};
use runner::run::{self, Case, Driver, Progress, RunContext};
use runner::sim::Reference;

struct Quiet;

impl Progress for Quiet {
    fn started(&self, _: usize) {}
    fn finished(&self, _: &ScenarioResult) {}
    fn done(&self) {}
}

fn catalog() -> Vec<Case> {
    scenarios::catalog()
        .unwrap()
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .collect()
}

fn failures(results: &[ScenarioResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.outcome != Outcome::Passed)
        .map(|r| {
            let broken: Vec<String> = r
                .verdicts
                .iter()
                .filter(|v| !v.held)
                .map(|v| format!("{}: {:?}", v.invariant, v.evidence))
                .collect();
            format!("{} ({:?}) {:?} {broken:?}", r.name, r.outcome, r.observed.executor_error)
        })
        .collect()
}

fn check(driver: Driver<'_>, what: &str) {
    let cases = catalog();
    assert!(cases.len() >= 30, "the catalog has {} scenarios", cases.len());
    let dir = std::env::temp_dir().join(format!("twice-catalog-{what}-{}", std::process::id()));
    let results = run::run_cases(&cases, &RunContext::new(1, &driver, &dir, "twice run"), 2, &Quiet);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(results.len(), cases.len());
    let failed = failures(&results);
    assert!(failed.is_empty(), "{what}: {} of {} failed:\n{}", failed.len(), cases.len(), failed.join("\n"));
}

#[test]
fn the_reference_executor_passes_the_catalog_in_sim() {
    check(Driver::Sim(&Reference), "sim");
}

#[test]
fn the_reference_executor_binary_passes_the_catalog_live() {
    check(Driver::Live(crate::live::reference()), "live");
}

/// `twice scenarios list --format json`: the catalog whole, in a versioned envelope, for
/// programs; the text form keeps a line per scenario.
#[test]
fn the_catalog_lists_as_json_for_programs() {
    let out = crate::twice().args(["scenarios", "list", "--format", "json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listing["schema"], "twice.catalog/1");
    let names: Vec<&str> =
        listing["scenarios"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    let expected: Vec<String> = scenarios::catalog().unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, expected);
    let first = &listing["scenarios"][0];
    assert!(first["intents"].as_array().is_some_and(|i| !i.is_empty()), "{first}");

    let text = crate::twice().args(["scenarios", "list"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&text.stdout).lines().count(), expected.len());
    let bad = crate::twice().args(["scenarios", "list", "--format", "yaml"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// `twice --version` names the version and the commit it was built from.
#[test]
fn the_version_names_the_commit() {
    let out = crate::twice().arg("--version").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let (version, commit) = text.trim().strip_prefix("twice ").unwrap().split_once(' ').unwrap();
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let commit = commit.strip_prefix('(').and_then(|c| c.strip_suffix(')')).unwrap();
    let hex = commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit());
    assert!(hex || commit == "unknown", "{text}");
}

/// One `cargo install` of the package `twice` brings both commands: cargo's own view of the
/// workspace (`cargo metadata`) has the package named `twice` in `twice/`, building the bins
/// `twice` and `twice-executor`, and no other package builds a bin of either name (two would
/// collide in `~/.cargo/bin` and in `target/`).
#[test]
fn one_install_brings_both_commands() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut bins: Vec<(String, String)> = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            if target["kind"].as_array().unwrap().iter().any(|k| k == "bin") {
                bins.push((
                    package["name"].as_str().unwrap().into(),
                    target["name"].as_str().unwrap().into(),
                ));
            }
        }
    }
    let of = |bin: &str| bins.iter().filter(|(_, b)| b == bin).map(|(p, _)| p.as_str()).collect::<Vec<_>>();
    assert_eq!(of("twice"), ["twice"], "{bins:?}");
    assert_eq!(of("twice-executor"), ["twice"], "{bins:?}");
    let package = metadata["packages"].as_array().unwrap().iter().find(|p| p["name"] == "twice").unwrap();
    let manifest = package["manifest_path"].as_str().unwrap();
    assert!(manifest.ends_with("twice/Cargo.toml"), "{manifest}");
    // Two bins in one package: `cargo run --release -- run` (the README's first command) needs
    // to know which one it means.
    assert_eq!(package["default_run"], "twice", "the package names no default-run");
}

/// `twice completions SHELL` prints a script that knows the subcommands and their flags.
#[test]
fn completions_know_the_subcommands() {
    for (shell, marker) in [("bash", "_twice()"), ("zsh", "#compdef twice"), ("fish", "complete -c twice")] {
        let out = crate::twice().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        for word in ["check-executor", "replay", "--format"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    let unknown = crate::twice().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(unknown.status.code(), Some(2));
}

/// A scenario whose intents an event starts runs under `twice run` like any other: the
/// reference executor receives the payments fake's webhooks and passes it, and the default run
/// holds such scenarios.
#[test]
fn twice_run_runs_a_webhook_scenario_against_the_reference_executor() {
    let dir = std::env::temp_dir().join(format!("twice-catalog-webhook-run-{}", std::process::id()));
    let out = crate::twice()
        .args(["run", "--scenario", "fault_duplicate_webhook", "--cases", "0", "--report-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert!(catalog().iter().any(|c| c.scenario.needs_webhooks()));
    let _ = std::fs::remove_dir_all(&dir);
}
