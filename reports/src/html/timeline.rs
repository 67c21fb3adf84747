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

/// The timeline's data and its plain fallback; the page's script draws the table from the
/// data when the scenario's section first opens.
pub(super) fn timeline(r: &ScenarioResult, marks: &Marks<'_>) -> Markup {
    let observed = &r.observed;
    let lanes = lanes(observed);
    let events = events(observed, &lanes);
    let Some(base_ms) = events.first().map(|e| e.at_ms) else {
        return html! { p.no-events { "No events were observed." } };
    };

    // The drawing is the script's (html/timeline.js), from this JSON; the noscript table is
    // the same events as plain text, for a reader without JavaScript.
    let mut rows_json: Vec<Value> = Vec::with_capacity(events.len());
    let mut plain: Vec<(String, &str, &str, String)> = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        let same_ms = i > 0 && events[i - 1].at_ms == e.at_ms;
        let new_ms = i > 0 && !same_ms;
        let class =
            if new_ms { format!("{} new-ms", row_class(e, marks)) } else { row_class(e, marks).to_string() };
        let time = format!("+{} ms", e.at_ms - base_ms);
        let cell = event_node(e, marks, base_ms);
        let kind = match &e.what {
            What::Moment(m) => m.kind.as_str(),
            What::Request(..) => "request",
            What::Effect(..) => "effect",
        };
        plain.push((time.clone(), lanes[e.lane].0, kind, cell.plain_text()));
        rows_json.push(json!([class, time, u8::from(same_ms), e.lane, cell.to_json()]));
    }
    let data = json!({"lanes": lanes_json(&lanes, &events), "rows": rows_json});

    html! {
        div.timeline-slot {
            script.timeline-data type="application/json" { (PreEscaped(script_json(&data))) }
            noscript {
                table.events {
                    caption { "Events, in order; times count from the scenario's first event." }
                    thead { tr { th { "time" } th { "lane" } th { "kind" } th { "detail" } } }
                    tbody {
                        @for (time, lane, kind, detail) in &plain {
                            tr { td.time { (time) } td { (lane) } td { (kind) } td { (detail) } }
                        }
                    }
                }
            }
        }
    }
}

/// The lanes of a timeline, left to right: the workers (`w2` before `w10`), then the
/// services (those with a journal, a ledger or a clock jump), then the harness.
fn lanes(observed: &Observed) -> Vec<(&str, LaneKind)> {
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
    lanes
}

/// Every moment, request and effect observed, each in its lane (an unknown lane is the
/// harness's), in time order and, within a millisecond, by [`rank`].
fn events<'a>(observed: &'a Observed, lanes: &[(&str, LaneKind)]) -> Vec<Event<'a>> {
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
    events
}

/// The lanes as the script draws them: name, class and label, a lane without events marked
/// idle.
fn lanes_json(lanes: &[(&str, LaneKind)], events: &[Event<'_>]) -> Vec<Value> {
    let mut busy = vec![false; lanes.len()];
    for e in events {
        busy[e.lane] = true;
    }
    lanes
        .iter()
        .enumerate()
        .map(|(lane, (name, kind))| {
            let (class, label) = if busy[lane] {
                (kind.class().to_string(), kind.label().to_string())
            } else {
                (format!("{} idle", kind.class()), format!("{} (idle)", kind.label()))
            };
            json!([name, class, label])
        })
        .collect()
}

/// JSON that is safe inside `<script type="application/json">`: `<`, `>` and `&` become
/// `\u003c`, `\u003e` and `\u0026` (the same string to `JSON.parse`), so no value can close the
/// element (`</script>`) or open a comment.
pub(crate) fn script_json(value: &Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            c => out.push(c),
        }
    }
    out
}

/// An element of a timeline cell, as the script builds it: tag, class, attributes and
/// children (text or elements).
pub(super) struct El {
    tag: &'static str,
    class: String,
    attrs: Vec<(&'static str, String)>,
    children: Vec<Child>,
}

enum Child {
    Text(String),
    El(El),
}

impl El {
    pub(super) fn new(tag: &'static str, class: impl Into<String>) -> El {
        El { tag, class: class.into(), attrs: Vec::new(), children: Vec::new() }
    }

    pub(super) fn attr(mut self, name: &'static str, value: impl Into<String>) -> El {
        self.attrs.push((name, value.into()));
        self
    }

    /// Text, joined to the text before it (as the parser joins adjacent text).
    pub(super) fn text(mut self, text: impl AsRef<str>) -> El {
        if let Some(Child::Text(last)) = self.children.last_mut() {
            last.push_str(text.as_ref());
        } else {
            self.children.push(Child::Text(text.as_ref().to_string()));
        }
        self
    }

    pub(super) fn child(mut self, el: El) -> El {
        self.children.push(Child::El(el));
        self
    }

