//! `report.html`: its structure, read back with an HTML parser, its escaping, its timeline
//! budget and its determinism, on results built here (`tests/it/report_html.rs` renders a
//! real run and loads it in Chromium, where the page's script draws the timelines).
//!
//! Most tests read the page as a reader with JavaScript sees it once every section is open:
//! [`draw`] replaces each timeline's JSON block with the table `html/timeline.js` builds from
//! it (the same steps, in Rust).

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use reports::html::{FAILURES_OPEN_MAX, SCRIPT, TIMELINES_PASSING_MAX, csp, render};
use results::{
    Claim, EffectRef, FaultApplied, Hazard, IntentResult, Moment, Observed, Outcome, RESULTS_SCHEMA,
    RunResults, SHRINK_RUNS, ScenarioResult, Shard, Shrink, Source, Totals, Verdict,
};
use scraper::{ElementRef, Html, Selector};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use vocabulary::{Applied, Effect, JournalEntry};

/// Service time of every scenario's first event (2026-01-01, as the sim driver starts).
const BASE_MS: u64 = 1_767_225_600_000;
const XSS: &str = "<script>alert(1)</script>";

fn sel(css: &str) -> Selector {
    Selector::parse(css).unwrap_or_else(|e| panic!("bad selector {css}: {e}"))
}

fn text(e: ElementRef<'_>) -> String {
    e.text().collect::<String>()
}

fn moment(after_ms: u64, lane: &str, kind: &str, detail: &str) -> Moment {
    Moment { at_ms: BASE_MS + after_ms, lane: lane.into(), kind: kind.into(), detail: detail.into() }
}

#[allow(clippy::too_many_arguments)]
fn request(
    seq: u64,
    after_ms: u64,
    path: &str,
    key: Option<&str>,
    request_id: &str,
    faults: &[&str],
    outcome: &str,
    status: u16,
) -> JournalEntry {
    JournalEntry {
        seq,
        at_ms: BASE_MS + after_ms,
        method: "POST".into(),
        path: path.into(),
        idempotency_key: key.map(str::to_string),
        request_id: request_id.into(),
        origin: None,
        faults: faults.iter().map(|f| Applied { rule: "rule-1".into(), fault: f.to_string() }).collect(),
        outcome: outcome.into(),
        status: Some(status),
        replayed: false,
        ended_ms: Some(BASE_MS + after_ms),
        params: None,
    }
}

fn refund(seq: u64, after_ms: u64, object_id: &str, key: Option<&str>, request_id: &str) -> Effect {
    Effect {
        seq,
        at_ms: BASE_MS + after_ms,
        kind: "refund.created".into(),
        object_id: object_id.into(),
        params: json!({"payment_intent": "pi_4812", "amount": 5000, "charge": "ch_4812"}),
        idempotency_key: key.map(str::to_string),
        fencing_token: None,
        request_id: request_id.into(),
    }
}

fn effect_ref(e: &Effect) -> EffectRef {
    EffectRef { service: "payments".into(), seq: e.seq, object_id: e.object_id.clone(), at_ms: e.at_ms }
}

/// A refund whose first reply is dropped after the commit; the worker crashes, the service's
/// clock jumps, a second worker sends the refund again without a key: two refunds.
fn failing(position: u64) -> ScenarioResult {
    let first = refund(1, 0, "re_first", Some("w1.1.1"), "req_A");
    let second = refund(2, 500, "re_second", None, "req_B");
    // In the order the sim driver observes them; the renderer orders them by time.
    let timeline = vec![
        moment(0, "w1", "start", "incarnation 1"),
        moment(0, "w1", "proposed", "refund-4812"),
        moment(0, "w1", "state", "refund-4812 -> recorded"),
        moment(0, "w1", "state", "refund-4812 -> submitted"),
        // Concluded from the lost reply: drawn after the request and its effect.
        moment(0, "w1", "state", "refund-4812 -> unknown"),
        moment(200, "w1", "crash", "killed mid-flight"),
        moment(300, "payments", "clock_jump", "+3600000 ms"),
        moment(500, "w2", "start", "incarnation 1"),
        moment(500, "w2", "state", "refund-4812 -> confirmed"),
        moment(600, "harness", "heal", "every fault disarmed"),
    ];
    let journal = vec![
        request(1, 0, "/v1/refunds", Some("w1.1.1"), "req_A", &["drop_after_commit"], "closed", 200),
        request(2, 500, "/v1/refunds", None, "req_B", &[], "answered", 200),
    ];
    let evidence_line = "intent refund-4812 has 2 effects, at most one allowed: payments re_first (seq 1), payments re_second (seq 2)";
    let claim = Claim {
        id: "refund-4812".into(),
        state: "confirmed".into(),
        attempts: 2,
        evidence: json!({"key": "w1.1.1", "external_id": "re_second"}),
    };
    let observed = Observed {
        acknowledged: vec!["refund-4812".into()],
        claims: vec![claim.clone()],
        ledgers: BTreeMap::from([("payments".to_string(), vec![first.clone(), second.clone()])]),
        // Every service of the scenario has a journal, an idle one too.
        journals: BTreeMap::from([("payments".to_string(), journal), ("workspaces".to_string(), vec![])]),
        reconcile_rounds: 1,
        timeline: timeline.clone(),
        ..Observed::default()
    };
    ScenarioResult {
        name: "lost_refund_reply".into(),
        position,
        source: Source::Catalog,
        seed: 42,
        outcome: Outcome::Violated,
        verdicts: vec![
            Verdict::from_evidence("no-duplicate-effect", vec![evidence_line.into()]),
            Verdict::from_evidence(
                "honest-terminal-states",
                vec![
                    "refund-4812 claims confirmed, but payments has 2 effects for it".into(),
                    "second evidence line".into(),
                ],
            ),
            Verdict::from_evidence("nothing-lost", vec![]),
        ],
        claims: vec![claim],
        intents: vec![IntentResult {
            id: "refund-4812".into(),
            action: "payments.refund".into(),
            state: Some("confirmed".into()),
            attempts: Some(2),
            effects: vec![effect_ref(&first), effect_ref(&second)],
            unsupported: false,
            after: vec![],
        }],
        effects: BTreeMap::from([("payments".to_string(), 2)]),
        faults_applied: vec![FaultApplied {
            service: "payments".into(),
            request_seq: 1,
            at_ms: BASE_MS,
            method: "POST".into(),
            path: "/v1/refunds".into(),
            rule: "rule-1".into(),
            fault: "drop_after_commit".into(),
        }],
        events: timeline.into_iter().filter(|m| m.kind != "proposed" && m.kind != "state").collect(),
        replay: "twice run --scenario lost_refund_reply --seed 7".into(),
        hazards: vec![],
        shrunk: Some("report/failures/lost_refund_reply.toml".into()),
        shrink: None,
        verdict_set: None,
        summary: None,
        observed,
    }
}

