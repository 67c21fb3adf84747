//! The fault engine: armed rules, their counters, and the plan for one request.
//!
//! For every request the engine walks the rules in the order they were added, counts the
//! ones whose predicate matches, decides (with the seeded RNG) which of them fire, and folds
//! the fired faults into a [`Plan`]: the points of the fake's own processing at which
//! something goes wrong. Faults combine: a `forget_keys` and a `drop_after_commit` can both
//! fire on one request. Where two fired faults want the same point, the earlier rule wins.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use vocabulary::rule::{FaultRule, FaultSpec, RequestView};

/// At most this many rules per service, so a runaway client cannot grow a fake without bound.
pub const RULES_MAX: usize = 10_000;

/// When and whether the write commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitMode {
    #[default]
    Now,
    /// After holding the request this long (`None`: the contract's settle bound).
    Late { delay_ms: Option<u64> },
    /// Never: answer as if it had.
    Noop,
}

/// What happens to the answer once processing is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AfterCommit {
    #[default]
    Respond,
    Error {
        status: u16,
    },
    Drop,
    Hold {
        hold_ms: u64,
    },
}

/// A fault that fired on a request, as journals name it (a shared shape).
pub use vocabulary::record::Applied;

/// Everything the fired rules ask of one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub applied: Vec<Applied>,
    /// Where each of `applied` acts ([`FaultSpec::point`]), in the same order: for the log
    /// line of each fault fired, never for journals.
    pub points: Vec<&'static str>,
    pub refuse: bool,
    pub reject: Option<(u16, Option<serde_json::Value>)>,
    pub before_ms: u64,
    pub after_ms: u64,
    pub commit: CommitMode,
    pub after_commit: AfterCommit,
    pub stale_lag_ms: Option<u64>,
    /// Forget keys at least this old (0: all) before looking this request's key up.
    pub forget_keys_older_than_ms: Option<u64>,
    pub ignore_keys: bool,
    /// A delivery lands this long after the request arrived (`deliver_late`); the service
    /// that delivers reads it, the others never see it (the rule is refused elsewhere).
    pub deliver_after_ms: Option<u64>,
    /// The provider delivers again, this long after the request arrived (`redeliver`).
    pub redeliver_after_ms: Option<u64>,
    /// What happens to the webhooks of the events this request makes (payments only).
    pub webhook: WebhookPlan,
}

/// What the webhook faults that fired on a request ask of the deliveries of the events it
/// makes. The service that sends webhooks reads it; the others never see it (the rule is
/// refused elsewhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WebhookPlan {
    /// Each event is sent a second time, this long after its first attempt was due
    /// (`duplicate_webhook`).
    pub again_after_ms: Option<u64>,
    /// The first attempt comes this long after the event (`delay_webhook`).
    pub delay_ms: Option<u64>,
    /// The endpoint's first 2xx is lost (`lose_webhook_ack`).
    pub lose_ack: bool,
    /// Attempts due this long after the event fail unsent (`webhook_endpoint_down`).
    pub down_for_ms: Option<u64>,
    /// Each event is replayed once under a signature 600 s old (`stale_webhook`).
    pub stale_replay: bool,
}

/// A rule with its counters.
#[derive(Debug, Clone, Serialize)]
pub struct ArmedRule {
    #[serde(flatten)]
    pub rule: FaultRule,
    /// Requests that matched the predicate so far.
    pub matched: u64,
    /// Requests the fault was applied to so far.
    pub fired: u64,
}

/// The rules of one service.
#[derive(Debug, Default)]
pub struct FaultEngine {
    rules: Vec<ArmedRule>,
    next_rule: u64,
}

impl FaultEngine {
    /// Arms a rule after validating it; returns its id.
    pub fn add(&mut self, mut rule: FaultRule) -> Result<String, String> {
        rule.validate()?;
        if self.rules.len() >= RULES_MAX {
            return Err(format!("this service already holds {RULES_MAX} rules; clear some first"));
        }
        self.next_rule += 1;
        let id = rule.id.clone().unwrap_or_else(|| format!("rule-{}", self.next_rule));
        if self.rules.iter().any(|r| r.rule.id.as_deref() == Some(id.as_str())) {
            return Err(format!("a rule with id \"{id}\" is already armed"));
        }
        rule.id = Some(id.clone());
        self.rules.push(ArmedRule { rule, matched: 0, fired: 0 });
        Ok(id)
    }

