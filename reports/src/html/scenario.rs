//! One scenario's section: its header, failure, verdicts, hazards and intent table.

use super::*;

/// `open_failures`: whether a failure's section starts open (see [`FAILURES_OPEN_MAX`]).
pub(super) fn scenario(r: &ScenarioResult, id: &str, draw_timeline: bool, open_failures: bool) -> Markup {
    let failed = r.outcome != Outcome::Passed;
    let marks = Marks::of(r);
    let broken: Vec<&str> = r.violations().map(|v| v.invariant.as_str()).collect();
    html! {
        section.scenario.(outcome_class(r.outcome)) id=(id) {
            details open[failed && open_failures] {
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
pub(super) fn failure(r: &ScenarioResult) -> Markup {
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
pub(super) fn verdicts(r: &ScenarioResult) -> Markup {
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
pub(super) fn hazards(hazards: &[Hazard]) -> Markup {
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

pub(super) fn intents(r: &ScenarioResult, marks: &Marks<'_>) -> Markup {
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
        @if !observed.unsupported_steps.is_empty() {
            p.unsupported {
                "workflow steps not proposed (the executor does not announce workflows): "
                @for id in &observed.unsupported_steps { code { (id) } " " }
            }
        }
        (settlement(observed))
    }
}

/// When the ledgers were read, and, when the verdicts were judged before the world settled,
/// what was still pending then.
fn settlement(observed: &Observed) -> Markup {
    let lines = observed.unsettled_lines();
    html! {
        @if let Some((headline, pending)) = lines.split_first() {
            div.unsettled {
                p { strong { (headline) } }
                ul { @for line in pending { li { code { (line) } } } }
            }
        }
        @if let Some(at_ms) = observed.ledgers_read_at_ms {
            p.read-at {
                "ledgers and journals read at service time " (at_ms) " ms"
                @if observed.route == Route::Serve { ", when the application's claims were checked" }
                @if let Some(settle) = observed.settle {
                    @if settle.waited {
                        " (after waiting " (settle.waited_ms) " ms for the world to settle, of at most " (settle.bound_ms) " ms)"
                    } @else {
                        " (without waiting for the world to settle, as asked)"
                    }
                }
            }
        }
    }
}

pub(super) fn intent_row(intent: &IntentResult, claim: Option<&Claim>, marks: &Marks<'_>) -> Markup {
    html! {
        tr {
            td {
                code { (intent.id) }
                @if !intent.after.is_empty() {
                    br;
                    span.after {
                        "after "
                        @for (i, id) in intent.after.iter().enumerate() {
                            @if i > 0 { ", " }
                            code { (id) }
                        }
                    }
                }
            }
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
