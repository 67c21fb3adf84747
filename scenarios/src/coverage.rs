//! Coverage: what a set of scenarios (the catalog) exercises, and where it has holes.
//!
//! The matrix crosses every service ([`SERVICES`]) with every fault kind ([`FAULT_KINDS`])
//! and every process event ([`ProcessEvent`]). A cell is *applicable* when a correct executor
//! could meet it on that service: for a fault, when some contract the service can announce
//! admits it ([`Contract::admits`]); for an event, by the rule written on
//! [`ProcessEvent::applies_to`]. Its value is the scenarios that exercise it. Beside the
//! matrix, named [`Check`]s hold the dimensions that are not a service × column: lineage per
//! action, every contract term value a service can announce, every terminal state a scenario
//! can expect, and the rule fields (`probability`, `where`) that change which requests a fault
//! hits.
//!
//! Everything is derived from the vocabulary (services, actions, fault kinds, states,
//! contracts), so a service, an action, a fault kind or a state added there shows up here as a
//! hole until a scenario covers it. `docs/failure-modes.md` holds [`Coverage::to_markdown`]
//! of the catalog, and a test keeps the two equal.

use std::collections::BTreeSet;

use vocabulary::rule::FAULT_KINDS;
use vocabulary::{ACTIONS, Acks, Contract, FaultSpec, Guard, KeyPolicy, Reads, SERVICES, State};

use crate::model::{EventAction, Point, Scenario};
use crate::validate::action;

/// The calls a chain worker makes before its first broadcast (chain id, pending nonce, gas
/// price, tip; `docs/scenarios.md`): a point on a later call is reached after the transfer
/// was signed and its bytes recorded.
pub const CHAIN_CALLS_BEFORE_BROADCAST: u64 = 4;

/// The read lag a service announcing eventual reads is given here: enough for any stale read
/// a catalog scenario injects (the catalog keeps lags at or below 500 ms).
const EVENTUAL_READ_LAG_MS: u64 = 500;

/// Named checks that no fair scenario can meet, each with the reason. [`Coverage::holes`]
/// leaves them out, and the rendering gives the reason instead of a scenario; the catalog's
/// coverage test fails once one of them is met, so that the entry goes.
///
/// None at present. `an intent expected escalated` was one until services could refuse an
/// intent with a status a person must act on (400, 401, 403, 422), which every correct
/// executor escalates.
pub const UNREACHABLE: &[(&str, &str)] = &[];

/// A process event the harness can apply, as a column of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProcessEvent {
    /// A crash at a request point of the service (the request arrived, no answer yet).
    CrashAtRequest,
    /// A crash right after an intent was acknowledged as recorded.
    CrashAfterPropose,
    /// A crash at a lookup: a request point on a read (`GET`, `HEAD`) of the service.
    CrashDuringReconciliation,
    /// A crash once a transfer's signed bytes are recorded: a point on a chain call after the
    /// reads that come before the broadcast.
    CrashAfterSigning,
    /// A pause and a second worker that takes over (a `start_worker` in the same scenario).
    PauseWithTakeover,
    /// A pause that nobody takes over from.
    PauseWithoutTakeover,
    /// The service's clock jumps forward.
    ClockJump,
    /// Every fault disarmed by an event, before the heal phase.
    Heal,
    /// A reconciliation pass asked for by an event.
    Reconcile,
}

impl ProcessEvent {
    /// Every event column, in the order the matrix shows them.
    pub const ALL: [ProcessEvent; 9] = [
        ProcessEvent::CrashAtRequest,
        ProcessEvent::CrashAfterPropose,
        ProcessEvent::CrashDuringReconciliation,
        ProcessEvent::CrashAfterSigning,
        ProcessEvent::PauseWithTakeover,
        ProcessEvent::PauseWithoutTakeover,
        ProcessEvent::ClockJump,
        ProcessEvent::Heal,
        ProcessEvent::Reconcile,
    ];

