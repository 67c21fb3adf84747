//! The headlines: the sentences at the top of `docs/benchmarks.md` and between the
//! `bench:headlines` markers of README.md, each naming one figure and, where there is one, the
//! design target it meets or misses.
//!
//! Apart from the renderer because README.md is written from them too, and because a
//! headline whose figure was not reported must stop the run before anything is written.

use anyhow::{Context, Result, bail};

use crate::counts;
use crate::records::Records;
use crate::render::format_value;

/// A sentence of the headlines: `{}` is replaced by the figure (its `display`, or its value
/// and unit); with a target, whether the figure meets it is added.
struct Headline {
    bench: &'static str,
    name: &'static str,
    sentence: &'static str,
    target: Option<Target>,
}

/// A design target for a figure.
struct Target {
    /// Met when the value is at most `limit` (otherwise at least).
    at_most: bool,
    limit: f64,
    /// The target in words, e.g. "within 1.5x of bare hyper".
    text: &'static str,
}

impl Target {
    fn met(&self, value: f64) -> bool {
        if self.at_most { value <= self.limit } else { value >= self.limit }
    }
}

/// The headline figures, at the top of `docs/benchmarks.md` and in README.md.
const HEADLINES: &[Headline] = &[
    // The targets are judged on counts, which do not move with the machine's neighbours; the
    // timed figures below keep their place as a user's view, without targets of their own.
    Headline {
        bench: "xtask/counts",
        name: "payments fake / bare hyper, per request",
        sentence: "Counted in instructions, the payments fake spends {} what bare hyper answering a fixed body \
                   spends per refund request served.",
        target: Some(Target { at_most: true, limit: counts::FAKE_OVER_BARE_MAX, text: "at most 1.5x" }),
    },
    Headline {
        bench: "xtask/counts",
        name: "payments fake / wiremock stub, per request",
        sentence: "It spends {} what a stateful refund stub on the `wiremock` crate spends.",
        target: Some(Target { at_most: true, limit: 0.9999, text: "less than the stub" }),
    },
    Headline {
        bench: "xtask/counts",
        name: "generated sim case",
        sentence: "A generated sim case, run against the reference executor in process and checked, costs {}.",
        target: Some(Target {
            at_most: true,
            limit: counts::SIM_CASE_BASELINE_INSTR * counts::SIM_CASE_TARGET,
            text: "at most 0.75x the 3,012,103 instructions it cost before the counts",
        }),
    },
    Headline {
        bench: "xtask/counts",
        name: "fsyncs per confirmed intent, batches of 8",
        sentence: "The reference executor spends {} per confirmed intent proposed in batches of 8 (a raw \
                   single-row commit spends one).",
        target: Some(Target { at_most: true, limit: counts::FSYNC_TARGETS[0].1, text: "at most 1/4" }),
    },
    Headline {
        bench: "xtask/counts",
        name: "fsyncs per confirmed intent, batches of 64",
        sentence: "In batches of 64 it spends {}.",
        target: Some(Target { at_most: true, limit: counts::FSYNC_TARGETS[1].1, text: "at most 1/32" }),
    },
    Headline {
        bench: "fake-services/throughput",
        name: "payments fake / wiremock stub, recording on",
        sentence: "The payments fake, with its ledger, journal and fault engine, creates refunds at {} the rate \
                   of a stateful refund stub written with the `wiremock` crate (as `MockServer::start()` gives it).",
        target: None,
    },
    Headline {
        bench: "fake-services/throughput",
        name: "bare / fake, no rules",
        sentence: "Timed, bare hyper answering a fixed body serves {} the payments fake's rate on the same \
                   transport.",
        target: None,
    },
    Headline {
        bench: "twice-tests/search",
        name: "mutants found, twice",
        sentence: "twice's generator catches {} mutant executors (one classic bug each) within 1,000 generated \
                   cases in at least half of 20 seeds.",
        target: None,
    },
    Headline {
        bench: "twice-tests/search",
        name: "mutants found, baseline at its best setting per mutant",
        sentence: "A protocol-unaware baseline that delays or resets requests as a TCP fault proxy does, on the \
                   same intents, catches {} even with its fault rate tuned per mutant: it cannot make a service \
                   ignore or forget keys, lie in its acks, or crash a worker.",
        target: None,
    },
    Headline {
        bench: "twice-tests/search",
        name: "mutants where twice needs at most the baseline's best",
        sentence: "Of the mutants both catch, twice's generator needs at most the cases the baseline needs at \
                   its best setting for that mutant for {}: swarm testing, faults aimed at writes and the \
                   answers that leave a caller unsure, and small cases first.",
        target: None,
    },
    Headline {
        bench: "twice/run",
        name: "sim over live, same catalog, same executor",
        sentence: "The catalog runs {} as fast in sim as live: same scenarios, same seed, the reference executor \
                   in process against its release binary.",
        target: None,
    },
    Headline {
        bench: "twice/run",
        name: "sim, generated cases, 2 threads",
        sentence: "Sim runs and checks generated cases against the reference executor at {} on 2 cores.",
        target: None,
    },
    Headline {
        bench: "twice/run",
        name: "sim, generated cases, 1 thread",
        sentence: "On one core, sim runs and checks {}.",
        target: None,
    },
    Headline {
        bench: "twice/run",
        name: "simulated over wall time, 2 threads",
        sentence: "Simulated time runs {} faster than the wall clock.",
        target: Some(Target { at_most: false, limit: 1_000.0, text: "1,000x" }),
    },
    Headline {
        bench: "twice/python",
        name: "live, catalog + 20 generated (* scenarios), Python executor, 8 jobs",
        sentence: "The catalog and 20 generated cases run live against the Python example executor (a \
                   process per worker, the real SDKs) in {}, 8 scenarios at a time on 2 cores, as `twice run \
                   --executor` runs them by default; at 2, 8 and 16 at a time every timing-sensitive verdict held.",
        target: Some(Target { at_most: true, limit: 30.0, text: "at most 30 s" }),
    },
    Headline {
        bench: "twice/python",
        name: "live, a buggy executor: catalog + 30 generated, shrinking included",
        sentence: "A live run whose executor has a bug that a dozen generated cases expose ends in {}, every \
                   failure shrunk (or marked as stopped by the 60 s budget) side by side.",
        target: Some(Target { at_most: true, limit: 120.0, text: "at most 120 s" }),
    },
    Headline {
        bench: "executor/intents",
        name: "raw / intents, propose a batch of 64 then drain, FULL",
        sentence: "Raw single-row SQLite commits (WAL, synchronous=FULL) run {} as fast as the reference \
                   executor's intents proposed in batches of 64 (a commit per batch, then a drain: two \
                   commits per pass and a send per intent).",
        target: None,
    },
    Headline {
        bench: "executor/intents",
        name: "raw / intents, propose a batch of 8 then drain, FULL",
        sentence: "In batches of 8, raw commits run {} as fast as intents.",
        target: None,
    },
    Headline {
        bench: "twice/scaling",
        name: "time exponent over intents per scenario, 10 to 1000",
        sentence: "Sim time grows as intents^b with b = {} from 10 to 1,000 intents in one scenario.",
        target: None,
    },
    Headline {
        bench: "twice/scaling",
        name: "run of 10000 generated cases, peak memory above an idle process",
        sentence: "A run of 10,000 generated cases peaks at {} of memory above an idle process.",
        target: Some(Target { at_most: true, limit: 64.0, text: "under 64 MB" }),
    },
    Headline {
        bench: "twice/run",
        name: "results.json of a passing default run",
        sentence: "A passing default run (the catalog and 1,000 generated cases) writes {} of `results.json`.",
        target: Some(Target { at_most: true, limit: 2_000.0, text: "under 2 MB" }),
    },
    Headline {
        bench: "twice/run",
        name: "report.html of a passing default run",
        sentence: "Its `report.html` is {}.",
        target: Some(Target { at_most: true, limit: 1_000.0, text: "under 1 MB" }),
    },
];

