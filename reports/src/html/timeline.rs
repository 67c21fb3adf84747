//! The timeline: one column ("lane") per worker, per service and for the harness, time going
//! down.

use super::*;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum LaneKind {
    Worker,
    Service,
    Harness,
}

impl LaneKind {
    pub(super) fn class(self) -> &'static str {
        match self {
            LaneKind::Worker => "lane lane-worker",
            LaneKind::Service => "lane lane-service",
            LaneKind::Harness => "lane lane-harness",
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            LaneKind::Worker => "worker",
            LaneKind::Service => "service",
            LaneKind::Harness => "test driver",
        }
    }
}

/// What one row of a timeline shows.
pub(super) enum What<'a> {
    Moment(&'a Moment),
    Request(&'a str, &'a JournalEntry),
    Effect(&'a str, &'a Effect),
}

pub(super) struct Event<'a> {
    pub(super) at_ms: u64,
    /// The order within one millisecond (see [`rank`]).
    pub(super) rank: u8,
    pub(super) lane: usize,
    pub(super) what: What<'a>,
}

/// Within one millisecond of virtual time, the order that reads as cause and effect: what the
/// harness did, then what workers decided and sent, then the requests, then the effects, then
/// what workers concluded from the answers.
pub(super) fn rank(moment: &Moment, lane: LaneKind) -> u8 {
    if lane == LaneKind::Harness || moment.kind == "clock_jump" {
        return 0;
    }
    if moment.kind != "state" {
        return 1;
    }
    match State::parse(state_of(&moment.detail).1) {
        Some(state) if state.precedes_answer() => 1,
        _ => 4,
    }
}
pub(super) const RANK_REQUEST: u8 = 2;
pub(super) const RANK_EFFECT: u8 = 3;

/// `ID -> STATE` split in two; a detail without the arrow is all intent.
pub(super) fn state_of(detail: &str) -> (&str, &str) {
    detail.split_once(" -> ").unwrap_or((detail, ""))
}

/// Orders worker names so that `w2` comes before `w10`.
pub(super) fn natural_key(name: &str) -> (&str, u64, &str) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, number) = name.split_at(name.len() - digits);
    (stem, number.parse().unwrap_or(0), name)
}

pub(super) fn timeline(r: &ScenarioResult, marks: &Marks<'_>) -> Markup {
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

pub(super) fn row_class(e: &Event<'_>, marks: &Marks<'_>) -> &'static str {
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

pub(super) fn event_markup(e: &Event<'_>, marks: &Marks<'_>, base_ms: u64) -> Markup {
    match &e.what {
        What::Moment(m) => moment_markup(m),
        What::Request(service, entry) => request_markup(service, entry, marks, base_ms),
        What::Effect(service, effect) => effect_markup(service, effect, marks),
    }
}

pub(super) fn moment_markup(m: &Moment) -> Markup {
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
pub(super) fn css_word(word: &str) -> String {
    word.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect()
}

pub(super) fn request_markup(service: &str, entry: &JournalEntry, marks: &Marks<'_>, base_ms: u64) -> Markup {
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

pub(super) fn effect_markup(service: &str, effect: &Effect, marks: &Marks<'_>) -> Markup {
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
            } @else if let Some(what) = marks.by_provider.get(&key) {
                div.first-label { "↺ " (what) }
            }
        }
    }
}
