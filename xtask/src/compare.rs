//! `cargo xtask bench --compare BASE`: the counts (`counts.rs`) of another commit beside this
//! checkout's, as a table of what the change cost. Counts do not move with the machine, so two
//! commits counted on one machine, one after the other, compare directly.
//!
//! BASE is checked out as a detached git worktree under `TARGET/compare/` and built into a
//! target directory of its own there (`TARGET/compare/target`), so that neither build undoes
//! the other; both are kept for the next comparison, which then builds incrementally. A BASE
//! from before the counting programs existed gets this checkout's copies of them (they drive
//! public APIs only); if they do not build there, the comparison says so. Nothing is written
//! to `docs/`.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::counts::{Programs, count};
use crate::render::{change_pct, format_value};
use crate::{root, target_dir};

/// The counting programs (and the file `count_intents` includes), copied into a BASE that
/// lacks them.
const DRIVERS: [&str; 3] = [
    "fake-services/examples/count_server.rs",
    "executor/examples/count_intents.rs",
    "executor/benches/common/payments_config.rs",
];

pub(crate) fn compare(base: &str) -> Result<i32> {
    let root = root();
    let sha = git(&root, &["rev-parse", "--verify", &format!("{base}^{{commit}}")])
        .with_context(|| format!("`{base}` names no commit of this repository"))?;
    let short = &sha[..12.min(sha.len())];
    let compare = target_dir(&root).join("compare");
    let tree = compare.join(short);
    if !tree.join("Cargo.toml").exists() {
        std::fs::create_dir_all(&compare)?;
        println!("xtask: checking out {short} into {}", tree.display());
        let _ = git(&root, &["worktree", "prune"]);
        git(&root, &["worktree", "add", "--detach", &tree.to_string_lossy(), &sha])?;
    }
    for driver in DRIVERS {
        let there = tree.join(driver);
        if !there.exists() {
            println!("xtask: {short} has no {driver}; counting with this checkout's copy");
            if let Some(folder) = there.parent() {
                std::fs::create_dir_all(folder)?;
            }
            std::fs::copy(root.join(driver), &there)
                .with_context(|| format!("could not copy {driver} into {}", tree.display()))?;
        }
    }
    let base_programs = Programs::build(&tree, Some(&compare.join("target")))
        .with_context(|| format!("the counting programs do not build at {short}"))?;
    let head_programs = Programs::build(&root, None)?;
    println!("xtask: counting {short}");
    let before = count(&base_programs)?;
    println!("xtask: counting this checkout");
    let after = count(&head_programs)?;

    println!("\n| figure | {short} | this checkout | change |\n|---|--:|--:|--:|");
    for now in &after {
        let was = before.iter().find(|r| r.name == now.name && r.unit == now.unit);
        let (was_text, change) = match was {
            Some(w) => (
                format_value(w.value, &w.unit),
                change_pct(w.value, now.value).map(|c| format!("{c:+.2} %")).unwrap_or_default(),
            ),
            None => ("not counted".into(), String::new()),
        };
        println!(
            "| {} ({}) | {was_text} | {} | {change} |",
            now.name,
            now.unit,
            format_value(now.value, &now.unit)
        );
    }
    Ok(0)
}

/// A git command's first line of output in `root`.
fn git(root: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new("git").arg("-C").arg(root).args(args).output().context("could not run git")?;
    if !output.status.success() {
        bail!("git {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).lines().next().unwrap_or_default().trim().to_string())
}
