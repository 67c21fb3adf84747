//! The boundaries ARCHITECTURE.md states between crates, checked against what Cargo.toml
//! files say: the table under "Dependencies between crates" lists, for every workspace crate,
//! the workspace crates it may depend on (normal dependencies; test code may cross the lines).
//! A crate that gains a dependency the table does not allow, or a crate the table does not
//! name, fails here, so the map and the code cannot drift apart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

const SECTION: &str = "### Dependencies between crates";

/// The table: crate -> the workspace crates it may use.
fn allowed() -> Graph {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).expect("ARCHITECTURE.md is readable");
    let section = text.split_once(SECTION).map(|(_, rest)| rest).expect("ARCHITECTURE.md has the section");
    let mut table = BTreeMap::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(name), Some(uses)) = (cells.get(1), cells.get(2)) else { continue };
        let ticked =
            |cell: &str| -> Vec<String> { cell.split('`').skip(1).step_by(2).map(str::to_string).collect() };
        let Some(name) = ticked(name).into_iter().next() else { continue };
        table.insert(name, ticked(uses).into_iter().collect());
    }
    assert!(!table.is_empty(), "the table under {SECTION:?} has rows");
    table
}

/// The workspace's crates and their normal dependencies on each other, from `cargo metadata`.
fn actual() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let members: BTreeSet<String> =
        packages.iter().filter_map(|p| p["name"].as_str()).map(str::to_string).collect();
    packages
        .iter()
        .map(|p| {
            let uses = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .filter(|name| members.contains(*name))
                .map(str::to_string)
                .collect();
            (p["name"].as_str().unwrap_or_default().to_string(), uses)
        })
        .collect()
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every way `actual` departs from `allowed`.
fn problems(allowed: &Graph, actual: &Graph) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, uses) in actual {
        let Some(may) = allowed.get(name) else {
            problems.push(format!("{name} is not in the table: say what it may depend on"));
            continue;
        };
        for used in uses.difference(may) {
            problems.push(format!("{name} depends on {used}, which ARCHITECTURE.md does not allow"));
        }
    }
    for name in allowed.keys().filter(|n| !actual.contains_key(*n)) {
        problems.push(format!("the table names {name}, which is not a workspace crate"));
    }
    problems
}

#[test]
fn crates_depend_only_on_what_architecture_md_allows() {
    let problems = problems(&allowed(), &actual());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_forbidden_dependency_or_a_crate_left_out_of_the_table_is_caught() {
    let allowed = allowed();
    // The rule that matters most: the reference executor is a plain client of the services.
    assert!(!allowed["executor"].contains("fake-services"), "{:?}", allowed["executor"]);
    let mut actual = actual();
    actual.get_mut("executor").expect("executor is a crate").insert("fake-services".into());
    actual.insert("newcomer".into(), BTreeSet::new());
    let found = problems(&allowed, &actual);
    assert!(
        found.iter().any(|p| p == "executor depends on fake-services, which ARCHITECTURE.md does not allow"),
        "{found:?}"
    );
    assert!(found.iter().any(|p| p.starts_with("newcomer is not in the table")), "{found:?}");
}

/// Crates the checker must never reach, directly or through a dependency: it judges what a
/// run observed (ledgers, journals, claims, the timeline) and so needs no executor, no fake,
/// no process, no HTTP and no database. A verdict then cannot depend on how a run was driven.
/// (tokio's timer comes with the vocabulary's clock type, and libc with proptest's randomness
/// through the scenarios: neither runs anything in the checker.)
const CHECKER_NEVER: [&str; 8] =
    ["executor", "fake-services", "runner", "serve", "conformance", "hyper", "reqwest", "rusqlite"];

/// Every package the named one depends on, through normal dependencies, at any depth.
fn reaches(name: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "-p", name, "-e", "normal", "--prefix", "none", "--format", "{p}", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|package| *package != name)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_checker_reads_ledgers_and_journals_never_an_executor_or_a_process() {
    let reached = reaches("checker");
    assert!(reached.contains("results") && reached.contains("scenarios"), "{reached:?}");
    let forbidden: Vec<&str> = CHECKER_NEVER.iter().copied().filter(|c| reached.contains(*c)).collect();
    assert!(forbidden.is_empty(), "the checker reaches {forbidden:?}");
    // The same question of a crate that does reach them, so the test cannot pass by reading
    // nothing.
    let runner = reaches("runner");
    assert!(
        ["executor", "fake-services", "hyper", "rusqlite"].iter().all(|c| runner.contains(*c)),
        "{runner:?}"
    );
}