/// A refund that goes through at once.
fn passing(position: u64, name: &str) -> ScenarioResult {
    let effect = refund(1, 0, "re_ok", Some("w1.1.1"), "req_ok");
    let timeline = vec![
        moment(0, "w1", "start", "incarnation 1"),
        moment(0, "w1", "proposed", "refund-1"),
        moment(0, "w1", "state", "refund-1 -> submitted"),
        moment(0, "w1", "state", "refund-1 -> confirmed"),
        moment(10, "harness", "heal", "every fault disarmed"),
    ];
    let observed = Observed {
        acknowledged: vec!["refund-1".into()],
        claims: vec![Claim {
            id: "refund-1".into(),
            state: "confirmed".into(),
            attempts: 1,
            evidence: json!({}),
        }],
        ledgers: BTreeMap::from([("payments".to_string(), vec![effect.clone()])]),
        journals: BTreeMap::from([(
            "payments".to_string(),
            vec![request(1, 0, "/v1/refunds", Some("w1.1.1"), "req_ok", &[], "answered", 200)],
        )]),
        timeline,
        ..Observed::default()
    };
    ScenarioResult {
        name: name.into(),
        position,
        source: Source::Generated { index: position },
        seed: position,
        outcome: Outcome::Passed,
        verdicts: vec![Verdict::from_evidence("no-duplicate-effect", vec![])],
        claims: observed.claims.clone(),
        intents: vec![IntentResult {
            id: "refund-1".into(),
            action: "payments.refund".into(),
            state: Some("confirmed".into()),
            attempts: Some(1),
            effects: vec![effect_ref(&effect)],
            unsupported: false,
            after: vec![],
        }],
        effects: BTreeMap::from([("payments".to_string(), 1)]),
        faults_applied: vec![],
        events: vec![],
        replay: format!("twice run --generated {position} --seed 7"),
        hazards: vec![],
        shrunk: None,
        shrink: None,
        verdict_set: None,
        summary: None,
        observed,
    }
}

fn run_of(results: Vec<ScenarioResult>) -> RunResults {
    RunResults {
        schema: RESULTS_SCHEMA.into(),
        tool_version: "0.1.0".into(),
        seed: 7,
        driver: "sim".into(),
        executor: "naive-retry".into(),
        shard: Some(Shard { index: 1, count: 2 }),
        strict: false,
        totals: Totals::of(&results),
        results,
    }
}

/// The page as generated, and as a reader with JavaScript sees it with every section open.
fn page(run: &RunResults) -> (String, Html) {
    let html = render(run);
    let doc = Html::parse_document(&draw(&html));
    (html, doc)
}

const DATA_OPEN: &str = "<script class=\"timeline-data\" type=\"application/json\">";

