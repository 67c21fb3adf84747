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