/// Where README.md's headlines go: the lines between these two are rewritten.
pub(crate) const README: &str = "README.md";
const HEADLINES_BEGIN: &str = "<!-- bench:headlines:begin (written by `cargo xtask bench`) -->";
const HEADLINES_END: &str = "<!-- bench:headlines:end -->";

/// The headline sentences, one Markdown bullet each; an error names a figure no benchmark
/// reported, so that no sentence goes out with a stale number.
pub(crate) fn headlines(records: &Records) -> Result<Vec<String>> {
    HEADLINES
        .iter()
        .map(|h| {
            let r = records.figure(h.bench, h.name).with_context(|| {
                format!("headline figure `{}` of {} was not reported; nothing written", h.name, h.bench)
            })?;
            let figure = match &r.display {
                Some(text) => text.clone(),
                // A large ratio reads better without its decimals.
                None if r.unit == "x" && r.value.abs() >= 10.0 => format!("{}x", format_value(r.value, "")),
                None if r.unit == "x" => format!("{}x", format_value(r.value, &r.unit)),
                None if r.unit.is_empty() => format_value(r.value, &r.unit),
                None => format!("{} {}", format_value(r.value, &r.unit), r.unit),
            };
            let verdict = match &h.target {
                Some(t) if t.met(r.value) => format!(" Target: {}; met.", t.text),
                Some(t) => format!(" Target: {}; **not met**.", t.text),
                None => String::new(),
            };
            Ok(format!("- {}{verdict}", h.sentence.replacen("{}", &figure, 1)))
        })
        .collect()
}