/// `html` with every timeline's JSON block replaced by the table the page's script draws from
/// it: [`node`] and the table's frame, as in `html/timeline.js`.
fn draw(html: &str) -> String {
    let mut out = String::with_capacity(html.len() * 2);
    let mut rest = html;
    while let Some(at) = rest.find(DATA_OPEN) {
        out.push_str(&rest[..at]);
        let body = &rest[at + DATA_OPEN.len()..];
        let end = body.find("</script>").expect("the JSON block ends");
        let data: Value = serde_json::from_str(&body[..end]).expect("the timeline's JSON parses");
        out.push_str(&timeline_html(&data));
        rest = &body[end + "</script>".len()..];
    }
    out.push_str(rest);
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A node: a string is text; an array is `[tag, class, {attributes}?, ...children]`.
fn node(n: &Value) -> String {
    if let Some(text) = n.as_str() {
        return escape(text);
    }
    let parts = n.as_array().expect("a node is a string or an array");
    let tag = parts[0].as_str().expect("a tag");
    let mut out = format!("<{tag}");
    let class = parts[1].as_str().expect("a class");
    if !class.is_empty() {
        out.push_str(&format!(" class=\"{}\"", escape(class)));
    }
    let mut children = &parts[2..];
    if let Some(attrs) = children.first().and_then(Value::as_object) {
        for (k, v) in attrs {
            out.push_str(&format!(" {k}=\"{}\"", escape(v.as_str().expect("a string attribute"))));
        }
        children = &children[1..];
    }
    out.push('>');
    for child in children {
        out.push_str(&node(child));
    }
    out.push_str(&format!("</{tag}>"));
    out
}

fn timeline_html(data: &Value) -> String {
    let lanes = data["lanes"].as_array().expect("lanes");
    let mut head = vec![json!("tr"), json!(""), json!(["th", "time", "time"])];
    for l in lanes {
        head.push(json!(["th", l[1], {"data-lane": l[0]}, l[0], ["small", "", l[2]]]));
    }
    let mut body = vec![json!("tbody"), json!("")];
    for r in data["rows"].as_array().expect("rows") {
        let mut tr = vec![json!("tr"), r[0].clone()];
        tr.push(json!(["td", if r[2] == json!(1) { "time same-ms" } else { "time" }, r[1]]));
        for lane in 0..lanes.len() {
            tr.push(if r[3] == json!(lane) { json!(["td", "cell", r[4]]) } else { json!(["td", ""]) });
        }
        body.push(Value::Array(tr));
    }
    node(&json!([
        "div",
        "timeline-wrap",
        ["p", "caption", "Timeline"],
        ["table", "timeline", ["thead", "", Value::Array(head)], Value::Array(body)]
    ]))
}

fn one<'a>(doc: &'a Html, css: &str) -> ElementRef<'a> {
    let found: Vec<_> = doc.select(&sel(css)).collect();
    assert_eq!(found.len(), 1, "expected exactly one {css}, found {}", found.len());
    found[0]
}

fn within<'a>(e: ElementRef<'a>, css: &str) -> Vec<ElementRef<'a>> {
    e.select(&sel(css)).collect()
}

#[test]
fn the_header_shows_the_run_the_totals_the_legend_and_a_table_of_contents() {
    let (_, doc) = page(&run_of(vec![passing(0, "happy"), failing(1)]));
    let facts = text(one(&doc, "header .facts"));
    for fact in ["version 0.1.0", "seed 7", "driver sim", "executor naive-retry", "shard 1/2"] {
        assert!(facts.contains(fact), "{fact} missing from {facts:?}");
    }
    let totals = text(one(&doc, "header .totals"));
    assert!(
        totals.contains("1 violated") && totals.contains("1 passed") && totals.contains("0 executor errors")
    );
    assert!(totals.contains("of 2 scenarios"), "{totals}");
    let legend = text(one(&doc, ".legend"));
    for marker in ["⚡", "2nd effect", "cause", "crash", "clock jump", "confirmed", "unknown", "escalated"] {
        assert!(legend.contains(marker), "legend lacks {marker}: {legend}");
    }
    // Failures first, linked; then every scenario.
    let failures: Vec<_> = doc.select(&sel(".toc-failures a")).map(|a| a.attr("href")).collect();
    assert_eq!(failures, vec![Some("#s-1")]);
    let all: Vec<_> = doc.select(&sel(".toc-all a")).map(|a| a.attr("href")).collect();
    assert_eq!(all, vec![Some("#s-0"), Some("#s-1")]);
    assert!(one(&doc, "title").text().collect::<String>().contains("1 violated"));
}

#[test]
fn every_scenario_has_a_section_failures_open_with_their_evidence() {
    let (_, doc) = page(&run_of(vec![failing(0), passing(1, "happy")]));
    let sections: Vec<_> = doc.select(&sel("main > section.scenario")).collect();
    assert_eq!(sections.len(), 2);
    let ids: Vec<_> = sections.iter().map(|s| s.attr("id").unwrap_or_default()).collect();
    assert_eq!(ids, vec!["s-0", "s-1"]);

    let failed = one(&doc, "section#s-0");
    assert!(failed.value().classes().any(|c| c == "violated"));
    assert_eq!(within(failed, ":scope > details[open]").len(), 1, "a failure is open");
    assert_eq!(text(within(failed, "summary .badge")[0]), "violated");
    let invariants: Vec<_> = within(failed, ".violation h3").into_iter().map(text).collect();
    assert_eq!(invariants, vec!["✘ no-duplicate-effect", "✘ honest-terminal-states"]);
    let evidence: Vec<_> = within(failed, ".violation .evidence li").into_iter().map(text).collect();
    assert_eq!(evidence.len(), 3, "every evidence line: {evidence:?}");
    assert!(evidence[0].starts_with("intent refund-4812 has 2 effects"));
    assert_eq!(evidence[2], "second evidence line");
    assert_eq!(text(within(failed, ".failure .shrunk code")[0]), "report/failures/lost_refund_reply.toml");
    assert_eq!(
        text(within(failed, ".failure code.replay")[0]),
        "twice run --scenario lost_refund_reply --seed 7"
    );
    let meta = text(within(failed, ".meta")[0]);
    assert!(meta.contains("catalog") && meta.contains("42"), "{meta}");
    let verdicts: Vec<_> = within(failed, "ul.verdicts li").into_iter().map(text).collect();
    assert_eq!(verdicts, vec!["✘ no-duplicate-effect", "✘ honest-terminal-states", "✔ nothing-lost"]);

    // The failure box comes before the timeline.
    let html = failed.html();
    let failure_at = html.find("class=\"failure\"").expect("a failure box");
    let timeline_at = html.find("class=\"timeline\"").expect("a timeline");
    assert!(failure_at < timeline_at);

    let passed = one(&doc, "section#s-1");
    assert_eq!(within(passed, ":scope > details[open]").len(), 0, "a pass is collapsed");
    assert_eq!(within(passed, ":scope > details").len(), 1);
    assert_eq!(text(within(passed, "code.replay")[0]), "twice run --generated 1 --seed 7");
}