    /// The column's name.
    pub fn name(self) -> &'static str {
        match self {
            ProcessEvent::CrashAtRequest => "crash at a request",
            ProcessEvent::CrashAfterPropose => "crash after propose",
            ProcessEvent::CrashDuringReconciliation => "crash during reconciliation",
            ProcessEvent::CrashAfterSigning => "crash after signing",
            ProcessEvent::PauseWithTakeover => "pause, with a takeover",
            ProcessEvent::PauseWithoutTakeover => "pause, no takeover",
            ProcessEvent::ClockJump => "clock jump",
            ProcessEvent::Heal => "heal",
            ProcessEvent::Reconcile => "reconcile",
        }
    }

    /// Whether the event makes sense on `service`.
    ///
    /// - Crashes at a request or after propose, pauses (with a takeover or not), heals and
    ///   reconciliations happen to a worker whatever service it talks to: every service.
    /// - A clock jump: every service keeps time against its contract (key retention, the
    ///   history a stale read sees, late commits), so every service.
    /// - A crash during reconciliation needs a point that only a lookup reaches: a read
    ///   method. On a JSON-RPC service every call, the broadcast included, is `POST /`, so no
    ///   point can single a lookup out there; it applies to the services whose actions are
    ///   written with another method than they are read with (the services without a
    ///   signing secret).
    /// - A crash after signing applies where an action is signed before it is sent: the
    ///   services of actions that need a signing secret (`ActionSpec::secret`).
    pub fn applies_to(self, service: &str) -> bool {
        let signed = ACTIONS.iter().any(|a| a.service == service && a.secret.is_some());
        match self {
            ProcessEvent::CrashDuringReconciliation => !signed,
            ProcessEvent::CrashAfterSigning => signed,
            _ => true,
        }
    }
}

/// A column of the matrix: a fault kind or a process event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Column {
    Fault(&'static str),
    Event(ProcessEvent),
}

impl Column {
    /// Every column: every fault kind, then every event.
    pub fn all() -> Vec<Column> {
        FAULT_KINDS.iter().map(|k| Column::Fault(k)).chain(ProcessEvent::ALL.map(Column::Event)).collect()
    }

    /// The column's name as the matrix shows it.
    pub fn name(self) -> &'static str {
        match self {
            Column::Fault(kind) => kind,
            Column::Event(e) => e.name(),
        }
    }
}

/// One cell: a service and a column, whether it applies, and the scenarios exercising it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub service: &'static str,
    pub column: Column,
    pub applicable: bool,
    /// Names of the scenarios that exercise the cell, in the order they were given.
    pub scenarios: Vec<String>,
}

/// A named check beyond the matrix, and the scenarios that meet it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What must be exercised, e.g. `lineage of files.put`.
    pub name: String,
    pub scenarios: Vec<String>,
}

/// The coverage of a set of scenarios.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coverage {
    /// Service by service, every column of [`Column::all`].
    pub cells: Vec<Cell>,
    pub checks: Vec<Check>,
}

