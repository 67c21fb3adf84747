//! `cargo xtask bench --engines-log FILE`: how long a full `cargo xtask engines` took, per
//! engine (its `  ENGINE  passed in N s` lines) and in all, as section `xtask/engines` of
//! `docs/benchmarks.md`. Like CI's stage times, the run itself is the measurement: five engines'
//! whole catalogs take most of half an hour, too long to repeat inside a benchmark run.

use anyhow::{Result, bail};

use crate::engines::WALL_PREFIX;
use crate::records::Record;

/// The section's `BENCH` id.
pub(crate) const BENCH: &str = "xtask/engines";

/// The longest a full engines run should take on this machine, all five engines.
const TOTAL_S_TARGET: f64 = 1500.0;

/// The figures of a `cargo xtask engines` output: its venvs' preparation, each engine that
/// passed, and the run's wall time (when engines run side by side), or, in the output of a run
/// that ran them one by one, their sum. A run in which an engine failed is refused.
pub(crate) fn figures(log: &str) -> Result<Vec<Record>> {
    let mut figures = Vec::new();
    let prefix = "xtask: the engines' venvs and packages: ready in ";
    let ready = log.lines().find_map(|l| l.strip_prefix(prefix)).and_then(|r| r.strip_suffix(" s"));
    if let Some(value) = ready.and_then(|s| s.trim().parse::<f64>().ok()) {
        figures.push(Record::seconds(BENCH, "venvs and packages (ready, or made)".into(), value));
    }
    let summary = log.rsplit_once("\nxtask: engines\n").map(|(_, s)| s).unwrap_or_default();
    let mut total = 0.0;
    let mut engines = 0;
    // The summary's lines are indented; what follows them (a shell's own line) is not.
    for line in summary.lines().take_while(|l| l.starts_with("  ")).map(str::trim) {
        let Some((engine, rest)) = line.split_once(char::is_whitespace) else { continue };
        let rest = rest.trim();
        let Some(seconds) = rest.strip_prefix("passed in ").and_then(|s| s.strip_suffix(" s")) else {
            bail!("`{line}`: an engine that did not pass; a full run that passed, saved whole, is needed");
        };
        let Ok(value) = seconds.trim().parse::<f64>() else { continue };
        figures.push(Record::seconds(BENCH, format!("`{engine}`: its tests, both routes"), value));
        total += value;
        engines += 1;
    }
    if engines == 0 {
        bail!(
            "no `xtask: engines` summary with an engine that passed: the whole output of `cargo xtask engines` is needed"
        );
    }
    let wall = log.lines().find_map(|l| l.strip_prefix(WALL_PREFIX)).and_then(|r| r.split(" s").next());
    if let Some(value) = wall.and_then(|s| s.trim().parse::<f64>().ok()) {
        total = value;
    }
    let mut all = Record::seconds(BENCH, format!("the {engines} engines' tests, in all (wall time)"), total);
    let met = if total <= TOTAL_S_TARGET { "met" } else { "**not met**" };
    all.notes = Some(format!("Target: all five engines in at most {TOTAL_S_TARGET:.0} s; {met}."));
    figures.push(all);
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::{WALL_PREFIX, figures};

    #[test]
    fn each_engine_and_their_sum_are_read_and_a_failed_run_refused() {
        let log = "xtask: the engines' venvs and packages: ready in 2.8 s\n...\n\nxtask: engines\n  celery     passed in 271 s\n  \
                   dbos       passed in 228 s\nexit 0\n";
        let got = figures(log).expect("a passed run");
        let names: Vec<&str> = got.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "venvs and packages (ready, or made)",
                "`celery`: its tests, both routes",
                "`dbos`: its tests, both routes",
                "the 2 engines' tests, in all (wall time)"
            ]
        );
        assert_eq!(got[3].value, 499.0);
        assert!(got[3].notes.as_deref().is_some_and(|n| n.ends_with("met.")), "{:?}", got[3].notes);
        let parallel = format!("{log}{WALL_PREFIX}300 s (2 engines at a time)\n");
        assert_eq!(figures(&parallel).expect("a passed run")[3].value, 300.0);
        assert!(figures("\nxtask: engines\n  celery     FAILED in 30 s\n").is_err());
        assert!(figures("nothing").is_err());
    }
}