#[test]
fn the_timeline_has_a_lane_per_worker_service_and_the_harness() {
    let (_, doc) = page(&run_of(vec![failing(0)]));
    let table = one(&doc, "section#s-0 table.timeline");
    let lanes: Vec<_> = within(table, "thead th.lane").into_iter().map(|th| th.attr("data-lane")).collect();
    assert_eq!(lanes, vec![Some("w1"), Some("w2"), Some("payments"), Some("workspaces"), Some("harness")]);
    let kinds: Vec<_> = within(table, "thead th.lane small").into_iter().map(text).collect();
    assert_eq!(kinds, vec!["worker", "worker", "service", "service (idle)", "test driver"]);
    let idle: Vec<_> = within(table, "thead th.idle").into_iter().map(|th| th.attr("data-lane")).collect();
    assert_eq!(idle, vec![Some("workspaces")]);

    let rows = within(table, "tbody tr");
    // 10 moments, 2 requests, 2 effects.
    assert_eq!(rows.len(), 14);
    for row in &rows {
        assert_eq!(within(*row, "td").len(), 6, "time and five lanes: {}", row.html());
        assert_eq!(within(*row, "td.cell").len(), 1, "one event per row");
    }
    let lane_of =
        |row: ElementRef<'_>| within(row, "td").iter().position(|td| td.attr("class") == Some("cell"));
    let summary: Vec<(String, Option<usize>)> = rows
        .iter()
        .map(|r| (text(within(*r, "td.time")[0]) + " " + text(within(*r, "td.cell")[0]).trim(), lane_of(*r)))
        .collect();
    let expect: Vec<(&str, usize)> = vec![
        ("+0 ms ▸ start incarnation 1", 1),
        ("+0 ms proposed refund-4812", 1),
        ("+0 ms refund-4812 → recorded", 1),
        ("+0 ms refund-4812 → submitted", 1),
        ("+0 ms POST /v1/refunds", 3),
        ("+0 ms refund.created re_first", 3),
        ("+0 ms refund-4812 → unknown", 1),
        ("+200 ms ☠ crash killed mid-flight", 1),
        ("+300 ms » clock jump +3600000 ms", 3),
        ("+500 ms ▸ start incarnation 1", 2),
        ("+500 ms POST /v1/refunds", 3),
        ("+500 ms refund.created re_second", 3),
        ("+500 ms refund-4812 → confirmed", 2),
        ("+600 ms ✚ heal every fault disarmed", 5),
    ];
    for ((got, lane), (want, want_lane)) in summary.iter().zip(&expect) {
        assert!(got.starts_with(want), "row {got:?} should start with {want:?}\nall rows: {summary:#?}");
        assert_eq!(*lane, Some(*want_lane), "{got}");
    }

    // Process events are bands; states carry their colour.
    assert_eq!(within(table, "tr.band-crash").len(), 1);
    assert_eq!(within(table, "tr.band-clock_jump").len(), 1);
    assert_eq!(within(table, ".st-confirmed").len(), 1);
    assert_eq!(within(table, ".st-unknown").len(), 1);
}

#[test]
fn the_second_effect_and_the_request_that_made_it_are_marked() {
    let (_, doc) = page(&run_of(vec![failing(0), passing(1, "happy")]));
    let dups: Vec<_> = doc.select(&sel(".timeline .effect.dup")).collect();
    assert_eq!(dups.len(), 1, "one duplicate in the whole page");
    let dup = text(dups[0]);
    assert!(dup.contains("re_second") && dup.contains("second effect for intent refund-4812"), "{dup}");
    assert_eq!(within(dups[0], ".dup-label").len(), 1);
    let firsts: Vec<_> = doc.select(&sel(".timeline .effect.first")).map(text).collect();
    assert_eq!(firsts.len(), 1);
    assert!(firsts[0].contains("re_first"));

    let causes: Vec<_> = doc.select(&sel(".timeline .req.cause")).collect();
    assert_eq!(causes.len(), 1);
    let cause = text(causes[0]);
    assert!(cause.contains("req_B") && cause.contains("no key"), "{cause}");
    assert!(cause.contains("made the second effect for intent refund-4812"), "{cause}");

    let faults: Vec<_> = doc.select(&sel(".timeline .fault-tag")).map(text).collect();
    assert_eq!(faults, vec!["⚡ drop_after_commit"]);
    let faulted = doc.select(&sel(".timeline tr.row-fault .req")).map(text).next().unwrap_or_default();
    assert!(faulted.contains("→ closed") && faulted.contains("key w1.1.1"), "{faulted}");

    // The intent table marks it too.
    let rows = within(one(&doc, "section#s-0 table.intents"), "tbody tr");
    assert_eq!(rows.len(), 1);
    let cells: Vec<_> = within(rows[0], "td").into_iter().map(text).collect();
    assert_eq!(cells[0], "refund-4812");
    assert_eq!(cells[1], "payments.refund");
    assert_eq!(cells[2], "confirmed");
    assert_eq!(cells[3], "2");
    let effects: Vec<_> = within(rows[0], "li.dup").into_iter().map(text).collect();
    assert_eq!(effects, vec!["payments re_second (seq 2)"]);
    assert!(cells[5].contains("re_second"), "the claim's evidence: {}", cells[5]);
}

