//! Node packages installed from their lockfiles (`npm ci`): the TypeScript example executor
//! (`examples/executors/typescript`) for the tests that run it, compiled (`npm run build`), the
//! TypeScript kit (compiled), and the Restate engine example's service, server and adapter.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::venv::fnv1a64;

/// The example, from the workspace root.
const EXAMPLE: &str = "examples/executors/typescript";
/// In `node_modules`: the hash of the package.json and package-lock.json it was installed from.
const STAMP: &str = ".twice-lockfile.hash";

/// Makes the example's `node_modules` hold exactly its lockfile (running `npm ci` only when the
/// lockfile or package.json changed since the last complete install), compiles it, and returns
/// the absolute path of `dist/executor.js`. Fails, saying so, when node or npm is missing.
pub(crate) fn prepare_node_executor(root: &Path) -> Result<PathBuf> {
    let dir = root.join(EXAMPLE);
    install_lockfile(root, EXAMPLE, "cargo xtask test")?;
    println!("xtask: compiling the TypeScript example (npm run build in {EXAMPLE})");
    npm(&dir, &["run", "--silent", "build"], "cargo xtask test")?;
    let script = dir.join("dist").join("executor.js");
    if !script.is_file() {
        bail!("npm run build in {EXAMPLE} left no {}", script.display());
    }
    Ok(script)
}

/// The TypeScript kit, from the workspace root.
pub(crate) const NODE_KIT: &str = "clients/node";

/// Installs the TypeScript kit's lockfile and compiles it (`dist/`): the packaging ships it,
/// and the Restate example's `npx twice-engine-restate` runs it through a `file:` link.
pub(crate) fn build_node_kit(root: &Path, rerun: &str) -> Result<()> {
    install_lockfile(root, NODE_KIT, rerun)?;
    println!("xtask: compiling the TypeScript kit (npm run build in {NODE_KIT})");
    npm(&root.join(NODE_KIT), &["run", "--silent", "build"], rerun)
}

/// Makes `node_modules` of the package in `folder` (from the workspace root) hold exactly its
/// lockfile, running `npm ci` only when the lockfile or package.json changed since the last
/// complete install. Fails, saying so and naming `rerun`, when node or npm is missing.
pub(crate) fn install_lockfile(root: &Path, folder: &str, rerun: &str) -> Result<()> {
    let dir = root.join(folder);
    for tool in ["node", "npm"] {
        let found = Command::new(tool).arg("--version").stdin(Stdio::null()).stdout(Stdio::null()).status();
        if !found.is_ok_and(|s| s.success()) {
            bail!(
                "`{tool} --version` failed: {folder} needs Node.js 20 or later with npm on the PATH \
                 (e.g. apt-get install nodejs npm, or https://nodejs.org)"
            );
        }
    }
    let read =
        |name: &str| fs::read(dir.join(name)).with_context(|| format!("could not read {folder}/{name}"));
    let hash =
        format!("fnv1a64:{:016x}\n", fnv1a64(&[read("package.json")?, read("package-lock.json")?].concat()));
    let stamp = dir.join("node_modules").join(STAMP);
    if fs::read_to_string(&stamp).is_ok_and(|s| s == hash) {
        println!("xtask: {folder}/node_modules is up to date with its package-lock.json");
        return Ok(());
    }
    println!("xtask: installing {folder}'s packages (npm ci; a few minutes the first time)");
    npm(&dir, &["ci", "--no-audit", "--no-fund"], rerun)?;
    fs::write(&stamp, &hash).with_context(|| format!("could not write {}", stamp.display()))
}

fn npm(dir: &Path, args: &[&str], rerun: &str) -> Result<()> {
    let status = Command::new("npm")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("could not run npm {}", args.join(" ")))?;
    if !status.success() {
        bail!(
            "`npm {}` in {} failed ({status}); fix the cause above and run `{rerun}` again",
            args.join(" "),
            dir.display()
        );
    }
    Ok(())
}