    /// `[tag, class, {attributes}?, ...children]`, a child being a string or such an array.
    pub(super) fn to_json(&self) -> Value {
        let mut out = vec![Value::from(self.tag), Value::from(self.class.as_str())];
        if !self.attrs.is_empty() {
            let attrs: serde_json::Map<String, Value> =
                self.attrs.iter().map(|(k, v)| (k.to_string(), Value::from(v.as_str()))).collect();
            out.push(Value::Object(attrs));
        }
        for child in &self.children {
            out.push(match child {
                Child::Text(text) => Value::from(text.as_str()),
                Child::El(el) => el.to_json(),
            });
        }
        Value::Array(out)
    }

    /// The text a reader sees, blocks separated by a space.
    pub(super) fn plain_text(&self) -> String {
        fn walk(el: &El, out: &mut String) {
            for child in &el.children {
                match child {
                    Child::Text(text) => out.push_str(text),
                    Child::El(inner) => {
                        if inner.tag == "div" && !out.is_empty() && !out.ends_with(' ') {
                            out.push(' ');
                        }
                        walk(inner, out);
                    }
                }
            }
        }
        let mut out = String::new();
        walk(self, &mut out);
        out
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
            let key = (*service, effect.seq);
            if marks.duplicate.contains_key(&key) || marks.unowned.contains_key(&key) {
                "ev row-dup"
            } else {
                "ev"
            }
        }
    }
}

pub(super) fn event_node(e: &Event<'_>, marks: &Marks<'_>, base_ms: u64) -> El {
    match &e.what {
        What::Moment(m) => moment_node(m),
        What::Request(service, entry) => request_node(service, entry, marks, base_ms),
        What::Effect(service, effect) => effect_node(service, effect, marks),
    }
}

pub(super) fn moment_node(m: &Moment) -> El {
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
    if m.kind == "state" {
        let (intent, state) = state_of(&m.detail);
        El::new("div", "moment state")
            .child(El::new("span", "intent").text(intent))
            .text(" → ")
            .child(El::new("span", state_class(state)).text(state))
    } else {
        El::new("div", format!("moment m-{}", css_word(&m.kind)))
            .child(El::new("span", "kind").text(icon).text(m.kind.replace('_', " ")))
            .text(" ")
            .child(El::new("span", "detail").text(&m.detail))
    }
}

/// A word safe in a class name: letters, digits, `-` and `_`, the rest dropped.
pub(super) fn css_word(word: &str) -> String {
    word.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect()
}

pub(super) fn request_node(service: &str, entry: &JournalEntry, marks: &Marks<'_>, base_ms: u64) -> El {
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
    let mut el = El::new("div", if cause.is_some() { "req cause" } else { "req" })
        .child(El::new("span", "method").text(&entry.method))
        .text(" ")
        .child(El::new("span", "path").text(&entry.path))
        .text(" → ")
        .child(El::new("span", status_class).attr("title", status_title).text(status));
    if entry.replayed {
        el = el.text(" ").child(El::new("span", "tag replayed").text("replayed"));
    }
    for fault in &entry.faults {
        el = el.text(" ").child(
            El::new("span", "fault-tag")
                .attr("title", format!("rule {}", fault.rule))
                .text("⚡ ")
                .text(&fault.fault),
        );
    }
    if let Some(ended) = entry.ended_ms.filter(|&t| t > entry.at_ms) {
        el = el
            .text(" ")
            .child(El::new("small", "ended").text(format!("ended +{} ms", ended.saturating_sub(base_ms))));
    }
    let key = match &entry.idempotency_key {
        Some(key) => El::new("small", "key").text("key ").text(key),
        None => El::new("small", "key none").text("no key"),
    };
    el = el.child(
        El::new("div", "sub").child(key).text(" ").child(El::new("small", "reqid").text(&entry.request_id)),
    );
    if let Some(what) = cause {
        el = el.child(El::new("div", "cause-label").text("⟶ ").text(what));
    }
    el
}

pub(super) fn effect_node(service: &str, effect: &Effect, marks: &Marks<'_>) -> El {
    let key = (service, effect.seq);
    let duplicate = marks.duplicate.get(&key).or_else(|| marks.unowned.get(&key));
    let first = marks.first.get(&key);
    let mut class = String::from("effect");
    if duplicate.is_some() {
        class.push_str(" dup");
    }
    if first.is_some() {
        class.push_str(" first");
    }
    let mut el = El::new("div", class)
        .child(El::new("span", "ekind").text(&effect.kind))
        .text(" ")
        .child(El::new("span", "obj").text(&effect.object_id))
        .text(" ")
        .child(El::new("span", "seq").text(format!("(seq {})", effect.seq)));
    if let Some(owner) = marks.owner.get(&key) {
        el = el.text(" ").child(El::new("small", "owner").text("for ").text(owner));
    }
    if let Some(what) = duplicate {
        el = el.child(El::new("div", "dup-label").text("✖ ").text(what));
    } else if let Some(what) = first {
        el = el.child(El::new("div", "first-label").text(what));
    } else if let Some(what) = marks.by_provider.get(&key) {
        el = el.child(El::new("div", "first-label").text("↺ ").text(what));
    }
    el
}