#[test]
fn an_effect_the_checker_attributed_to_no_intent_is_marked() {
    let mut r = failing(0);
    // The checker attributed the second refund to nobody (say its amount differs): several
    // refunds of one payment may each be someone's, so the key alone marks no duplicate, and
    // the effect is marked as nobody's.
    r.intents[0].effects.truncate(1);
    let (_, doc) = page(&run_of(vec![r]));
    let dup = text(one(&doc, ".timeline .effect.dup"));
    assert!(dup.contains("re_second") && dup.contains("attributed to no intent"), "{dup}");
}

#[test]
fn only_the_first_passing_scenarios_by_position_get_a_timeline() {
    let passing_count = TIMELINES_PASSING_MAX + 5;
    let mut results = vec![failing(passing_count as u64)];
    // In the file in reverse position order: the budget goes by position.
    results.extend((0..passing_count).rev().map(|p| passing(p as u64, &format!("pass-{p}"))));
    let (_, doc) = page(&run_of(results));
    assert_eq!(doc.select(&sel("section.scenario")).count(), passing_count + 1);
    assert_eq!(doc.select(&sel("table.timeline")).count(), TIMELINES_PASSING_MAX + 1);
    assert_eq!(doc.select(&sel("section.violated table.timeline")).count(), 1, "failures always get one");
    let without: BTreeSet<String> = doc
        .select(&sel("section.scenario"))
        .filter(|s| within(*s, "table.timeline").is_empty())
        .map(|s| s.attr("id").unwrap_or_default().to_string())
        .collect();
    let expect: BTreeSet<String> = (TIMELINES_PASSING_MAX..passing_count).map(|p| format!("s-{p}")).collect();
    assert_eq!(without, expect);
    for s in doc.select(&sel("section.scenario")).filter(|s| within(*s, "table.timeline").is_empty()) {
        let note = text(within(s, ".no-timeline")[0]);
        assert!(note.contains("results.json") && note.contains("twice run --generated"), "{note}");
        assert_eq!(within(s, "table.intents").len(), 1, "the intent table stays");
        assert_eq!(within(s, "code.replay").len(), 1);
    }
    // The list of every scenario is closed when long.
    assert_eq!(doc.select(&sel("details.toc-all[open]")).count(), 0);
}

