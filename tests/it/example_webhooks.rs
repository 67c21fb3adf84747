//! What the Python and TypeScript example executors' webhook tests share: the catalog's
//! webhook scenarios judged intent by intent, and the troubles of a webhook registration
//! (`twice/tests/it/webhooks.rs`'s `TROUBLES`, which the reference executor passes in the
//! simulator) as scenario files of these tests, with what each must show in the payments
//! journal.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use results::{Outcome, ScenarioResult, Source};
use runner::run::{self, Case, Driver, RunContext};

use crate::examples::{JOBS, SEED, catalog_cases, clean, describe, machine, work_dir};

/// The catalog's scenarios whose intents events start: eight.
pub(super) fn webhook_cases() -> Vec<Case> {
    let cases: Vec<Case> = catalog_cases().into_iter().filter(|c| c.scenario.needs_webhooks()).collect();
    let names: Vec<&str> = cases.iter().map(|c| c.scenario.name.as_str()).collect();
    assert_eq!(cases.len(), 8, "the catalog's webhook scenarios: {names:?}");
    cases
}

/// Runs the catalog's webhook scenarios live against `driver` and asserts that each passed
/// with every intent a genuine event starts carried out once (confirmed, one effect: never
/// reported unsupported, which the whole catalog's test would let pass) and the one only a
/// forged event asks for never started; `more` adds the executor's own checks of a result.
pub(super) fn receives_webhooks(
    prefix: &str,
    driver: &Driver<'_>,
    more: impl Fn(&Case, &ScenarioResult) -> Vec<String> + Sync,
) {
    let _turn = machine();
    let dir = work_dir(prefix, "webhooks");
    let cases = webhook_cases();
    // Each case on its own (`run_cases` keeps only a passed result's summary): its journals
    // are what `more` reads.
    let next = AtomicUsize::new(0);
    let problems = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..JOBS {
            scope.spawn(|| {
                while let Some(case) = cases.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let result = run::run_case(case, &RunContext::new(SEED, driver, &dir, "twice run"));
                    let mut found = triggered_problems(case, &result);
                    if found.is_empty() {
                        found = more(case, &result);
                    }
                    problems.lock().unwrap_or_else(|p| p.into_inner()).extend(found);
                }
            });
        }
    });
    clean(&dir);
    let problems = problems.into_inner().unwrap_or_else(|p| p.into_inner());
    assert!(problems.is_empty(), "the webhook scenarios:\n{}", problems.join("\n"));
}

/// What is wrong with the result of webhook scenario `case`: it did not pass, or an intent a
/// genuine event starts is not confirmed with one effect, or one only a forgery asks for started.
fn triggered_problems(case: &Case, result: &ScenarioResult) -> Vec<String> {
    let name = &case.scenario.name;
    if result.outcome != Outcome::Passed || !result.hazards.is_empty() {
        return vec![format!("{name}: {}", describe(result))];
    }
    let briefs = result.intent_briefs();
    let mut problems = Vec::new();
    for intent in &case.scenario.intents {
        let Some(trigger) = &intent.on_event else { continue };
        let got = briefs.iter().find(|b| b.id == intent.id).map(|b| (b.state.as_deref(), b.effects));
        let want = if trigger.forged { (None, 0) } else { (Some("confirmed"), 1) };
        if got != Some(want) {
            problems.push(format!("{name}: {} (state, effects) {got:?}, not {want:?}", intent.id));
        }
    }
    problems
}

/// One welcome email that order 1's payment starts, with keys the payments service ignores
/// (and its other terms `payments`), and `rest` (a fault or an event).
fn welcome_once(name: &str, payments: &str, rest: &str) -> Case {
    let text = format!(
        r#"
name = "{name}"
[services.payments]
idempotency_keys = "ignored"
settle_ms_max = 500
{payments}
[services.messages]
settle_ms_max = 500
read_lag_ms_max = 300
[[intents]]
id = "welcome"
action = "messages.send"
params = {{ to = "ada@example.com", subject = "Welcome", body = "Order 1 is paid." }}
on_event = {{ type = "payment_intent.succeeded", payment_intent = "pi_order_1" }}
[expect]
welcome = "confirmed"
{rest}
"#
    );
    let file = format!("{name}.toml");
    let scenario = scenarios::parse_scenario(&text, &file).expect("a valid scenario");
    Case { scenario, source: Source::File { path: file } }
}

