//! `report.html`: one self-contained page with a timeline per scenario.
//!
//! The page is built with `maud`, which escapes every value it interpolates; the only markup
//! that goes in unescaped is the static [`CSS`]. A Content-Security-Policy forbids scripts,
//! fetches and external resources, so that even a missed escape could neither run a script
//! nor load anything. The page has no JavaScript: failing scenarios are `<details open>`,
//! passing ones closed, and the table of contents uses plain `#anchor` links.
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

use fake_services::{Effect, JournalEntry};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::model::{
    Claim, Hazard, IntentResult, Moment, Outcome, RunResults, ScenarioResult, Source, Status,
};

/// Passing scenarios (in position order) that get a timeline; the others get their header,
/// verdicts and intent table only.
pub const TIMELINES_PASSING_MAX: usize = 300;

/// No scripts, no fetches, no external anything: inline styles and data: images only.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

/// The effect parameters that are business keys, as the checker attributes them
/// (`harness::check`: `payment_intent` for refunds, `external_id` for workspaces, `to` for
/// chain transfers). A second effect of the same kind with the same key is a duplicate whatever
/// intent it belongs to. A file's `key` is not one: two intents may write the same object.
const BUSINESS_KEY_PARAMS: [&str; 3] = ["payment_intent", "external_id", "to"];

/// The harness's own lane in timelines.
const HARNESS_LANE: &str = "harness";