#[test]
fn section_ids_are_unique_and_valid_even_when_positions_repeat() {
    let (_, doc) = page(&run_of(vec![passing(3, "a"), passing(3, "b"), failing(0)]));
    let ids: Vec<String> =
        doc.select(&sel("section.scenario")).map(|s| s.attr("id").unwrap_or_default().to_string()).collect();
    assert_eq!(ids, vec!["s-3", "s-3-1", "s-0"]);
    for id in &ids {
        assert!(id.starts_with("s-") && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        assert!(doc.select(&sel(&format!("a[href=\"#{id}\"]"))).count() >= 1, "{id} linked");
    }
}

#[test]
fn nothing_from_the_results_can_become_markup() {
    let mut r = failing(0);
    r.verdicts[0].evidence.push(XSS.into());
    r.claims[0].evidence = json!({"reason": XSS});
    r.observed.claims = r.claims.clone();
    r.claims[0].id = format!("refund-4812{XSS}");
    r.intents[0].id = format!("refund-4812{XSS}");
    r.observed.timeline[5].detail = XSS.into();
    if let Some(journal) = r.observed.journals.get_mut("payments") {
        journal[1].path = format!("/v1/refunds/{XSS}");
        journal[1].faults.push(Applied { rule: XSS.into(), fault: XSS.into() });
    }
    r.name = format!("name{XSS}");
    r.replay = format!("twice run {XSS}");
    r.verdicts.push(Verdict::not_judged(XSS, XSS));
    r.hazards = vec![Hazard {
        kind: XSS.into(),
        service: XSS.into(),
        intent: Some(XSS.into()),
        detail: XSS.into(),
        exploited_by: XSS.into(),
        command: XSS.into(),
    }];
    let mut run = run_of(vec![r]);
    run.executor = XSS.into();
    let (html, doc) = page(&run);

    // The page's own script and the timeline's JSON are the only script elements.
    let raw = Html::parse_document(&html);
    let scripts: Vec<_> = raw.select(&sel("script")).collect();
    assert_eq!(scripts.len(), 2, "{scripts:?}");
    assert_eq!(scripts[0].attr("type"), Some("application/json"));
    assert_eq!(scripts[1].attr("type"), None);
    assert_eq!(text(scripts[1]), SCRIPT);
    assert!(!html.contains("<script>alert"), "no raw script tag");
    assert!(html.contains("&lt;script&gt;"), "escaped");
    let evidence: Vec<_> = doc.select(&sel(".violation .evidence li")).map(text).collect();
    assert!(evidence.contains(&XSS.to_string()), "shown as text: {evidence:?}");
    assert!(text(one(&doc, "header .facts")).contains(XSS));
    assert!(doc.select(&sel("table.intents td")).any(|td| text(td) == format!("refund-4812{XSS}")));
    assert!(doc.select(&sel("table.intents td.evidence")).any(|td| text(td).contains(XSS)));
    assert!(doc.select(&sel(".timeline .moment .detail")).any(|d| text(d) == XSS));
    assert!(doc.select(&sel(".timeline .req .path")).any(|p| text(p).contains(XSS)));
    assert!(
        doc.select(&sel(".timeline .fault-tag")).any(|f| f.attr("title") == Some(&format!("rule {XSS}")))
    );
    assert!(doc.select(&sel("ul.verdicts li.not-judged .reason")).any(|r| text(r) == XSS));
    for cell in
        ["td.kind", "td.service", "td.intent", "td.detail", "td.exploit .scenario", "td.exploit code.command"]
    {
        assert_eq!(text(one(&doc, &format!("table.hazards {cell}"))), XSS, "{cell}");
    }

    // Belt and braces: a policy that allows only the page's own script and no fetch, and
    // nothing to fetch.
    let policy = one(&doc, "meta[http-equiv=\"Content-Security-Policy\"]");
    assert_eq!(policy.attr("content"), Some(csp().as_str()));
    let script_src: Vec<&str> =
        csp().split("; ").filter(|d| d.starts_with("script-src")).map(|_| "").collect();
    assert_eq!(script_src.len(), 1);
    for external in ["link", "img", "iframe", "object", "embed", "[src]", "[href^=\"http\"]"] {
        assert_eq!(doc.select(&sel(external)).count(), 0, "{external}");
    }
}

#[test]
fn the_same_results_give_the_same_bytes() {
    let run = run_of(vec![failing(0), passing(1, "happy"), passing(2, "also")]);
    let first = render(&run);
    assert_eq!(first, render(&run.clone()));
    assert!(first.starts_with("<!DOCTYPE html>"));
}

#[test]
fn an_executor_error_is_shown_as_a_failure() {
    let mut r = passing(0, "broken");
    r.outcome = Outcome::ExecutorError;
    r.verdicts = vec![Verdict::from_evidence("executor-error", vec!["worker w1 did not answer".into()])];
    r.observed.executor_error = Some("worker w1 did not answer".into());
    r.observed.timeline.clear();
    r.observed.journals.clear();
    r.observed.ledgers.clear();
    let (_, doc) = page(&run_of(vec![r]));
    let section = one(&doc, "section#s-0");
    assert_eq!(within(section, ":scope > details[open]").len(), 1);
    assert!(text(within(section, ".failure")[0]).contains("worker w1 did not answer"));
    assert_eq!(text(within(section, ".no-events")[0]), "No events were observed.");
    assert_eq!(doc.select(&sel(".toc-failures a")).count(), 1);
}

fn hazard(kind: &str, detail: &str, intent: Option<&str>) -> Hazard {
    Hazard {
        kind: kind.into(),
        service: "payments".into(),
        intent: intent.map(str::to_string),
        detail: detail.into(),
        exploited_by: "zombie_worker".into(),
        command: "twice run --executor ./exec --scenario zombie_worker".into(),
    }
}

/// A failure with a not-judged verdict and a shrink record, and a pass with two hazards and a
/// not-judged verdict.
fn with_hazards_and_not_judged(strict: bool) -> RunResults {
    let mut failed = failing(0);
    failed.verdicts.push(Verdict::not_judged("no-stale-write", "no second writer in this run"));
    failed.shrink = Some(Shrink { steps_before: 9, steps_after: 3, runs: 41, stopped: SHRINK_RUNS.into() });
    let mut passed = passing(1, "happy");
    passed.verdicts.push(Verdict::not_judged("lease-expiry", "no lease ran out"));
    passed.hazards = vec![
        hazard("no-fencing-token", "POST /v1/refunds (req_ok) carried no fencing token", Some("refund-1")),
        hazard("key-past-retention", "key w1.1.1 reused after the retention window", None),
    ];
    RunResults { strict, ..run_of(vec![failed, passed]) }
}

#[test]
fn verdicts_show_held_violated_and_not_judged_with_the_reason() {
    let (_, doc) = page(&with_hazards_and_not_judged(false));
    // (section, every verdict in order as (class, text))
    let expect: [(&str, &[(&str, &str)]); 2] = [
        (
            "section#s-0",
            &[
                ("violated", "✘ no-duplicate-effect"),
                ("violated", "✘ honest-terminal-states"),
                ("held", "✔ nothing-lost"),
                ("not-judged", "○ no-stale-write not judged: no second writer in this run"),
            ],
        ),
        (
            "section#s-1",
            &[
                ("held", "✔ no-duplicate-effect"),
                ("not-judged", "○ lease-expiry not judged: no lease ran out"),
            ],
        ),
    ];
    for (section, verdicts) in expect {
        let got: Vec<(String, String)> = within(one(&doc, section), "ul.verdicts li")
            .into_iter()
            .map(|li| (li.attr("class").unwrap_or_default().to_string(), text(li)))
            .collect();
        let want: Vec<(String, String)> =
            verdicts.iter().map(|(c, t)| (c.to_string(), t.to_string())).collect();
        assert_eq!(got, want, "{section}");
    }
    // Not judged is never drawn as held, nor as a violation.
    assert!(doc.select(&sel("li.held")).all(|li| !text(li).contains("no-stale-write")));
    assert!(doc.select(&sel(".violation h3")).all(|h| !text(h).contains("no-stale-write")));
    assert!(text(one(&doc, ".legend")).contains("not judged"));
}

#[test]
fn hazards_get_a_block_per_scenario_and_a_count_in_the_header() {
    for strict in [false, true] {
        let (html, doc) = page(&with_hazards_and_not_judged(strict));
        let totals = text(one(&doc, "header .totals"));
        assert!(totals.contains("2 hazards"), "{totals}");
        assert_eq!(totals.contains("--strict: hazards fail the run"), strict, "{totals}");
        assert!(one(&doc, "title").text().collect::<String>().contains("2 hazards"));

        let happy = one(&doc, "section#s-1");
        assert_eq!(text(within(happy, "summary .badge.hazard")[0]), "⚠ 2 hazards");
        assert_eq!(text(within(happy, ".hazards h3")[0]), "⚠ 2 hazards");
        let rows: Vec<Vec<String>> = within(happy, "table.hazards tbody tr")
            .into_iter()
            .map(|tr| within(tr, "td").into_iter().map(|td| text(td).trim().to_string()).collect())
            .collect();
        let command = "twice run --executor ./exec --scenario zombie_worker";
        assert_eq!(
            rows,
            vec![
                vec![
                    "no-fencing-token".to_string(),
                    "payments".into(),
                    "refund-1".into(),
                    "POST /v1/refunds (req_ok) carried no fencing token".into(),
                    format!("zombie_worker{command}"),
                ],
                vec![
                    "key-past-retention".to_string(),
                    "payments".into(),
                    "-".into(),
                    "key w1.1.1 reused after the retention window".into(),
                    format!("zombie_worker{command}"),
                ],
            ]
        );
        assert_eq!(within(happy, "td.exploit code.command").len(), 2);
        // A hazard is not a failure: the passing scenario stays passed and collapsed.
        assert_eq!(within(happy, ":scope > details[open]").len(), 0);
        assert_eq!(within(happy, ".failure").len(), 0);
        assert_eq!(doc.select(&sel(".toc-failures a")).count(), 1);
        assert_eq!(within(one(&doc, "section#s-0"), ".hazards").len(), 0, "no hazards, no block");
        assert_eq!(html, render(&with_hazards_and_not_judged(strict)), "same results, same bytes");
    }

    // Under --strict a run whose scenarios all passed still says that hazards fail it.
    let mut run = with_hazards_and_not_judged(true);
    run.results.remove(0);
    run.totals = Totals::of(&run.results);
    let (_, doc) = page(&run);
    let none = text(one(&doc, ".toc-failures p.none"));
    assert!(none.contains("with --strict the 2 hazards below fail the run"), "{none}");
}

#[test]
fn a_shrunk_failure_says_how_far_shrinking_got() {
    let (_, doc) = page(&with_hazards_and_not_judged(false));
    let failed = one(&doc, "section#s-0");
    let shrink = within(failed, ".failure .shrink")[0];
    assert_eq!(text(within(shrink, ".label")[0]), "shrinking");
    assert!(
        text(shrink).ends_with("shrunk from 9 to 3 steps in 41 runs; stopped: run limit"),
        "{}",
        text(shrink)
    );
    assert_eq!(doc.select(&sel(".shrink")).count(), 1, "only the shrunk failure has one");
}

/// A workflow's steps say what they come after, in the intent table and where they are
/// proposed in the timeline.
#[test]
fn a_workflows_steps_show_what_they_come_after() {
    let mut result = passing(0, "onboarding");
    result.intents.push(IntentResult {
        id: "welcome".into(),
        action: "files.put".into(),
        state: Some("confirmed".into()),
        attempts: Some(1),
        effects: vec![],
        unsupported: false,
        after: vec!["refund-1".into()],
    });
    result.observed.timeline.insert(2, moment(0, "w1", "proposed", "welcome after refund-1"));
    let (_, doc) = page(&run_of(vec![result]));
    let rows = doc.select(&sel("section#s-0 table.intents tbody tr")).collect::<Vec<_>>();
    assert_eq!(rows.len(), 2);
    let step = text(within(rows[1], "td")[0]);
    assert!(step.contains("welcome") && step.contains("after refund-1"), "{step}");
    assert!(within(rows[0], ".after").is_empty(), "an intent that is no step says nothing");
    let timeline = text(one(&doc, "section#s-0 table.timeline"));
    assert!(timeline.contains("proposed welcome after refund-1"), "{timeline}");
}

/// The text of the page's one executable script (not a JSON block).
fn the_script(doc: &Html) -> String {
    let scripts: Vec<_> = doc.select(&sel("script:not([type])")).collect();
    assert_eq!(scripts.len(), 1, "one script");
    text(scripts[0])
}

#[test]
fn the_csp_allows_exactly_the_pages_script_by_its_hash() {
    let html = render(&run_of(vec![failing(0), passing(1, "happy")]));
    let doc = Html::parse_document(&html);
    let script = the_script(&doc);
    assert_eq!(script, SCRIPT);
    let hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(script.as_bytes()));
    let policy =
        one(&doc, "meta[http-equiv=\"Content-Security-Policy\"]").attr("content").unwrap_or_default();
    let directives: Vec<&str> = policy.split("; ").collect();
    assert_eq!(
        directives,
        vec![
            "default-src 'none'",
            "style-src 'unsafe-inline'",
            "img-src data:",
            &format!("script-src 'sha256-{hash}'"),
        ]
    );
    // The script is the file's bytes as they are in the page: nothing rewrote them.
    assert!(html.contains(&format!("<script>{SCRIPT}</script>")));
}

