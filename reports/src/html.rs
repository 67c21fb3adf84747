//! `report.html`: one self-contained page with a timeline per scenario.
//!
//! The page is built with `maud`, which escapes every value it interpolates; the only markup
//! that goes in unescaped is static ([`CSS`], `html/style.css`, and [`SCRIPT`],
//! `html/timeline.js`) and the timelines' JSON, escaped for a script element by
//! [`timeline::script_json`]. A Content-Security-Policy allows that one script by its SHA-256
//! hash and nothing else: no other script, no fetch, no external resource, so that even a
//! missed escape could neither run a script nor load anything.
//!
//! Timelines are drawn on demand: each scenario's section carries its timeline as JSON (the
//! lanes, rows, classes and labels worked out here) and the script draws the table the first
//! time the section is open, so that the page does not build every failure's table up
//! front. A `<noscript>` table lists the same events as plain text. Everything else (totals,
//! table of contents, verdicts, evidence, intent tables, replay commands, the passed rows) is
//! plain HTML and reads without JavaScript. Failing scenarios are `<details open>` when there
//! are at most [`FAILURES_OPEN_MAX`] of them, passing ones closed, and the table of contents
//! uses plain `#anchor` links (the script opens the section a link points to).
//!
//! Timelines are a table with time going down and one column ("lane") per worker, per
//! service and for the harness. Only the first [`TIMELINES_PASSING_MAX`] passing scenarios
//! get one, so that a run of ten thousand scenarios stays a page a browser can open; every
//! scenario that did not pass gets its timeline.
//!
//! Every verdict is listed with its status: held, violated, or not judged with the reason the
//! checker gave, so that an invariant the run could not judge never passes for one that held.
//! Hazards (safeguards the executor left unused, though nothing exploited them) get a block of
//! their own per scenario and a count in the header; they are never drawn as failures.
//!
//! Rendering is deterministic (same results, same bytes): maps are ordered, sorts stable, and
//! nothing reads the clock.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use vocabulary::{ACTIONS, Effect, JournalEntry, State};

mod marks;
mod passed;
mod scenario;
mod timeline;

use marks::*;
use passed::*;
use scenario::*;
use timeline::*;

use results::{
    Claim, Hazard, IntentResult, Moment, Observed, Outcome, Route, RunResults, ScenarioResult, Source,
    Status, Summary,
};

/// Passing scenarios that still hold their observation (in position order) that get a timeline; the others get their header,
/// verdicts and intent table only.
pub const TIMELINES_PASSING_MAX: usize = 300;

/// Failing scenarios whose sections start open when there are at most this many; with more,
/// all start closed, so that opening the page draws no timeline until one is asked for.
pub const FAILURES_OPEN_MAX: usize = 10;

/// The page's one script (`html/timeline.js`): draws a timeline from its JSON when its
/// section opens. Static, and allowed by the CSP by its hash, never as `'unsafe-inline'`.
pub const SCRIPT: &str = include_str!("html/timeline.js");

/// No fetches, no external anything: inline styles, data: images and [`SCRIPT`] (by its
/// SHA-256) only.
pub fn csp() -> String {
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(SCRIPT.as_bytes()));
    format!("default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{hash}'")
}

/// The harness's own lane in timelines.
const HARNESS_LANE: &str = "harness";

/// The whole page.
pub fn render(run: &RunResults) -> String {
    let ids = section_ids(&run.results);
    let timelines = timeline_budget(&run.results);
    // Passed cases in their compact form (a summary, no observation) get a row each.
    let rows: Vec<usize> = (0..run.results.len()).filter(|&i| run.results[i].summary.is_some()).collect();
    let failures: Vec<usize> =
        (0..run.results.len()).filter(|&i| run.results[i].outcome != Outcome::Passed).collect();
    let open_failures = failures.len() <= FAILURES_OPEN_MAX;
    let t = &run.totals;
    let mut title = format!(
        "twice report: {} violated, {} executor errors, {} passed of {} scenarios",
        t.violated, t.executor_errors, t.passed, t.scenarios
    );
    if t.hazards > 0 {
        title.push_str(&format!(", {}", count(t.hazards, "hazard")));
    }
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy" content=(csp());
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(CSS)) }
            }
            body {
                (header(run, &ids, &failures))
                main {
                    @for (i, result) in run.results.iter().enumerate() {
                        @if result.summary.is_none() {
                            (scenario(result, &ids[i], timelines[i], open_failures))
                        }
                    }
                    @if !rows.is_empty() {
                        (passed_rows(run, &rows, &ids))
                    }
                }
                script { (PreEscaped(SCRIPT)) }
            }
        }
    };
    page.into_string()
}

/// One unique, valid id per result: `s-POSITION`, with the result's index appended when two
/// results claim the same position (a hand-merged file, say).
fn section_ids(results: &[ScenarioResult]) -> Vec<String> {
    let mut taken = BTreeSet::new();
    results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let id = format!("s-{}", r.position);
            if taken.insert(id.clone()) {
                id
            } else {
                let id = format!("s-{}-{i}", r.position);
                taken.insert(id.clone());
                id
            }
        })
        .collect()
}

