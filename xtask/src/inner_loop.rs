//! The inner loop, timed by xtask itself for `cargo xtask bench` (section `xtask/build`): how
//! long `cargo build` takes when nothing changed, and after a change to one crate low in the
//! graph (the checker) and to the CLI at the top, in this checkout with its target directory.
//!
//! A change is a comment line added at the end of one source file, so that cargo and rustc both
//! see new bytes; the file gets its own bytes back after each timed build (a guard restores them
//! on every path, an error included), and the build that follows is not timed. Every build is a
//! `cargo build` of the default member (`twice`), in the dev profile, as a developer runs it.

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cargo;
use crate::records::Record;

/// The section's `BENCH` id.
pub(crate) const BENCH: &str = "xtask/build";

/// Builds timed per figure; the figure is their median.
const ROUNDS: usize = 5;

/// The files an edit is made to, each with the figure's name.
const CHANGES: [(&str, &str); 2] = [
    ("checker/src/lib.rs", "a build after a change to the checker"),
    ("twice/src/main.rs", "a build after a change to the CLI"),
];

/// One timed `cargo build`: its wall time and how many crates it compiled.
struct Build {
    seconds: f64,
    compiled: usize,
}

fn build(root: &Path) -> Result<Build> {
    let started = Instant::now();
    let out = cargo()
        .args(["build", "--color", "never"])
        .current_dir(root)
        .stdin(Stdio::null())
        .output()
        .context("could not start cargo build")?;
    let seconds = started.elapsed().as_secs_f64();
    let log = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("cargo build failed:\n{log}");
    }
    let compiled = log.lines().filter(|l| l.trim_start().starts_with("Compiling ")).count();
    Ok(Build { seconds, compiled })
}

/// A source file with a line added, which gets its own bytes back when dropped.
struct Edited<'a> {
    path: &'a Path,
    original: String,
}

impl<'a> Edited<'a> {
    fn new(path: &'a Path) -> Result<Self> {
        let original = fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        fs::write(path, format!("{original}// an edit, timed by `cargo xtask bench --only xtask/build`\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Self { path, original })
    }
}

impl Drop for Edited<'_> {
    fn drop(&mut self) {
        if let Err(e) = fs::write(self.path, &self.original) {
            let path = self.path.display();
            eprintln!("xtask: could not restore {path}: {e}; `git checkout -- {path}` does");
        }
    }
}

/// The median of `samples` and their spread as (max - min) / median in percent.
fn median_spread(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let median = samples[samples.len() / 2];
    let spread = match (samples.first(), samples.last()) {
        (Some(min), Some(max)) if median > 0.0 => (max - min) / median * 100.0,
        _ => 0.0,
    };
    (median, spread)
}

fn record(name: &str, samples: &mut [f64], unit: &str, notes: String) -> Record {
    let (value, spread) = median_spread(samples);
    Record {
        bench: BENCH.into(),
        name: name.into(),
        value,
        unit: unit.into(),
        display: None,
        spread_pct: Some(spread),
        notes: Some(notes),
    }
}

/// The section's figures: a build with nothing changed, and one after each of [`CHANGES`].
pub(crate) fn measure(root: &Path) -> Result<Vec<Record>> {
    println!("xtask: timing the inner loop (cargo build, {ROUNDS} rounds per figure)");
    build(root)?;
    let mut idle = Vec::new();
    let mut compiled = 0;
    for _ in 0..ROUNDS {
        let b = build(root)?;
        idle.push(b.seconds);
        compiled = compiled.max(b.compiled);
    }
    let packed = if root.join(".git/packed-refs").exists() { "with" } else { "without" };
    let met = if compiled == 0 { "met" } else { "**not met**" };
    let mut figures = vec![
        record(
            "a build with nothing changed",
            &mut idle,
            "s",
            format!(
                "`cargo build` right after a build, in a checkout {packed} `.git/packed-refs`; the most \
                 crates any round compiled: {compiled}. Target: nothing compiled; {met}."
            ),
        ),
        Record {
            bench: BENCH.into(),
            name: "crates compiled by a build with nothing changed".into(),
            value: compiled as f64,
            unit: "crates".into(),
            display: None,
            spread_pct: None,
            notes: None,
        },
    ];
    for (file, name) in CHANGES {
        let path = root.join(file);
        let mut times = Vec::new();
        for _ in 0..ROUNDS {
            let edited = Edited::new(&path)?;
            times.push(build(root)?.seconds);
            drop(edited);
            build(root)?;
        }
        let notes = format!(
            "a comment line added at the end of `{file}`, then `cargo build` (dev profile, incremental)."
        );
        figures.push(record(name, &mut times, "s", notes));
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::median_spread;

    #[test]
    fn the_median_is_the_middle_sample_and_the_spread_is_relative_to_it() {
        let (median, spread) = median_spread(&mut [3.0, 1.0, 2.0]);
        assert_eq!(median, 2.0);
        assert_eq!(spread, 100.0);
    }
}