#[test]
fn a_label_cannot_break_out_of_the_timelines_json() {
    const BREAKOUT: &str = "</script><script>alert(1)</script><!-- & >";
    let mut r = failing(0);
    r.observed.timeline[5].detail = BREAKOUT.into();
    if let Some(journal) = r.observed.journals.get_mut("payments") {
        journal[1].path = format!("/v1/refunds/{BREAKOUT}");
        journal[1].faults.push(Applied { rule: BREAKOUT.into(), fault: BREAKOUT.into() });
    }
    let html = render(&run_of(vec![r]));
    assert!(!html.contains("alert(1)</script>"), "no label closes a script element");
    assert!(!html.contains("<script>alert"), "no label opens one");
    let raw = Html::parse_document(&html);
    assert_eq!(raw.select(&sel("script")).count(), 2, "the JSON block and the page's script");
    let block = text(one(&raw, "section#s-0 script.timeline-data"));
    assert!(!block.contains('<') && !block.contains('>') && !block.contains('&'), "{block}");
    assert!(block.contains("\\u003c/script\\u003e\\u003cscript\\u003ealert(1)"), "{block}");
    // JSON.parse gives the label back whole.
    let data: Value = serde_json::from_str(&block).expect("the block is JSON");
    assert!(data.to_string().contains(BREAKOUT), "{data}");
    let doc = Html::parse_document(&draw(&html));
    assert!(doc.select(&sel(".timeline .moment .detail")).any(|d| text(d) == BREAKOUT));
    assert!(
        doc.select(&sel(".timeline .fault-tag"))
            .any(|f| f.attr("title") == Some(&format!("rule {BREAKOUT}")))
    );
}