    pub fn rules(&self) -> &[ArmedRule] {
        &self.rules
    }

    /// Whether any armed rule matches on request fields.
    pub fn matches_fields(&self) -> bool {
        self.rules.iter().any(|r| !r.rule.fields.is_empty())
    }

    /// Disarms one rule; false when there was none by that id.
    pub fn remove(&mut self, id: &str) -> bool {
        let before = self.rules.len();
        self.rules.retain(|r| r.rule.id.as_deref() != Some(id));
        before != self.rules.len()
    }

    pub fn clear(&mut self) {
        self.rules.clear();
    }

    /// Counts matches, draws probabilities and folds the fired faults into a plan.
    pub fn plan(&mut self, request: &RequestView<'_>, rng: &mut ChaCha8Rng) -> Plan {
        let mut plan = Plan::default();
        for armed in &mut self.rules {
            if !armed.rule.matches(request) {
                continue;
            }
            armed.matched += 1;
            let nth = armed.rule.nth.unwrap_or(1);
            let times = armed.rule.times.or(armed.rule.nth.map(|_| 1));
            let eligible = armed.matched >= nth && times.is_none_or(|t| armed.fired < t);
            if !eligible {
                continue;
            }
            if let Some(p) = armed.rule.probability {
                // Drawn only for eligible requests, so adding a rule elsewhere does not shift
                // this rule's draws.
                if rng.random::<f64>() >= p {
                    continue;
                }
            }
            armed.fired += 1;
            plan.applied.push(Applied {
                rule: armed.rule.id.clone().unwrap_or_default(),
                fault: armed.rule.fault.kind().to_string(),
            });
            plan.points.push(armed.rule.fault.point());
            fold(&mut plan, &armed.rule.fault);
        }
        plan
    }
}