/// `readme` with the lines between the headline markers replaced by `body`.
pub(crate) fn with_headlines(readme: &str, body: &str) -> Result<String> {
    let (Some(begin), Some(end)) = (readme.find(HEADLINES_BEGIN), readme.find(HEADLINES_END)) else {
        bail!("{README} has no `{HEADLINES_BEGIN}` ... `{HEADLINES_END}` block for the benchmark headlines");
    };
    if end < begin {
        bail!("in {README}, `{HEADLINES_END}` comes before `{HEADLINES_BEGIN}`");
    }
    let head = &readme[..begin + HEADLINES_BEGIN.len()];
    let tail = &readme[end..];
    Ok(if body.is_empty() { format!("{head}\n{tail}") } else { format!("{head}\n{body}\n{tail}") })
}

#[cfg(test)]
mod tests {
    use std::fs;

    /// The counted targets' headlines say the figures the counts judge them by.
    #[test]
    fn the_counted_targets_say_what_they_are_judged_by() {
        use crate::counts::{
            FAKE_OVER_BARE_MAX, FSYNC_TARGETS, SIM_CASE_BASELINE_INSTR, SIM_CASE_TARGET, thousands,
        };
        let text = |name: &str| {
            super::HEADLINES
                .iter()
                .find(|h| h.name == name)
                .and_then(|h| h.target.as_ref())
                .map(|t| t.text)
                .unwrap_or_else(|| panic!("no target on {name}"))
        };
        let sim = text("generated sim case");
        assert!(sim.contains(&thousands(SIM_CASE_BASELINE_INSTR)), "{sim}");
        assert!(sim.contains(&format!("{SIM_CASE_TARGET}x")), "{sim}");
        let fake = text("payments fake / bare hyper, per request");
        assert!(fake.contains(&format!("{FAKE_OVER_BARE_MAX}x")), "{fake}");
        for ((batch, limit), denominator) in FSYNC_TARGETS.iter().zip([4.0, 32.0]) {
            assert_eq!(*limit, 1.0 / denominator);
            let fsync = text(&format!("fsyncs per confirmed intent, batches of {batch}"));
            assert!(fsync.contains(&format!("1/{denominator}")), "{fsync}");
        }
    }

    use super::*;
    use crate::root;

    #[test]
    fn a_star_in_a_headlines_name_stands_for_a_count() {
        let mut records = Records::default();
        records
            .add(r#"{"bench":"b","name":"live, catalog + 20 generated (107 scenarios), 8 jobs","value":1,"unit":"s"}"#)
            .expect("a figure");
        assert!(records.figure("b", "live, catalog + 20 generated (* scenarios), 8 jobs").is_some());
        assert!(records.figure("b", "live, catalog + 20 generated (* scenarios), 2 jobs").is_none());
        assert!(records.figure("b", "live, catalog + 20 generated (107 scenarios), 8 jobs").is_some());
    }

    #[test]
    fn headlines_go_between_the_markers_and_need_their_figures() {
        let readme = format!("# t\n\n{HEADLINES_BEGIN}\n- old\n{HEADLINES_END}\n\nrest\n");
        let written = with_headlines(&readme, "- new").expect("markers present");
        assert_eq!(written, format!("# t\n\n{HEADLINES_BEGIN}\n- new\n{HEADLINES_END}\n\nrest\n"));
        assert!(with_headlines("# no markers", "- x").is_err());
        // Every headline names a figure; with none reported, the first is named in the error.
        if let Some(first) = HEADLINES.first() {
            let error = headlines(&Records::default()).expect_err("no figures");
            assert!(error.to_string().contains(first.name), "{error}");
        }
    }

    #[test]
    fn the_readme_has_the_headline_markers() {
        let readme = fs::read_to_string(root().join(README)).expect("README.md is readable");
        assert!(with_headlines(&readme, "").is_ok());
    }
}