/// The contracts `service` can announce: its own terms, with every term varied that the
/// service can change. Idempotency keys are honoured only by a service whose own terms
/// honour them (a service without keys in its API, such as S3 or a JSON-RPC node, can only
/// ignore them); reads may be eventual and acks may lie anywhere; a guard against stale
/// writes (fencing, conditional writes) is on or off where the action table says the service
/// can offer it; and unique business keys on or off where the service enforces them by
/// default.
pub fn announceable(service: &str) -> Vec<Contract> {
    let Some(own) = Contract::default_for(service) else { return vec![] };
    let keys = if own.idempotency_keys == KeyPolicy::Honored {
        vec![KeyPolicy::Honored, KeyPolicy::Ignored]
    } else {
        vec![KeyPolicy::Ignored]
    };
    let guards = guards_of(service);
    let flags = |offered: bool| if offered { vec![false, true] } else { vec![false] };
    let mut out = Vec::new();
    for idempotency_keys in &keys {
        for reads in [Reads::Strong, Reads::Eventual] {
            for acks in [Acks::Reliable, Acks::MayLie] {
                for fencing in flags(guards.contains(&Guard::Fencing)) {
                    for conditional_writes in flags(guards.contains(&Guard::ConditionalWrites)) {
                        for unique_business_key in flags(own.unique_business_key) {
                            out.push(Contract {
                                idempotency_keys: *idempotency_keys,
                                reads,
                                read_lag_ms_max: if reads == Reads::Eventual {
                                    EVENTUAL_READ_LAG_MS
                                } else {
                                    0
                                },
                                acks,
                                fencing,
                                conditional_writes,
                                unique_business_key,
                                ..own.clone()
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

fn guards_of(service: &str) -> Vec<Guard> {
    ACTIONS.iter().filter(|a| a.service == service).filter_map(|a| a.guard).collect()
}

/// A fault of `kind` with the smallest parameters it can have: what [`Contract::admits`] is
/// asked about. `None` for a kind this module does not know yet, which then counts as
/// applicable everywhere, so that a new kind shows up as holes rather than vanish.
fn sample(kind: &str) -> Option<FaultSpec> {
    match kind {
        "reject" => Some(FaultSpec::Reject { status: 503, body: None }),
        "stale_read" => Some(FaultSpec::StaleRead { lag_ms: 1 }),
        "latency" => Some(FaultSpec::Latency { before_ms: 1, after_ms: 0 }),
        "commit_after_timeout" => Some(FaultSpec::CommitAfterTimeout { delay_ms: Some(1) }),
        "forget_keys" => Some(FaultSpec::ForgetKeys { older_than_ms: Some(vocabulary::DAY_MS) }),
        "deliver_late" => Some(FaultSpec::DeliverLate { delay_ms: 1 }),
        "delay_webhook" => Some(FaultSpec::DelayWebhook { delay_ms: 1 }),
        "webhook_endpoint_down" => Some(FaultSpec::WebhookEndpointDown { for_ms: 1 }),
        other => FaultSpec::from_name(other).ok(),
    }
}

/// Whether a fault of `kind` can be fair on `service`: it can act there at all
/// ([`FaultSpec::services`]: a late or repeated delivery only where something is delivered),
/// and some contract the service can announce admits it. The key faults (`forget_keys`,
/// `ignore_keys`) are admitted by any contract whose keys are ignored, where they change
/// nothing; they apply only to a service that can honour keys.
pub fn fault_applies(service: &str, kind: &str) -> bool {
    let contracts = announceable(service);
    let keyed = contracts.iter().any(|c| c.idempotency_keys == KeyPolicy::Honored);
    if matches!(kind, "forget_keys" | "ignore_keys") && !keyed {
        return false;
    }
    match sample(kind) {
        Some(fault) => {
            fault.check_service(service).is_ok() && contracts.iter().any(|c| c.admits(&fault).is_ok())
        }
        None => true,
    }
}

/// The services a scenario's intents use.
fn intent_services(s: &Scenario) -> BTreeSet<&'static str> {
    s.intents.iter().filter_map(|i| action(&i.action)).map(|a| a.service).collect()
}

/// The services an event at `at` concerns: the service of a request point, or else every
/// service the scenario's intents use.
fn point_services(s: &Scenario, at: &Point) -> BTreeSet<String> {
    match at {
        Point::Request { service, .. } => BTreeSet::from([service.clone()]),
        _ => intent_services(s).into_iter().map(str::to_string).collect(),
    }
}

/// Whether `s` exercises `column` on `service`.
fn exercises(s: &Scenario, service: &str, column: Column) -> bool {
    let on = |at: &Point| point_services(s, at).contains(service);
    let takeover = s.events.iter().any(|e| matches!(e.action, EventAction::StartWorker { .. }));
    match column {
        Column::Fault(kind) => s.faults.iter().any(|f| f.service == service && f.rule.fault.kind() == kind),
        Column::Event(event) => s.events.iter().any(|e| match (event, &e.action, &e.at) {
            (ProcessEvent::CrashAtRequest, EventAction::Crash { .. }, Point::Request { service: at, .. }) => {
                at == service
            }
            (ProcessEvent::CrashAfterPropose, EventAction::Crash { .. }, Point::AfterPropose { .. }) => {
                on(&e.at)
            }
            (
                ProcessEvent::CrashDuringReconciliation,
                EventAction::Crash { .. },
                Point::Request { service: at, method: Some(m), .. },
            ) => at == service && (m.eq_ignore_ascii_case("GET") || m.eq_ignore_ascii_case("HEAD")),
            (
                ProcessEvent::CrashAfterSigning,
                EventAction::Crash { .. },
                Point::Request { service: at, nth, .. },
            ) => at == service && *nth > CHAIN_CALLS_BEFORE_BROADCAST,
            (ProcessEvent::PauseWithTakeover, EventAction::Pause { .. }, _) => takeover && on(&e.at),
            (ProcessEvent::PauseWithoutTakeover, EventAction::Pause { .. }, _) => !takeover && on(&e.at),
            (ProcessEvent::ClockJump, EventAction::ClockJump { service: jumped, .. }, _) => jumped == service,
            (ProcessEvent::Heal, EventAction::Heal, _)
            | (ProcessEvent::Reconcile, EventAction::Reconcile { .. }, _) => on(&e.at),
            _ => false,
        }),
    }
}

/// The named checks: each a requirement and the scenarios meeting it.
fn checks(scenarios: &[Scenario]) -> Vec<Check> {
    let names = |pred: &dyn Fn(&Scenario) -> bool| -> Vec<String> {
        scenarios.iter().filter(|s| pred(s)).map(|s| s.name.clone()).collect()
    };
    let mut out = Vec::new();
    // Every action can be replaced: the validator lets `replaces` name an earlier intent of
    // any action, so every action's lineage needs a scenario.
    for spec in ACTIONS {
        out.push(Check {
            name: format!("lineage of {}", spec.name),
            scenarios: names(&|s| s.intents.iter().any(|i| i.action == spec.name && i.replaces.is_some())),
        });
    }
    // Every term value a service can announce, in a scenario whose intents use the service.
    for service in SERVICES {
        for (term, value) in term_values(service) {
            let announced = |s: &Scenario| {
                intent_services(s).contains(service)
                    && s.contract(service).is_some_and(|c| term_value(&c, term) == value)
            };
            out.push(Check { name: format!("{service}: {term} = {value}"), scenarios: names(&announced) });
        }
    }
    // Every terminal state a scenario can expect.
    for state in State::ALL.into_iter().filter(|s| s.is_terminal()) {
        out.push(Check {
            name: format!("an intent expected {state}"),
            scenarios: names(&|s| {
                s.expect.values().any(|v| v.states().iter().any(|v| State::parse(v) == Some(state)))
            }),
        });
    }
    // A refusal that needs a person's decision is answered otherwise than one that says "not
    // now" (429, 503): escalated, never retried.
    out.push(Check {
        name: "a reject that needs a decision (400, 401, 403 or 422)".into(),
        scenarios: names(&|s| {
            s.faults.iter().any(|f| {
                matches!(f.rule.fault, FaultSpec::Reject { status, .. } if vocabulary::needs_decision(status))
            })
        }),
    });
    out.push(Check {
        name: "a fault rule with a probability".into(),
        scenarios: names(&|s| s.faults.iter().any(|f| f.rule.probability.is_some())),
    });
    out.push(Check {
        name: "a fault rule with where".into(),
        scenarios: names(&|s| s.faults.iter().any(|f| !f.rule.fields.is_empty())),
    });
    out
}

/// The terms whose values change what a fake does or what an executor may rely on.
const TERMS: [&str; 6] =
    ["idempotency_keys", "reads", "acks", "fencing", "conditional_writes", "unique_business_key"];

/// A term's value in `contract`, as scenario files write it.
fn term_value(contract: &Contract, term: &str) -> String {
    match term {
        "idempotency_keys" => match contract.idempotency_keys {
            KeyPolicy::Honored => "honored".into(),
            KeyPolicy::Ignored => "ignored".into(),
        },
        "reads" => match contract.reads {
            Reads::Strong => "strong".into(),
            Reads::Eventual => "eventual".into(),
        },
        "acks" => match contract.acks {
            Acks::Reliable => "reliable".into(),
            Acks::MayLie => "may_lie".into(),
        },
        "fencing" => contract.fencing.to_string(),
        "conditional_writes" => contract.conditional_writes.to_string(),
        "unique_business_key" => contract.unique_business_key.to_string(),
        _ => String::new(),
    }
}

/// Every (term, value) some contract `service` can announce takes, in [`TERMS`] order, for
/// the terms that take more than one.
fn term_values(service: &str) -> Vec<(&'static str, String)> {
    let contracts = announceable(service);
    let mut out = Vec::new();
    for term in TERMS {
        let values: BTreeSet<String> = contracts.iter().map(|c| term_value(c, term)).collect();
        // A term the service cannot change (fencing on files) is the same in every scenario:
        // nothing to cover.
        if values.len() > 1 {
            out.extend(values.into_iter().map(|v| (term, v)));
        }
    }
    out
}

impl Coverage {
    /// The coverage of `scenarios`.
    pub fn of(scenarios: &[Scenario]) -> Coverage {
        let mut cells = Vec::new();
        for service in SERVICES {
            for column in Column::all() {
                let applicable = match column {
                    Column::Fault(kind) => fault_applies(service, kind),
                    Column::Event(e) => e.applies_to(service),
                };
                let scenarios = scenarios
                    .iter()
                    .filter(|s| exercises(s, service, column))
                    .map(|s| s.name.clone())
                    .collect();
                cells.push(Cell { service, column, applicable, scenarios });
            }
        }
        Coverage { cells, checks: checks(scenarios) }
    }

    /// The cell of `service` and `column`.
    pub fn cell(&self, service: &str, column: Column) -> Option<&Cell> {
        self.cells.iter().find(|c| c.service == service && c.column == column)
    }

    /// Every applicable cell without a scenario and every unmet check, one line each.
    pub fn holes(&self) -> Vec<String> {
        let cells = self
            .cells
            .iter()
            .filter(|c| c.applicable && c.scenarios.is_empty())
            .map(|c| format!("{} × {}: no scenario", c.service, c.column.name()));
        let checks = self
            .checks
            .iter()
            .filter(|c| c.scenarios.is_empty() && unreachable(&c.name).is_none())
            .map(|c| format!("{}: no scenario", c.name));
        cells.chain(checks).collect()
    }

    /// The matrix (a row per column, a column per service) and the checks, as Markdown.
    /// Scenario names are in code spans; nothing else is, so that the tables name no word
    /// that is not a scenario.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!("| fault or event | {} |\n", SERVICES.join(" | ")));
        out.push_str(&format!("|---|{}\n", "---|".repeat(SERVICES.len())));
        for column in Column::all() {
            let cells: Vec<String> = SERVICES
                .iter()
                .map(|service| match self.cell(service, column) {
                    Some(cell) if !cell.applicable => "n/a".to_string(),
                    Some(cell) if cell.scenarios.is_empty() => "**none**".to_string(),
                    Some(cell) => spans(&cell.scenarios),
                    None => "n/a".to_string(),
                })
                .collect();
            out.push_str(&format!("| {} | {} |\n", column.name(), cells.join(" | ")));
        }
        out.push_str("\n| check | scenarios |\n|---|---|\n");
        for check in &self.checks {
            let which = match unreachable(&check.name) {
                Some(why) if check.scenarios.is_empty() => format!("not reachable: {why}"),
                _ if check.scenarios.is_empty() => "**none**".to_string(),
                _ => spans(&check.scenarios),
            };
            out.push_str(&format!("| {} | {which} |\n", check.name));
        }
        out
    }
}

/// Why the check called `name` cannot be met, if it is one of [`UNREACHABLE`].
pub fn unreachable(name: &str) -> Option<&'static str> {
    UNREACHABLE.iter().find(|(n, _)| *n == name).map(|(_, why)| *why)
}

fn spans(names: &[String]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Vec<Scenario> {
        crate::catalog().expect("the catalog loads")
    }

    /// A cell's only scenario removed leaves it empty, and a hole: the coverage test can fail.
    #[test]
    fn a_cell_whose_only_scenario_is_removed_is_a_hole() {
        let all = catalog();
        let coverage = Coverage::of(&all);
        let (cell, only) = coverage
            .cells
            .iter()
            .filter(|c| c.applicable)
            .find_map(|c| match c.scenarios.as_slice() {
                [one] => Some((c.clone(), one.clone())),
                _ => None,
            })
            .expect("some applicable cell has exactly one scenario");
        let rest: Vec<Scenario> = all.into_iter().filter(|s| s.name != only).collect();
        let without = Coverage::of(&rest);
        let after = without.cell(cell.service, cell.column).expect("the cell exists");
        assert!(after.applicable && after.scenarios.is_empty(), "{after:?}");
        let hole = format!("{} × {}: no scenario", cell.service, cell.column.name());
        assert!(without.holes().contains(&hole), "{:?}", without.holes());
    }

    #[test]
    fn applicability_follows_the_contracts_a_service_can_announce() {
        // Keys exist on payments and workspaces only.
        assert!(fault_applies("payments", "ignore_keys"));
        assert!(fault_applies("workspaces", "forget_keys"));
        assert!(!fault_applies("files", "ignore_keys"));
        assert!(!fault_applies("chain", "forget_keys"));
        // Deliveries are late or repeated only where a message is delivered.
        assert!(fault_applies("messages", "deliver_late") && fault_applies("messages", "redeliver"));
        assert!(!fault_applies("payments", "deliver_late") && !fault_applies("chain", "redeliver"));
        // Any service may announce eventual reads and acks that lie.
        for service in SERVICES {
            assert!(fault_applies(service, "stale_read"), "{service}");
            assert!(fault_applies(service, "silent_noop"), "{service}");
        }
        assert!(ProcessEvent::CrashAfterSigning.applies_to("chain"));
        assert!(!ProcessEvent::CrashAfterSigning.applies_to("files"));
        assert!(!ProcessEvent::CrashDuringReconciliation.applies_to("chain"));
        // Guards are on and off only where the action table offers them.
        let files = term_values("files");
        assert!(files.contains(&("conditional_writes", "false".into())));
        assert!(files.contains(&("conditional_writes", "true".into())));
        assert!(!files.contains(&("fencing", "true".into())));
    }

    #[test]
    fn every_column_is_in_the_rendering() {
        let text = Coverage::of(&catalog()).to_markdown();
        for column in Column::all() {
            assert!(text.contains(&format!("| {} |", column.name())), "{}", column.name());
        }
    }
}