fn fold(plan: &mut Plan, fault: &FaultSpec) {
    match fault {
        FaultSpec::Refuse => plan.refuse = true,
        FaultSpec::Reject { status, body } => {
            plan.reject.get_or_insert((*status, body.clone()));
        }
        FaultSpec::ErrorAfterCommit { status } => {
            if plan.after_commit == AfterCommit::Respond {
                plan.after_commit = AfterCommit::Error { status: *status };
            }
        }
        FaultSpec::DropAfterCommit => {
            if plan.after_commit == AfterCommit::Respond {
                plan.after_commit = AfterCommit::Drop;
            }
        }
        FaultSpec::TimeoutAfterCommit { hold_ms } => {
            if plan.after_commit == AfterCommit::Respond {
                plan.after_commit = AfterCommit::Hold { hold_ms: *hold_ms };
            }
        }
        FaultSpec::CommitAfterTimeout { delay_ms } => {
            if plan.commit == CommitMode::Now {
                plan.commit = CommitMode::Late { delay_ms: *delay_ms };
            }
        }
        FaultSpec::SilentNoop => {
            if plan.commit == CommitMode::Now {
                plan.commit = CommitMode::Noop;
            }
        }
        FaultSpec::StaleRead { lag_ms } => {
            plan.stale_lag_ms = Some(plan.stale_lag_ms.unwrap_or(0).max(*lag_ms));
        }
        FaultSpec::ForgetKeys { older_than_ms } => {
            let older = older_than_ms.unwrap_or(0);
            plan.forget_keys_older_than_ms =
                Some(plan.forget_keys_older_than_ms.map_or(older, |o| o.min(older)));
        }
        FaultSpec::IgnoreKeys => plan.ignore_keys = true,
        FaultSpec::Latency { before_ms, after_ms } => {
            plan.before_ms = plan.before_ms.saturating_add(*before_ms);
            plan.after_ms = plan.after_ms.saturating_add(*after_ms);
        }
        FaultSpec::DeliverLate { delay_ms } => {
            plan.deliver_after_ms.get_or_insert(*delay_ms);
        }
        FaultSpec::Redeliver { after_ms } => {
            plan.redeliver_after_ms.get_or_insert(*after_ms);
        }
        FaultSpec::DuplicateWebhook { after_ms } => {
            plan.webhook.again_after_ms.get_or_insert(*after_ms);
        }
        FaultSpec::DelayWebhook { delay_ms } => {
            plan.webhook.delay_ms.get_or_insert(*delay_ms);
        }
        FaultSpec::LoseWebhookAck => plan.webhook.lose_ack = true,
        FaultSpec::WebhookEndpointDown { for_ms } => {
            plan.webhook.down_for_ms.get_or_insert(*for_ms);
        }
        FaultSpec::StaleWebhook => plan.webhook.stale_replay = true,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::SeedableRng;

    use super::*;

    fn fired_on(rule: FaultRule, requests: usize) -> Vec<bool> {
        let mut engine = FaultEngine::default();
        engine.add(rule).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let fields = BTreeMap::new();
        let view = RequestView { method: "POST", path: "/v1/refunds", fields: &fields };
        (0..requests).map(|_| !engine.plan(&view, &mut rng).applied.is_empty()).collect()
    }

    #[test]
    fn nth_and_times_select_a_window_of_matches() {
        let drop = FaultRule::always(FaultSpec::DropAfterCommit);
        let cases: [(FaultRule, [bool; 5]); 4] = [
            (drop.clone(), [true; 5]),
            (drop.clone().nth(2), [false, true, false, false, false]),
            (drop.clone().times(2), [true, true, false, false, false]),
            (drop.nth(2).times(3), [false, true, true, true, false]),
        ];
        for (rule, want) in cases {
            assert_eq!(fired_on(rule.clone(), 5), want, "{rule:?}");
        }
    }

    #[test]
    fn probability_is_drawn_from_the_seeded_rng() {
        let mut rule = FaultRule::always(FaultSpec::Refuse);
        rule.probability = Some(0.5);
        let first = fired_on(rule.clone(), 200);
        assert_eq!(first, fired_on(rule, 200), "same seed, same draws");
        let hits = first.iter().filter(|f| **f).count();
        assert!((50..150).contains(&hits), "{hits} of 200 at p = 0.5");
    }

    #[test]
    fn the_earlier_rule_wins_a_contested_point_and_latencies_add() {
        let mut engine = FaultEngine::default();
        for fault in [
            FaultSpec::DropAfterCommit,
            FaultSpec::ErrorAfterCommit { status: 500 },
            FaultSpec::Latency { before_ms: 5, after_ms: 0 },
            FaultSpec::Latency { before_ms: 7, after_ms: 1 },
        ] {
            engine.add(FaultRule::always(fault)).unwrap();
        }
        let fields = BTreeMap::new();
        let view = RequestView { method: "GET", path: "/", fields: &fields };
        let plan = engine.plan(&view, &mut ChaCha8Rng::seed_from_u64(1));
        assert_eq!(plan.after_commit, AfterCommit::Drop);
        assert_eq!((plan.before_ms, plan.after_ms), (12, 1));
        assert_eq!(plan.applied.len(), 4);
    }

    #[test]
    fn the_number_of_rules_is_bounded() {
        let mut engine = FaultEngine::default();
        for _ in 0..RULES_MAX {
            engine.add(FaultRule::always(FaultSpec::Refuse)).unwrap();
        }
        let err = engine.add(FaultRule::always(FaultSpec::Refuse)).unwrap_err();
        assert!(err.contains("already holds 10000 rules"), "{err}");
        engine.clear();
        assert!(engine.add(FaultRule::always(FaultSpec::Refuse)).is_ok());
    }

    #[test]
    fn duplicate_ids_are_refused() {
        let mut engine = FaultEngine::default();
        let mut rule = FaultRule::always(FaultSpec::Refuse);
        rule.id = Some("a".into());
        engine.add(rule.clone()).unwrap();
        assert!(engine.add(rule).unwrap_err().contains("already armed"));
    }
}
