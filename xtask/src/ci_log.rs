//! `cargo xtask bench --ci-log FILE`: the stage times of a `.ci/run` (its `==> STAGE: N s` lines
//! and `==> all checks passed in N s`), as section `xtask/ci` of `docs/benchmarks.md`. CI
//! itself is the measurement: a whole fresh-clone run takes a quarter of an hour, too long to
//! repeat inside a benchmark run, so its saved output is read instead.

use anyhow::{Result, bail};

use crate::records::Record;

/// The section's `BENCH` id.
pub(crate) const BENCH: &str = "xtask/ci";

/// The longest a fresh-clone `.ci/run` should take on this machine.
const TOTAL_S_TARGET: f64 = 900.0;

/// The commit a `.ci/run` output says it ran (its `==> commit SHA` line).
pub(crate) fn commit(log: &str) -> Option<&str> {
    log.lines().find_map(|l| l.strip_prefix("==> commit ")).map(str::trim).filter(|c| !c.is_empty())
}

/// The figures of a `.ci/run` output: one per stage, in order, then the whole run.
pub(crate) fn figures(log: &str) -> Result<Vec<Record>> {
    let mut figures = Vec::new();
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("==> ") else { continue };
        if rest.starts_with("commit ") {
            continue;
        }
        let (name, seconds) = if let Some(total) = rest.strip_prefix("all checks passed in ") {
            ("the whole run (all checks passed)".to_string(), total)
        } else if let Some((stage, seconds)) = rest.rsplit_once(": ") {
            (format!("`{stage}`"), seconds)
        } else {
            continue;
        };
        let Some(value) = seconds.strip_suffix(" s").and_then(|s| s.trim().parse::<f64>().ok()) else {
            continue;
        };
        figures.push(Record::seconds(BENCH, name, value));
    }
    let Some(total) = figures.last_mut().filter(|r| r.name.starts_with("the whole run")) else {
        bail!("no `==> all checks passed in N s` line: a .ci/run that passed, saved whole, is needed");
    };
    let met = if total.value <= TOTAL_S_TARGET { "met" } else { "**not met**" };
    total.notes = Some(format!("Target: at most {TOTAL_S_TARGET:.0} s; {met}."));
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::{commit, figures};

    #[test]
    fn each_stage_and_the_whole_run_are_read_and_the_target_judged() {
        let log = "==> commit 2d23053e4505\n==> cargo fmt --all -- --check\nDiff: none\n==> cargo fmt --all -- --check: 1 s\n\
                   xtask: the binaries: ready in 94.8 s\n==> cargo xtask test: 718 s\n\
                   ==> all checks passed in 872 s\n";
        let got = figures(log).expect("a passed run");
        let names: Vec<&str> = got.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["`cargo fmt --all -- --check`", "`cargo xtask test`", "the whole run (all checks passed)"]
        );
        assert_eq!(got[2].value, 872.0);
        assert!(got[2].notes.as_deref().is_some_and(|n| n.ends_with("met.")), "{:?}", got[2].notes);
        assert!(figures("==> cargo xtask test: 718 s\n").is_err(), "a run that did not pass is refused");
        assert_eq!(commit(log), Some("2d23053e4505"));
        assert_eq!(commit("==> cargo xtask test: 718 s\n"), None);
    }
}
