//! The table of passed scenarios in their compact form: one row each, and the reasons their
//! invariants were not judged, once for the table.

use super::*;

pub(super) fn passed_rows(run: &RunResults, rows: &[usize], ids: &[String]) -> Markup {
    // Each (invariant, reason) pair once, with how many rows share it.
    let mut reasons: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for &i in rows {
        for v in run.results[i].verdicts.iter().filter(|v| !v.judged()) {
            *reasons
                .entry((v.invariant.as_str(), v.reason.as_deref().unwrap_or("no reason given")))
                .or_default() += 1;
        }
    }
    html! {
        section.passed-rows {
            h2 { "Passed (" (rows.len()) ")" }
            p.caption {
                "A passed scenario keeps its verdicts and a summary of what happened; its timeline is not \
                 kept. Its replay command runs it again alone, and "
                code { "twice replay" } " draws it."
            }
            table.passed {
                thead {
                    tr { th { "#" } th { "scenario" } th { "verdicts" } th { "what happened" } th { "replay" } }
                }
                tbody {
                    @for &i in rows {
                        @let r = &run.results[i];
                        @if let Some(summary) = &r.summary {
                            (row(r, summary, &ids[i]))
                        }
                    }
                }
            }
            @if !reasons.is_empty() {
                details.not-judged-reasons {
                    summary { "Why invariants were not judged in passed scenarios" }
                    table.reasons {
                        thead { tr { th { "invariant" } th { "reason" } th { "scenarios" } } }
                        tbody {
                            @for ((invariant, reason), n) in &reasons {
                                tr { td { (invariant) } td.reason { (reason) } td { (n) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn row(r: &ScenarioResult, summary: &Summary, id: &str) -> Markup {
    let held = r.verdicts.iter().filter(|v| v.status == Status::Held).count();
    let not_judged: Vec<&str> =
        r.verdicts.iter().filter(|v| !v.judged()).map(|v| v.invariant.as_str()).collect();
    let states: Vec<String> = summary.states().iter().map(|(s, n)| format!("{n} {s}")).collect();
    let effects: Vec<String> =
        r.effects.iter().filter(|(_, n)| **n > 0).map(|(s, n)| format!("{s} {n}")).collect();
    let faults: usize = summary.faults.values().sum();
    html! {
        tr id=(id) {
            td.pos { (r.position) }
            td.name {
                (r.name)
                @if !r.hazards.is_empty() {
                    " " span.badge.small.hazard title=(hazard_titles(&r.hazards)) { "⚠ " (count(r.hazards.len(), "hazard")) }
                }
                @if r.observed.judged_unsettled() {
                    " " span.badge.small.unsettled title=(r.observed.unsettled_lines().join("; ")) { "judged before the world settled" }
                }
            }
            td.v {
                span.v-held { "✔ " (held) }
                @if !not_judged.is_empty() {
                    " " span.v-not-judged { "○ " (not_judged.join(", ")) }
                }
            }
            td.what {
                (count(summary.intents.len(), "intent"))
                @if !states.is_empty() { ": " (states.join(", ")) }
                @if !effects.is_empty() { "; effects " (effects.join(", ")) }
                @if faults > 0 { "; " (count(faults, "fault")) }
                @if summary.events > 0 { "; " (count(summary.events, "event")) }
            }
            td { code.replay { (r.replay) } }
        }
    }
}

/// The hazards of a row, for its badge's tooltip (the header's summary lists them too).
fn hazard_titles(hazards: &[Hazard]) -> String {
    hazards
        .iter()
        .map(|h| format!("{} ({}): exploited by {}", h.kind, h.service, h.exploited_by))
        .collect::<Vec<_>>()
        .join("; ")
}