#[test]
fn a_failed_sections_timeline_is_json_and_a_plain_list_not_a_drawn_table() {
    let html = render(&run_of(vec![failing(0), passing(1, "happy")]));
    let raw = Html::parse_document(&html);
    assert_eq!(raw.select(&sel("table.timeline")).count(), 0, "no timeline is drawn up front");
    let section = one(&raw, "section#s-0");
    let slot = within(section, ":scope > details > .body > div.timeline-slot");
    assert_eq!(slot.len(), 1);
    let data = within(slot[0], ":scope > script.timeline-data[type=\"application/json\"]");
    assert_eq!(data.len(), 1);
    let data: Value = serde_json::from_str(&text(data[0])).expect("the timeline's JSON");
    assert_eq!(data["lanes"][0], json!(["w1", "lane lane-worker", "worker"]));
    assert_eq!(data["lanes"][3], json!(["workspaces", "lane lane-service idle", "service (idle)"]));
    assert_eq!(data["rows"].as_array().map(Vec::len), Some(14));
    // The same events as plain text, for a reader without JavaScript (a parser with scripting
    // on reads noscript's content as text; without, as this table).
    let noscript = within(slot[0], ":scope > noscript");
    assert_eq!(noscript.len(), 1);
    let list = Html::parse_fragment(&text(noscript[0]));
    let rows: Vec<Vec<String>> = list
        .select(&sel("table.events tbody tr"))
        .map(|tr| within(tr, "td").into_iter().map(text).collect())
        .collect();
    assert_eq!(rows.len(), 14);
    assert_eq!(rows[0], vec!["+0 ms", "w1", "start", "▸ start incarnation 1"]);
    assert_eq!(rows[4][..3], ["+0 ms".to_string(), "payments".into(), "request".into()]);
    assert!(
        rows[4][3].starts_with("POST /v1/refunds → closed ⚡ drop_after_commit key w1.1.1"),
        "{:?}",
        rows[4]
    );
    let dup = rows.iter().find(|r| r[3].contains("re_second")).expect("the duplicate's row");
    assert_eq!(dup[2], "effect");
    assert!(dup[3].contains("second effect for intent refund-4812"), "{dup:?}");
    assert_eq!(rows[13], vec!["+600 ms", "harness", "heal", "✚ heal every fault disarmed"]);
    // Server-side as before: the failure, its verdicts and its intents.
    assert_eq!(within(section, ".failure").len(), 1);
    assert_eq!(within(section, "table.intents").len(), 1);
}

#[test]
fn many_failures_start_closed() {
    let (_, doc) = page(&run_of((0..FAILURES_OPEN_MAX as u64).map(failing).collect()));
    assert_eq!(doc.select(&sel("section.scenario > details[open]")).count(), FAILURES_OPEN_MAX);
    let (_, doc) = page(&run_of((0..=FAILURES_OPEN_MAX as u64).map(failing).collect()));
    assert_eq!(doc.select(&sel("section.scenario > details[open]")).count(), 0);
    assert_eq!(doc.select(&sel(".toc-failures a")).count(), FAILURES_OPEN_MAX + 1, "each still linked");
}