/// The troubles of a registration: its answer lost after the endpoint was made (the one
/// endpoint when the customer pays, whose secret never arrived); the worker killed while it is
/// on its way; a 200 that did nothing, where acks may lie. (name, payments terms, trouble.)
const REGISTRATION_TROUBLES: &[(&str, &str, &str)] = &[
    (
        "registration-lost",
        "",
        r#"[[faults]]
service = "payments"
method = "POST"
path = "/v1/webhook_endpoints"
nth = 1
fault = { kind = "timeout_after_commit", hold_ms = 3000 }"#,
    ),
    (
        "registration-crash",
        "",
        r#"[[events]]
at = { service = "payments", method = "POST", path = "/v1/webhook_endpoints", nth = 1 }
do = "crash""#,
    ),
    (
        "registration-did-nothing",
        r#"acks = "may_lie""#,
        r#"[[faults]]
service = "payments"
method = "POST"
path = "/v1/webhook_endpoints"
nth = 1
fault = "silent_noop""#,
    ),
];

/// A registration is a write like any other, live: in each trouble of
/// [`REGISTRATION_TROUBLES`] the email the event starts ends confirmed with one effect, and
/// the event the worker may have missed is read from the API (`GET /v1/events`) by a life that
/// registered again. (a) A registration whose answer never came: made again by the same life,
/// then the events listed. (b) The registration kept in flight before it left: the next life,
/// finding it, makes an endpoint of its own (not a move) and lists the events. (c) Where acks
/// may lie, the 200 read back (`GET /v1/webhook_endpoints/{id}`) and, the endpoint still absent
/// past the bounds, made again under a new key.
pub(super) fn recovers_from_registration_troubles(prefix: &str, driver: &Driver<'_>) {
    let _turn = machine();
    let dir = work_dir(prefix, "registration");
    let mut problems = Vec::new();
    for (name, payments, trouble) in REGISTRATION_TROUBLES {
        let case = welcome_once(name, payments, trouble);
        let result = run::run_case(&case, &RunContext::new(SEED, driver, &dir, "twice run"));
        if result.outcome != Outcome::Passed {
            problems.push(format!("{name}: {}", describe(&result)));
            continue;
        }
        problems.extend(registration_problems(name, &result));
    }
    clean(&dir);
    assert!(problems.is_empty(), "the registration's troubles:\n{}", problems.join("\n"));
}

/// What is wrong with a passed run of trouble `name`, from its result and payments journal.
fn registration_problems(name: &str, result: &ScenarioResult) -> Vec<String> {
    let mut problems = Vec::new();
    let welcome = result.intent_briefs().into_iter().find(|i| i.id == "welcome");
    if !welcome.as_ref().is_some_and(|i| i.state.as_deref() == Some("confirmed") && i.effects == 1) {
        problems.push(format!("{name}: the welcome is not confirmed with one effect: {welcome:?}"));
    }
    let journal = result.observed.journals.get("payments").map(Vec::as_slice).unwrap_or_default();
    let creates: Vec<_> =
        journal.iter().filter(|e| e.method == "POST" && e.path == "/v1/webhook_endpoints").collect();
    let listed_by: Vec<&str> = journal
        .iter()
        .filter(|e| e.method == "GET" && e.path == "/v1/events")
        .map(|e| e.origin.as_deref().unwrap_or(""))
        .collect();
    let origins: Vec<&str> = creates.iter().map(|e| e.origin.as_deref().unwrap_or("")).collect();
    let keys: Vec<Option<&str>> = creates.iter().map(|e| e.idempotency_key.as_deref()).collect();
    let read_back = journal.iter().any(|e| e.method == "GET" && e.path.starts_with("/v1/webhook_endpoints/"));
    let right = match name {
        "registration-lost" => {
            origins.len() >= 2 && origins.iter().all(|o| *o == "w1#1") && !listed_by.is_empty()
        }
        "registration-crash" => {
            origins.first() == Some(&"w1#1") && origins.contains(&"w1#2") && listed_by.contains(&"w1#2")
        }
        _ => read_back && origins.len() >= 2 && keys[0] != keys[1] && !listed_by.is_empty(),
    };
    if !right {
        problems.push(format!(
            "{name}: creates by {origins:?} under {keys:?}, events listed by {listed_by:?}, read back: {read_back}"
        ));
    }
    problems
}