/// The whole page.
pub fn render(run: &RunResults) -> String {
    let ids = section_ids(&run.results);
    let timelines = timeline_budget(&run.results);
    let failures: Vec<usize> =
        (0..run.results.len()).filter(|&i| run.results[i].outcome != Outcome::Passed).collect();
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
                meta http-equiv="Content-Security-Policy" content=(CSP);
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (PreEscaped(CSS)) }
            }
            body {
                (header(run, &ids, &failures))
                main {
                    @for (i, result) in run.results.iter().enumerate() {
                        (scenario(result, &ids[i], timelines[i]))
                    }
                }
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
    let mut passing: Vec<usize> = (0..results.len()).filter(|&i| !drawn[i]).collect();
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

/// The states executors report, each with its colour (class `st-STATE`).
const STATES: [&str; 7] = ["recorded", "blocked", "submitted", "confirmed", "failed", "unknown", "escalated"];

fn state_class(state: &str) -> &'static str {
    match state {
        "recorded" => "st st-recorded",
        "blocked" => "st st-blocked",
        "submitted" => "st st-submitted",
        "confirmed" => "st st-confirmed",
        "failed" => "st st-failed",
        "unknown" => "st st-unknown",
        "escalated" => "st st-escalated",
        _ => "st st-other",
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
                @for s in STATES {
                    span class=(state_class(s)) { (s) } " "
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One scenario.

fn scenario(r: &ScenarioResult, id: &str, draw_timeline: bool) -> Markup {
    let failed = r.outcome != Outcome::Passed;
    let marks = Marks::of(r);
    let broken: Vec<&str> = r.violations().map(|v| v.invariant.as_str()).collect();
    html! {
        section.scenario.(outcome_class(r.outcome)) id=(id) {
            details open[failed] {
                summary {
                    span.badge.(outcome_class(r.outcome)) { (r.outcome.as_str()) }
                    " "
                    span.name { (r.name) }
                    " "
                    span.pos { "#" (r.position) }
                    @for inv in &broken {
                        " " span.inv-chip { (inv) }
                    }
                    @if !r.hazards.is_empty() {
                        " " span.badge.small.hazard { "⚠ " (count(r.hazards.len(), "hazard")) }
                    }
                }
                div.body {
                    p.meta {
                        span { "source " b { (source_text(&r.source)) } }
                        span { "seed " code { (r.seed) } }
                        @for (service, count) in &r.effects {
                            span { (service) " effects " b { (count) } }
                        }
                    }
                    @if failed {
                        (failure(r))
                    } @else {
                        div.replay { span.label { "replay" } code.replay { (r.replay) } }
                    }
                    (verdicts(r))
                    @if !r.hazards.is_empty() {
                        (hazards(&r.hazards))
                    }
                    @if draw_timeline {
                        (timeline(r, &marks))
                    } @else {
                        p.no-timeline {
                            "Timeline not drawn: only the first " (TIMELINES_PASSING_MAX)
                            " passing scenarios get one here. It is in results.json (this scenario's "
                            code { "observed.timeline" } ", " code { "journals" } " and " code { "ledgers" }
                            "); to run it again: " code { (r.replay) }
                        }
                    }
                    (intents(r, &marks))
                }
            }
        }
    }
}

/// What a failure shows before its timeline: every violated invariant with all its evidence,
/// the executor's error, the minimal scenario and how to replay.
fn failure(r: &ScenarioResult) -> Markup {
    html! {
        div.failure {
            @if let Some(error) = &r.observed.executor_error {
                div.violation.exec-error {
                    h3.invariant { "✘ executor error" }
                    ul.evidence { li { (error) } }
                }
            }
            @for v in r.violations() {
                div.violation {
                    h3.invariant { "✘ " (v.invariant) }
                    ul.evidence {
                        @for line in &v.evidence { li { (line) } }
                    }
                }
            }
            @if let Some(path) = &r.shrunk {
                p.shrunk { span.label { "minimal scenario" } code { (path) } }
            }
            @if let Some(shrink) = &r.shrink {
                p.shrink { span.label { "shrinking" } (shrink.line()) }
            }
            div.replay { span.label { "replay" } code.replay { (r.replay) } }
        }
    }
}

/// Every verdict in checker order: held and violated ones as short marks, not-judged ones each
/// on a line of their own with the reason.
fn verdicts(r: &ScenarioResult) -> Markup {
    html! {
        @if !r.verdicts.is_empty() {
            ul.verdicts {
                @for v in &r.verdicts {
                    @match v.status {
                        Status::Held => { li.held { "✔ " (v.invariant) } }
                        Status::Violated => { li.violated { "✘ " (v.invariant) } }
                        Status::NotJudged => {
                            li.not-judged {
                                "○ " (v.invariant) " not judged: "
                                span.reason { (v.reason.as_deref().unwrap_or("no reason given")) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The scenario's hazards: what was left unguarded, and the catalog scenario that would
/// exploit it, with the command that runs it.
fn hazards(hazards: &[Hazard]) -> Markup {
    html! {
        div.hazards {
            h3 { "⚠ " (count(hazards.len(), "hazard")) }
            p.hazard-note {
                "Safeguards the service's contract offered and the executor did not use. Nothing in \
                 this run exploited them, so no invariant broke."
            }
            table.hazards {
                thead {
                    tr { th { "hazard" } th { "service" } th { "intent" } th { "what was seen" } th { "would be exploited by" } }
                }
                tbody {
                    @for h in hazards {
                        tr {
                            td.kind { (h.kind) }
                            td.service { (h.service) }
                            td.intent {
                                @match &h.intent {
                                    Some(intent) => { code { (intent) } }
                                    None => { span.muted { "-" } }
                                }
                            }
                            td.detail { (h.detail) }
                            td.exploit {
                                span.scenario { (h.exploited_by) }
                                br;
                                code.command { (h.command) }
                            }
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Duplicates and their causes.

/// What the timeline and the intent table highlight in one scenario, precomputed once.
#[derive(Default)]
struct Marks<'a> {
    /// (service, ledger seq) of an effect that is the 2nd or later for its intent or business
    /// key, with what it duplicates ("second effect for intent refund-4812").
    duplicate: BTreeMap<(&'a str, u64), String>,
    /// (service, ledger seq) of the first effect of a group that has duplicates.
    first: BTreeMap<(&'a str, u64), String>,
    /// (service, request id) of a request that made a duplicate, with which one.
    cause: BTreeMap<(&'a str, &'a str), String>,
    /// (service, ledger seq) to the intent the checker attributed the effect to.
    owner: BTreeMap<(&'a str, u64), &'a str>,
}

fn ordinal(n: usize) -> String {
    match n {
        1 => "first".to_string(),
        2 => "second".to_string(),
        3 => "third".to_string(),
        n => format!("{n}th"),
    }
}

impl<'a> Marks<'a> {
    fn of(r: &'a ScenarioResult) -> Marks<'a> {
        let mut marks = Marks::default();
        // By intent: the checker's attribution, in commit order.
        for intent in &r.intents {
            let mut refs: Vec<_> = intent.effects.iter().collect();
            refs.sort_by_key(|e| (e.at_ms, e.service.as_str(), e.seq));
            for (n, e) in refs.iter().enumerate() {
                let key = (e.service.as_str(), e.seq);
                marks.owner.insert(key, intent.id.as_str());
                if refs.len() < 2 {
                    continue;
                }
                let what = format!("{} effect for intent {}", ordinal(n + 1), intent.id);
                if n == 0 {
                    marks.first.insert(key, what);
                } else {
                    marks.duplicate.insert(key, what);
                }
            }
        }
        // By business key, which also catches effects no intent claimed.
        for (service, ledger) in &r.observed.ledgers {
            let mut groups: BTreeMap<(&str, &str, &str), Vec<&Effect>> = BTreeMap::new();
            for effect in ledger {
                if let Some((param, value)) = business_key(effect) {
                    groups.entry((effect.kind.as_str(), param, value)).or_default().push(effect);
                }
            }
            for ((_, param, value), effects) in groups.iter().filter(|(_, g)| g.len() > 1) {
                for (n, e) in effects.iter().enumerate() {
                    let key = (service.as_str(), e.seq);
                    if marks.duplicate.contains_key(&key) || marks.first.contains_key(&key) {
                        continue;
                    }
                    let what = format!("{} effect for {param} {value}", ordinal(n + 1));
                    if n == 0 {
                        marks.first.insert(key, what);
                    } else {
                        marks.duplicate.insert(key, what);
                    }
                }
            }
        }
        // The requests that made the duplicates.
        let by_seq: BTreeMap<(&str, u64), &Effect> = r
            .observed
            .ledgers
            .iter()
            .flat_map(|(s, ledger)| ledger.iter().map(move |e| ((s.as_str(), e.seq), e)))
            .collect();
        for (&(service, seq), what) in &marks.duplicate {
            if let Some(effect) = by_seq.get(&(service, seq)) {
                marks.cause.insert((service, effect.request_id.as_str()), format!("made the {what}"));
            }
        }
        marks
    }
}

/// The effect's business key parameter and value, if it has one.
fn business_key(effect: &Effect) -> Option<(&'static str, &str)> {
    BUSINESS_KEY_PARAMS.iter().find_map(|&p| effect.params.get(p).and_then(|v| v.as_str()).map(|v| (p, v)))
}

// ---------------------------------------------------------------------------------------------
// The timeline.

#[derive(Clone, Copy, PartialEq, Eq)]
enum LaneKind {
    Worker,
    Service,
    Harness,
}

impl LaneKind {
    fn class(self) -> &'static str {
        match self {
            LaneKind::Worker => "lane lane-worker",
            LaneKind::Service => "lane lane-service",
            LaneKind::Harness => "lane lane-harness",
        }
    }

    fn label(self) -> &'static str {
        match self {
            LaneKind::Worker => "worker",
            LaneKind::Service => "service",
            LaneKind::Harness => "test driver",
        }
    }
}

/// What one row of a timeline shows.
enum What<'a> {
    Moment(&'a Moment),
    Request(&'a str, &'a JournalEntry),
    Effect(&'a str, &'a Effect),
}

struct Event<'a> {
    at_ms: u64,
    /// The order within one millisecond (see [`rank`]).
    rank: u8,
    lane: usize,
    what: What<'a>,
}

/// Within one millisecond of virtual time, the order that reads as cause and effect: what the
/// harness did, then what workers decided and sent, then the requests, then the effects, then
/// what workers concluded from the answers.
fn rank(moment: &Moment, lane: LaneKind) -> u8 {
    if lane == LaneKind::Harness || moment.kind == "clock_jump" {
        return 0;
    }
    if moment.kind != "state" {
        return 1;
    }
    match state_of(&moment.detail).1 {
        "recorded" | "blocked" | "submitted" => 1,
        _ => 4,
    }
}
const RANK_REQUEST: u8 = 2;
const RANK_EFFECT: u8 = 3;

/// `ID -> STATE` split in two; a detail without the arrow is all intent.
fn state_of(detail: &str) -> (&str, &str) {
    detail.split_once(" -> ").unwrap_or((detail, ""))
}

/// Orders worker names so that `w2` comes before `w10`.
fn natural_key(name: &str) -> (&str, u64, &str) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, number) = name.split_at(name.len() - digits);
    (stem, number.parse().unwrap_or(0), name)
}

fn timeline(r: &ScenarioResult, marks: &Marks<'_>) -> Markup {
    let observed = &r.observed;
    // Lanes: workers, then services, then the harness.
    let mut services: BTreeSet<&str> =
        observed.journals.keys().chain(observed.ledgers.keys()).map(String::as_str).collect();
    services.extend(observed.timeline.iter().filter(|m| m.kind == "clock_jump").map(|m| m.lane.as_str()));
    let mut workers: Vec<&str> = observed
        .timeline
        .iter()
        .map(|m| m.lane.as_str())
        .filter(|l| *l != HARNESS_LANE && !services.contains(l))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    workers.sort_by_key(|w| natural_key(w));
    let mut lanes: Vec<(&str, LaneKind)> = workers.iter().map(|w| (*w, LaneKind::Worker)).collect();
    lanes.extend(services.iter().map(|s| (*s, LaneKind::Service)));
    lanes.push((HARNESS_LANE, LaneKind::Harness));
    let column: BTreeMap<&str, usize> = lanes.iter().enumerate().map(|(i, (l, _))| (*l, i)).collect();
    let column_of = |lane: &str| column.get(lane).copied().unwrap_or(lanes.len() - 1);

    let mut events: Vec<Event<'_>> = Vec::with_capacity(observed.timeline.len());
    for m in &observed.timeline {
        let lane = column_of(&m.lane);
        events.push(Event { at_ms: m.at_ms, rank: rank(m, lanes[lane].1), lane, what: What::Moment(m) });
    }
    for (service, journal) in &observed.journals {
        let lane = column_of(service);
        for entry in journal {
            events.push(Event {
                at_ms: entry.at_ms,
                rank: RANK_REQUEST,
                lane,
                what: What::Request(service, entry),
            });
        }
    }
    for (service, ledger) in &observed.ledgers {
        let lane = column_of(service);
        for effect in ledger {
            events.push(Event {
                at_ms: effect.at_ms,
                rank: RANK_EFFECT,
                lane,
                what: What::Effect(service, effect),
            });
        }
    }
    // Stable: equal time and rank keep the order they were observed in.
    events.sort_by_key(|e| (e.at_ms, e.rank));
    let Some(base_ms) = events.first().map(|e| e.at_ms) else {
        return html! { p.no-events { "No events were observed." } };
    };
    let mut busy = vec![false; lanes.len()];
    for e in &events {
        busy[e.lane] = true;
    }

    html! {
        div.timeline-wrap {
            p.caption {
                "Timeline: time goes down, one column per worker, service and the test driver; "
                "times count from the scenario's first event. Within one millisecond: the test driver, "
                "then workers' decisions, requests, effects, and what workers concluded."
            }
            table.timeline {
                thead {
                    tr {
                        th.time { "time" }
                        @for (lane, (name, kind)) in lanes.iter().enumerate() {
                            th class=(if busy[lane] { kind.class().to_string() } else { format!("{} idle", kind.class()) }) data-lane=(name) {
                                (name) small { (kind.label()) @if !busy[lane] { " (idle)" } }
                            }
                        }
                    }
                }
                tbody {
                    @for (i, e) in events.iter().enumerate() {
                        @let same_ms = i > 0 && events[i - 1].at_ms == e.at_ms;
                        @let new_ms = i > 0 && !same_ms;
                        tr class=(if new_ms { format!("{} new-ms", row_class(e, marks)) } else { row_class(e, marks).to_string() }) {
                            td.time.same-ms[same_ms] { "+" (e.at_ms - base_ms) " ms" }
                            @for lane in 0..lanes.len() {
                                @if lane == e.lane {
                                    td.cell { (event_markup(e, marks, base_ms)) }
                                } @else {
                                    td {}
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn row_class(e: &Event<'_>, marks: &Marks<'_>) -> &'static str {
    match &e.what {
        What::Moment(m) => match m.kind.as_str() {
            "crash" => "ev band band-crash",
            "pause" => "ev band band-pause",
            "resume" => "ev band band-resume",
            "clock_jump" => "ev band band-clock_jump",
            "heal" => "ev band band-heal",
            _ => "ev",
        },
        What::Request(service, entry) => {
            if marks.cause.contains_key(&(*service, entry.request_id.as_str())) {
                "ev row-cause"
            } else if entry.faults.is_empty() {
                "ev"
            } else {
                "ev row-fault"
            }
        }
        What::Effect(service, effect) => {
            if marks.duplicate.contains_key(&(*service, effect.seq)) {
                "ev row-dup"
            } else {
                "ev"
            }
        }
    }
}

fn event_markup(e: &Event<'_>, marks: &Marks<'_>, base_ms: u64) -> Markup {
    match &e.what {
        What::Moment(m) => moment_markup(m),
        What::Request(service, entry) => request_markup(service, entry, marks, base_ms),
        What::Effect(service, effect) => effect_markup(service, effect, marks),
    }
}

fn moment_markup(m: &Moment) -> Markup {
    let icon = match m.kind.as_str() {
        "start" => "▸ ",
        "crash" => "☠ ",
        "pause" => "‖ ",
        "resume" => "▶ ",
        "clock_jump" => "» ",
        "heal" => "✚ ",
        "reconcile" => "↻ ",
        _ => "",
    };
    html! {
        @if m.kind == "state" {
            @let (intent, state) = state_of(&m.detail);
            div.moment.state {
                span.intent { (intent) } " → " span class=(state_class(state)) { (state) }
            }
        } @else {
            div class=(format!("moment m-{}", css_word(&m.kind))) {
                span.kind { (icon) (m.kind.replace('_', " ")) } " " span.detail { (m.detail) }
            }
        }
    }
}

/// A word safe in a class name: letters, digits, `-` and `_`, the rest dropped.
fn css_word(word: &str) -> String {
    word.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect()
}

fn request_markup(service: &str, entry: &JournalEntry, marks: &Marks<'_>, base_ms: u64) -> Markup {
    let answered = entry.outcome == "answered";
    let status = match (answered, entry.status) {
        (true, Some(code)) => code.to_string(),
        _ => entry.outcome.clone(),
    };
    let status_class = match (answered, entry.status) {
        (true, Some(code)) if code < 400 => "status ok",
        (true, _) => "status err",
        _ => "status lost",
    };
    let status_title = match entry.outcome.as_str() {
        "closed" => "the connection closed without a reply",
        "reset" => "the connection was reset",
        "held" => "the reply was held back past the caller's patience",
        "abandoned" => "the caller went away before the service finished",
        "pending" => "the request had not ended when the run ended",
        _ => "the service's answer",
    };
    let cause = marks.cause.get(&(service, entry.request_id.as_str()));
    html! {
        div.req.cause[cause.is_some()] {
            span.method { (entry.method) } " " span.path { (entry.path) }
            " → " span class=(status_class) title=(status_title) { (status) }
            @if entry.replayed { " " span.tag.replayed { "replayed" } }
            @for fault in &entry.faults {
                " " span.fault-tag title=(format!("rule {}", fault.rule)) { "⚡ " (fault.fault) }
            }
            @if let Some(ended) = entry.ended_ms.filter(|&t| t > entry.at_ms) {
                " " small.ended { "ended +" (ended.saturating_sub(base_ms)) " ms" }
            }
            div.sub {
                @match &entry.idempotency_key {
                    Some(key) => { small.key { "key " (key) } }
                    None => { small.key.none { "no key" } }
                }
                " " small.reqid { (entry.request_id) }
            }
            @if let Some(what) = cause {
                div.cause-label { "⟶ " (what) }
            }
        }
    }
}

fn effect_markup(service: &str, effect: &Effect, marks: &Marks<'_>) -> Markup {
    let key = (service, effect.seq);
    let duplicate = marks.duplicate.get(&key);
    let first = marks.first.get(&key);
    html! {
        div.effect.dup[duplicate.is_some()].first[first.is_some()] {
            span.ekind { (effect.kind) } " " span.obj { (effect.object_id) } " " span.seq { "(seq " (effect.seq) ")" }
            @if let Some(owner) = marks.owner.get(&key) {
                " " small.owner { "for " (owner) }
            }
            @if let Some(what) = duplicate {
                div.dup-label { "✖ " (what) }
            } @else if let Some(what) = first {
                div.first-label { (what) }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The intent table.

fn intents(r: &ScenarioResult, marks: &Marks<'_>) -> Markup {
    let claims: BTreeMap<&str, &Claim> = r.claims.iter().map(|c| (c.id.as_str(), c)).collect();
    let known: BTreeSet<&str> = r.intents.iter().map(|i| i.id.as_str()).collect();
    let stray: Vec<&Claim> = r.claims.iter().filter(|c| !known.contains(c.id.as_str())).collect();
    let observed = &r.observed;
    html! {
        @if !r.intents.is_empty() || !stray.is_empty() {
            table.intents {
                thead {
                    tr { th { "intent" } th { "action" } th { "final state" } th { "attempts" } th { "effects" } th { "evidence" } }
                }
                tbody {
                    @for intent in &r.intents {
                        (intent_row(intent, claims.get(intent.id.as_str()).copied(), marks))
                    }
                    @for claim in stray {
                        tr.stray {
                            td { code { (claim.id) } }
                            td.muted { "not in the scenario" }
                            td { span class=(state_class(&claim.state)) { (claim.state) } }
                            td { (claim.attempts) }
                            td {}
                            td.evidence { code { (claim.evidence) } }
                        }
                    }
                }
            }
        }
        @if !observed.unacknowledged.is_empty() {
            p.unacked {
                "not acknowledged: "
                @for (id, why) in &observed.unacknowledged { code { (id) } " (" (why) ") " }
            }
        }
        @if !observed.unsupported.is_empty() {
            p.unsupported {
                "unsupported actions: "
                @for action in &observed.unsupported { code { (action) } " " }
            }
        }
    }
}

fn intent_row(intent: &IntentResult, claim: Option<&Claim>, marks: &Marks<'_>) -> Markup {
    html! {
        tr {
            td { code { (intent.id) } }
            td { (intent.action) @if intent.unsupported { " " span.tag { "unsupported" } } }
            td {
                @match &intent.state {
                    Some(state) => { span class=(state_class(state)) { (state) } }
                    None => { span.muted { "never reported" } }
                }
            }
            td {
                @match intent.attempts {
                    Some(n) => { (n) }
                    None => { span.muted { "-" } }
                }
            }
            td {
                @if intent.effects.is_empty() {
                    span.muted { "none" }
                } @else {
                    ul.effects {
                        @for e in &intent.effects {
                            li.dup[marks.duplicate.contains_key(&(e.service.as_str(), e.seq))] {
                                (e.service) " " code { (e.object_id) } " (seq " (e.seq) ")"
                            }
                        }
                    }
                }
            }
            td.evidence {
                @if let Some(claim) = claim.filter(|c| !c.evidence.is_null()) {
                    code { (claim.evidence) }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The style sheet: the one piece of markup that goes in unescaped, and a constant.

const CSS: &str = r#"
:root {
  --ink: #1f2328; --muted: #656d76; --line: #d0d7de; --paper: #ffffff; --bg: #f3f5f7;
  --red: #c62828; --red-bg: #fdecec; --red-line: #ef9a9a;
  --green: #1b7f3b; --green-bg: #e3f4e8;
  --amber: #9a5b00; --amber-bg: #fff1cc;
  --grey: #57606a; --grey-bg: #eaeef2;
  --purple: #6f2da8; --purple-bg: #f1e6fb;
  --blue: #1a5fb4; --blue-bg: #e5eefb;
  --teal: #0b6e6e; --teal-bg: #e0f2f1;
}
* { box-sizing: border-box; }
html { background: var(--bg); }
body { margin: 0; color: var(--ink); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif; }
code, .mono, .key, .reqid, .obj, .path { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
a { color: var(--blue); }
h1 { font-size: 20px; margin: 0 0 6px; }
h2 { font-size: 14px; margin: 8px 0 4px; }
header.run { background: var(--paper); border-bottom: 1px solid var(--line); padding: 12px 20px 10px; }
.facts span { margin-right: 18px; color: var(--muted); }
.facts b { color: var(--ink); font-weight: 600; }
.totals { margin: 6px 0; }
.totals .of { color: var(--muted); margin-left: 6px; }
.badge { display: inline-block; border-radius: 10px; padding: 1px 9px; font-weight: 600; font-size: 12.5px; margin-right: 4px; }
.badge.small { font-size: 11px; padding: 0 7px; }
.badge.passed { background: var(--green-bg); color: var(--green); }
.badge.violated { background: var(--red); color: #fff; }
.badge.executor-error { background: var(--amber-bg); color: var(--amber); border: 1px solid #e8c46a; }
.inv-chip { display: inline-block; font-size: 11.5px; border: 1px solid var(--red-line); color: var(--red); border-radius: 4px; padding: 0 5px; background: var(--red-bg); }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; align-items: center; font-size: 12px; color: var(--muted); border: 1px solid var(--line); border-radius: 6px; padding: 5px 10px; margin: 6px 0; background: #fafbfc; }
.legend-title { font-weight: 700; color: var(--ink); }
.legend .band-chip { display: inline-block; padding: 0 6px; border-radius: 3px; margin-right: 4px; color: var(--ink); }
.toc { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 24px; align-items: start; }
.toc ol { margin: 2px 0; padding-left: 22px; }
.toc-failures li { margin: 1px 0; }
.toc-all summary { cursor: pointer; font-weight: 600; font-size: 14px; margin: 8px 0 4px; }
.toc-all ol.all { columns: 3 200px; font-size: 12.5px; }
.toc-all li.violated a, .toc-all li.executor-error a { color: var(--red); font-weight: 600; }
.none { color: var(--green); margin: 0; }
main { padding: 10px 20px 40px; }
section.scenario { background: var(--paper); border: 1px solid var(--line); border-radius: 8px; margin: 0 0 10px; }
section.scenario.violated, section.scenario.executor-error { border-left: 5px solid var(--red); }
section.scenario.passed { border-left: 5px solid #8fd1a2; }
section.scenario > details > summary { cursor: pointer; padding: 7px 12px; font-size: 15px; }
section.scenario .name { font-weight: 700; }
section.scenario .pos { color: var(--muted); font-size: 12px; }
.body { padding: 0 14px 12px; }
.meta { margin: 0 0 6px; color: var(--muted); font-size: 12.5px; }
.meta span { margin-right: 16px; }
.meta b { color: var(--ink); font-weight: 600; }
.label { display: inline-block; min-width: 110px; color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.replay code, .shrunk code { background: #f6f8fa; border: 1px solid var(--line); border-radius: 4px; padding: 1px 6px; }
.replay, .shrunk, .shrink { margin: 4px 0; }
.failure { border: 1px solid var(--red-line); background: var(--red-bg); border-radius: 6px; padding: 8px 12px; margin: 6px 0 8px; }
.violation h3 { margin: 2px 0; font-size: 14.5px; color: var(--red); }
.violation ul.evidence { margin: 2px 0 6px; padding-left: 22px; }
.violation ul.evidence li { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 12.5px; overflow-wrap: anywhere; }
.failure .replay code, .failure .shrunk code { background: #fff; }
ul.verdicts { list-style: none; padding: 0; margin: 4px 0 8px; font-size: 12px; }
ul.verdicts li { display: inline-block; margin-right: 10px; white-space: nowrap; }
ul.verdicts li.held, .v-held { color: var(--green); }
ul.verdicts li.violated, .v-violated { color: var(--red); font-weight: 600; }
ul.verdicts li.not-judged { display: block; white-space: normal; color: var(--amber); }
.v-not-judged { color: var(--amber); }
ul.verdicts li.not-judged .reason { color: var(--ink); overflow-wrap: anywhere; }
.badge.hazard { background: var(--amber-bg); color: var(--amber); border: 1px solid #e8c46a; }
.totals .strict { font-weight: 600; color: var(--amber); }
.none.strict-fail { color: var(--amber); }
.hazards { border: 1px solid #e8c46a; background: #fffaf0; border-radius: 6px; padding: 6px 12px; margin: 6px 0 8px; }
.hazards h3 { margin: 2px 0; font-size: 14px; color: var(--amber); }
.hazard-note { margin: 2px 0 4px; font-size: 12px; color: var(--muted); }
table.hazards { border-collapse: collapse; font-size: 12.5px; }
table.hazards th { text-align: left; color: var(--muted); font-weight: 600; font-size: 11.5px; text-transform: uppercase; letter-spacing: .04em; border-bottom: 1px solid var(--line); padding: 3px 10px 3px 0; }
table.hazards td { padding: 3px 10px 3px 0; border-bottom: 1px solid #f1e4c4; vertical-align: top; overflow-wrap: anywhere; }
table.hazards td.kind { font-weight: 600; white-space: nowrap; }
table.hazards code.command { font-size: 11.5px; background: #fff; border: 1px solid var(--line); border-radius: 4px; padding: 0 4px; }
.no-timeline, .no-events { font-size: 12.5px; color: var(--muted); background: #f6f8fa; border: 1px dashed var(--line); border-radius: 4px; padding: 5px 8px; }
.timeline-wrap { overflow-x: auto; margin: 6px 0 10px; }
table.timeline { border-collapse: collapse; width: 100%; font-size: 12.5px; }
table.timeline th { position: sticky; top: 0; text-align: left; font-size: 13px; padding: 4px 8px; border-bottom: 2px solid var(--line); background: #fafbfc; }
table.timeline th small { display: block; font-weight: 400; color: var(--muted); font-size: 10.5px; text-transform: uppercase; letter-spacing: .05em; }
table.timeline th.lane-worker { border-top: 3px solid var(--blue); }
table.timeline th.lane-service { border-top: 3px solid var(--teal); }
table.timeline th.lane-harness { border-top: 3px solid var(--grey); }
table.timeline td { padding: 3px 8px; border-bottom: 1px solid #eef1f4; border-left: 1px dashed #e1e6eb; vertical-align: top; }
table.timeline td.time, table.timeline th.time { width: 84px; white-space: nowrap; text-align: right; font-variant-numeric: tabular-nums; border-left: 0; color: var(--ink); }
table.timeline td.time.same-ms { color: #b6bec7; }
table.timeline tr.new-ms td { border-top: 2px solid #c4ccd4; }
table.timeline th.idle { width: 1%; color: var(--muted); font-weight: 400; }
.caption { margin: 8px 0 2px; font-size: 11.5px; color: var(--muted); }
tr.band td { background: var(--grey-bg); }
tr.band-crash td { background: #fbe3e3; border-top: 2px solid var(--red); border-bottom: 2px solid var(--red); }
tr.band-pause td { background: var(--amber-bg); border-top: 2px solid #e0b341; border-bottom: 2px solid #e0b341; }
tr.band-resume td { background: #fff8e6; }
tr.band-clock_jump td { background: var(--purple-bg); border-top: 2px solid #b388d9; border-bottom: 2px solid #b388d9; }
tr.band-heal td { background: #f0f3f6; }
.legend .band-crash { background: #fbe3e3; border: 1px solid var(--red); }
.legend .band-pause { background: var(--amber-bg); border: 1px solid #e0b341; }
.legend .band-clock_jump { background: var(--purple-bg); border: 1px solid #b388d9; }
.moment .kind { font-weight: 600; }
.moment .detail { color: var(--muted); }
.m-crash .kind { color: var(--red); }
.m-clock_jump .kind { color: var(--purple); }
.m-pause .kind { color: var(--amber); }
.st { display: inline-block; border-radius: 3px; padding: 0 6px; font-weight: 600; font-size: 12px; border: 1px solid transparent; }
.st-recorded { background: var(--blue-bg); color: var(--blue); }
.st-blocked { background: #fde7d6; color: #a04a00; }
.st-submitted { background: #e8eaf6; color: #3949ab; }
.st-confirmed { background: var(--green-bg); color: var(--green); border-color: #9ed2ad; }
.st-failed { background: var(--grey-bg); color: var(--grey); border-color: #c5ccd3; }
.st-unknown { background: var(--amber-bg); color: var(--amber); border-color: #e8c46a; }
.st-escalated { background: var(--purple-bg); color: var(--purple); border-color: #c9a6e6; }
.st-other { background: #f6f8fa; color: var(--ink); border-color: var(--line); }
.moment.state .intent { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 12px; }
.req { padding: 1px 0; }
.req .method { font-weight: 700; }
.status { font-weight: 700; border-radius: 3px; padding: 0 4px; }
.status.ok { color: var(--green); }
.status.err { color: #a04a00; }
.status.lost { color: #fff; background: var(--grey); }
.req .sub { line-height: 1.2; }
.key, .reqid { color: var(--muted); font-size: 11px; }
.key.none { color: #a04a00; font-weight: 600; }
.ended { color: var(--muted); font-size: 11px; }
.fault-tag { display: inline-block; background: var(--red); color: #fff; font-weight: 700; font-size: 11.5px; border-radius: 3px; padding: 0 6px; }
.tag { display: inline-block; font-size: 11px; border-radius: 3px; padding: 0 5px; border: 1px solid var(--line); color: var(--muted); }
.tag.replayed { border-color: #9ec1ee; color: var(--blue); background: var(--blue-bg); }
tr.row-fault td.cell { background: #fff5f5; }
.req.cause { outline: 2px solid var(--red); outline-offset: 1px; border-radius: 4px; background: #fff5f5; padding: 2px 5px; }
.cause-label { color: var(--red); font-weight: 700; font-size: 12px; }
.legend .cause-label { border: 2px solid var(--red); border-radius: 3px; padding: 0 4px; }
tr.row-cause td.cell { background: #fff5f5; }
.effect .ekind { font-weight: 600; }
.effect .seq, .effect .owner { color: var(--muted); }
.effect.first { border-left: 3px solid #8c959f; padding-left: 5px; }
.first-label { color: var(--muted); font-size: 11.5px; }
.effect.dup { background: var(--red); color: #fff; border-radius: 4px; padding: 3px 7px; }
.effect.dup .seq, .effect.dup .owner { color: #ffe0e0; }
.dup-label { font-weight: 700; }
.legend .dup-label { background: var(--red); color: #fff; border-radius: 3px; padding: 0 5px; }
tr.row-dup td { background: var(--red-bg); }
table.intents { border-collapse: collapse; font-size: 12.5px; margin-top: 4px; min-width: 60%; }
table.intents th { text-align: left; color: var(--muted); font-weight: 600; font-size: 11.5px; text-transform: uppercase; letter-spacing: .04em; border-bottom: 1px solid var(--line); padding: 3px 10px 3px 0; }
table.intents td { padding: 3px 10px 3px 0; border-bottom: 1px solid #eef1f4; vertical-align: top; }
table.intents ul.effects { margin: 0; padding: 0; list-style: none; }
table.intents ul.effects li { white-space: nowrap; }
table.intents li.dup { color: var(--red); font-weight: 700; }
table.intents li.dup::before { content: "\2716  "; }
table.intents td.evidence code { font-size: 11px; color: var(--muted); overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.unacked, .unsupported { font-size: 12.5px; color: var(--amber); }
"#;

/// `1 hazard`, `2 hazards`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}