/// Which results get a timeline: every one that did not pass, and the first
/// [`TIMELINES_PASSING_MAX`] passing ones by position.
fn timeline_budget(results: &[ScenarioResult]) -> Vec<bool> {
    let mut drawn: Vec<bool> = results.iter().map(|r| r.outcome != Outcome::Passed).collect();
    let mut passing: Vec<usize> =
        (0..results.len()).filter(|&i| !drawn[i] && results[i].summary.is_none()).collect();
    // Stable: equal positions keep their order in the file.
    passing.sort_by_key(|&i| results[i].position);
    for &i in passing.iter().take(TIMELINES_PASSING_MAX) {
        drawn[i] = true;
    }
    drawn
}

fn outcome_class(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Passed => "passed",
        Outcome::Violated => "violated",
        Outcome::ExecutorError => "executor-error",
    }
}

fn source_text(source: &Source) -> String {
    match source {
        Source::Catalog => "catalog".to_string(),
        Source::File { path } => format!("file {path}"),
        Source::Generated { index } => format!("generated case {index}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The page header: the run's facts, totals, legend and table of contents.

fn header(run: &RunResults, ids: &[String], failures: &[usize]) -> Markup {
    let t = &run.totals;
    // A long list of every scenario starts closed; a short one open.
    let all_open = run.results.len() <= 40;
    html! {
        header.run {
            h1 { "twice report" }
            p.facts {
                span { "version " b { (run.tool_version) } }
                span { "seed " b { (run.seed) } }
                span { "driver " b { (run.driver) } }
                span { "executor " b { (run.executor) } }
                @if let Some(shard) = run.shard {
                    span { "shard " b { (shard) } }
                }
            }
            p.totals {
                span.badge.violated { (t.violated) " violated" }
                span.badge.executor-error { (t.executor_errors) " executor errors" }
                span.badge.passed { (t.passed) " passed" }
                span.badge.hazard { (count(t.hazards, "hazard")) }
                span.of { "of " (t.scenarios) " scenarios" }
                @if run.strict {
                    " " span.strict { "--strict: hazards fail the run" }
                }
            }
            (legend())
            nav.toc {
                div.toc-failures {
                    h2 { "Failures (" (failures.len()) ")" }
                    @if failures.is_empty() && run.strict && t.hazards > 0 {
                        p.none.strict-fail {
                            "Every scenario passed, but with --strict the " (t.hazards)
                            " hazards below fail the run."
                        }
                    } @else if failures.is_empty() {
                        p.none { "None: every scenario passed." }
                    } @else {
                        ol {
                            @for &i in failures {
                                @let r = &run.results[i];
                                li {
                                    a href=(format!("#{}", ids[i])) { (r.name) }
                                    " "
                                    span.badge.small.(outcome_class(r.outcome)) { (r.outcome.as_str()) }
                                    @for v in r.violations() {
                                        " " span.inv-chip { (v.invariant) }
                                    }
                                }
                            }
                        }
                    }
                }
                details.toc-all open[all_open] {
                    summary { "All scenarios (" (run.results.len()) ")" }
                    ol.all {
                        @for (i, r) in run.results.iter().enumerate() {
                            li.(outcome_class(r.outcome)) {
                                a href=(format!("#{}", ids[i])) { (r.name) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Each state's colour (class `st-STATE`); what is not a state's exact name is `st-other`.
fn state_class(state: &str) -> &'static str {
    match State::parse(state) {
        Some(State::Recorded) => "st st-recorded",
        Some(State::Blocked) => "st st-blocked",
        Some(State::Submitted) => "st st-submitted",
        Some(State::Confirmed) => "st st-confirmed",
        Some(State::Failed) => "st st-failed",
        Some(State::Unknown) => "st st-unknown",
        Some(State::Escalated) => "st st-escalated",
        None => "st st-other",
    }
}

fn legend() -> Markup {
    html! {
        div.legend {
            span.legend-title { "Legend" }
            span.item { span.fault-tag { "⚡ fault" } " a fault fired on this request" }
            span.item { span.dup-label { "✖ 2nd effect" } " a second effect for one intent or business key" }
            span.item { span.cause-label { "⟶ cause" } " the request that made it" }
            span.item { span.tag.replayed { "replayed" } " an idempotent replay" }
            span.item.verdict-marks {
                span.v-held { "✔ held" } " "
                span.v-violated { "✘ violated" } " "
                span.v-not-judged { "○ not judged" } " (nothing in the run to judge it on; the reason follows)"
            }
            span.item { span.badge.small.hazard { "⚠ hazard" } " a safeguard left unused, not exploited in this run" }
            span.item.bands {
                span.band-chip.band-crash { "☠ crash" }
                span.band-chip.band-pause { "‖ pause" }
                span.band-chip.band-clock_jump { "» clock jump" }
                " process events span the row"
            }
            span.item.states {
                "states: "
                @for s in State::NAMES {
                    span class=(state_class(s)) { (s) } " "
                }
            }
        }
    }
}

/// The style sheet: the one piece of markup that goes in unescaped, and a constant.
const CSS: &str = include_str!("html/style.css");

/// `1 hazard`, `2 hazards`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}
