//! The control API under `/__twice/` that every fake answers: health, rules, clock, contract,
//! reset, seed, ledger and journal. [`CONTROL_ROUTES`] is the one table its router reads.

use serde::Deserialize;
use serde_json::json;

use super::service::ServiceCore;
use super::state::Inner;
use crate::fault_engine::FaultEngine;
use crate::wire::{FakeRequest, FakeResponse};
use vocabulary::contract::ContractPatch;
use vocabulary::rule::FaultRule;

impl<S: Default + Send + 'static> ServiceCore<S> {
    /// Arms a rule after checking that its fault can act on this service; returns its id.
    pub fn add_rule(&self, rule: FaultRule) -> Result<String, String> {
        add_rule(self.name, &mut self.lock().engine, rule)
    }

    /// The control API under `/__twice/`; `seed` handles the service's own `POST /__twice/seed`.
    pub fn control(
        &self,
        req: &FakeRequest,
        seed: impl FnOnce(&mut Inner<S>, &[u8]) -> Result<serde_json::Value, String>,
    ) -> FakeResponse {
        let response = self.answer_control(req, seed);
        tracing::debug!(
            target: "twice::request",
            service = self.name, method = %req.method, path = %req.path, status = response.status,
            "control request"
        );
        response
    }

    /// The answer to a control request: its route's, or 404 or 405 for a route the API does
    /// not have.
    fn answer_control(
        &self,
        req: &FakeRequest,
        seed: impl FnOnce(&mut Inner<S>, &[u8]) -> Result<serde_json::Value, String>,
    ) -> FakeResponse {
        let route = req.path.trim_start_matches("/__twice").trim_end_matches('/');
        let method = req.method.as_str();
        let Some((control, id)) = control_route(method, route) else {
            return unrouted(req, method, route);
        };
        // serde reads a struct from a JSON array too (`[5]` as `{"by_ms": 5}`, `[]` as an
        // empty seed or patch): these bodies are objects, and anything else is refused.
        if matches!(control, Control::JumpClock | Control::PatchContract | Control::Seed)
            && let Err(e) = object_body(&req.body)
        {
            return bad(e);
        }
        match control {
            Control::Health => FakeResponse::json(200, &json!({"service": self.name, "ok": true})),
            Control::Rules => FakeResponse::json(200, &json!({"rules": self.lock().engine.rules()})),
            Control::AddRules => self.add_rules(&req.body),
            Control::ClearRules => {
                self.lock().engine.clear();
                FakeResponse::json(200, &json!({"cleared": true}))
            }
            Control::RemoveRule => {
                if self.lock().engine.remove(id) {
                    FakeResponse::json(200, &json!({"removed": id}))
                } else {
                    FakeResponse::json(404, &json!({"error": {"message": format!("no rule \"{id}\"")}}))
                }
            }
            Control::Clock => FakeResponse::json(
                200,
                &json!({"now_ms": self.clock.now_ms(), "jumped_ms": self.clock.jumped_ms()}),
            ),
            Control::JumpClock => self.jump_clock(&req.body),
            Control::Contract => FakeResponse::json(200, &json!(self.lock().contract)),
            Control::PatchContract => self.patch_contract(&req.body),
            Control::Reset => {
                self.reset();
                FakeResponse::json(200, &json!({"reset": true}))
            }
            Control::Seed => self.seed_control(&req.body, seed),
            Control::Webhooks | Control::ForgeWebhook => FakeResponse::json(
                404,
                &json!({"error": {"message": format!(
                    "the {} fake sends no webhooks: only the payments fake does", self.name
                )}}),
            ),
            Control::Ledger => {
                let inner = self.lock();
                FakeResponse::json(200, &json!({"service": self.name, "effects": inner.ledger.effects()}))
            }
            Control::Journal => self.journal(),
        }
    }

    /// `POST /__twice/rules`: arms one rule or a list of them, in order; the first that
    /// cannot act on this service is refused, with the ids of those armed before it.
    fn add_rules(&self, body: &[u8]) -> FakeResponse {
        let rules: Vec<FaultRule> = match parse_one_or_many(body) {
            Ok(rules) => rules,
            Err(e) => return bad(format!("invalid rule: {e}")),
        };
        let mut inner = self.lock();
        let mut ids = Vec::new();
        for rule in rules {
            match add_rule(self.name, &mut inner.engine, rule) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    return bad(format!("invalid rule: {e} (rules before it were armed: {ids:?})"));
                }
            }
        }
        FakeResponse::json(201, &json!({"ids": ids}))
    }

    /// `POST /__twice/clock/jump`: moves the service's clock on by `by_ms`.
    fn jump_clock(&self, body: &[u8]) -> FakeResponse {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Jump {
            by_ms: u64,
        }
        match serde_json::from_slice::<Jump>(body) {
            Ok(jump) => {
                self.clock.jump_ms(jump.by_ms);
                FakeResponse::json(
                    200,
                    &json!({"now_ms": self.clock.now_ms(), "jumped_ms": self.clock.jumped_ms()}),
                )
            }
            Err(e) => bad(format!("expected {{\"by_ms\": N}}: {e}")),
        }
    }

    /// `PATCH` (or `POST`) `/__twice/contract`: the terms the patch names changed, the
    /// contract as it now is in the answer.
    fn patch_contract(&self, body: &[u8]) -> FakeResponse {
        match serde_json::from_slice::<ContractPatch>(body) {
            Ok(patch) => {
                let mut inner = self.lock();
                inner.contract.apply(patch);
                FakeResponse::json(200, &json!(inner.contract))
            }
            Err(e) => bad(format!("invalid contract: {e}")),
        }
    }

    /// `GET /__twice/journal`: every request the fake answered, its bound and how many it
    /// refused for want of room.
    fn journal(&self) -> FakeResponse {
        let inner = self.lock();
        let entries: Vec<_> = inner.journal.entries().collect();
        FakeResponse::json(
            200,
            &json!({
                "service": self.name,
                "entries": entries,
                "capacity": inner.journal.capacity(),
                "refused": inner.journal.refused(),
            }),
        )
    }

    /// `POST /__twice/seed`: the service's own seed, refused where it would hold more seeded
    /// objects than the fake's bound.
    fn seed_control(
        &self,
        body: &[u8],
        seed: impl FnOnce(&mut Inner<S>, &[u8]) -> Result<serde_json::Value, String>,
    ) -> FakeResponse {
        let count = seed_items(body);
        let mut inner = self.lock();
        let max = inner.bounds.seeded_objects_max;
        if inner.seeded_objects.saturating_add(count) > max {
            return bad(format!(
                "this seed has {count} objects and {} already holds {} seeded ones; at most {max} are held: reset first",
                self.name, inner.seeded_objects
            ));
        }
        match seed(&mut inner, body) {
            Ok(seeded) => {
                inner.seeded_objects += count;
                FakeResponse::json(201, &seeded)
            }
            Err(e) => bad(e),
        }
    }
}

/// A control request that is not understood: 400 with `message`.
fn bad(message: String) -> FakeResponse {
    FakeResponse::json(400, &json!({"error": {"message": message}}))
}

/// The answer to a path the control API does not have as asked: 405 with the methods it
/// takes there (RFC 9110 §15.5.6), or 404 where it has no such path at all.
fn unrouted(req: &FakeRequest, method: &str, route: &str) -> FakeResponse {
    let allowed = control_methods(route);
    if !allowed.is_empty() {
        let allow = allowed.join(", ");
        return FakeResponse::json(
            405,
            &json!({"error": {"message": format!("{method} {} is not allowed; it takes {allow}", req.path)}}),
        )
        .with_header("allow", &allow);
    }
    FakeResponse::json(
        404,
        &json!({"error": {"message": format!("no control route {method} {}; see docs/faults.md", req.path)}}),
    )
}

/// How many objects a seed body asks for: the items of its top-level lists (a body that is not
/// a JSON object counts none; the seed itself refuses it).
fn seed_items(body: &[u8]) -> usize {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(fields)) => {
            fields.values().filter_map(serde_json::Value::as_array).map(Vec::len).sum()
        }
        _ => 0,
    }
}

/// What a control request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Health,
    Rules,
    AddRules,
    ClearRules,
    RemoveRule,
    Clock,
    JumpClock,
    Contract,
    PatchContract,
    Reset,
    Seed,
    Ledger,
    Journal,
    /// Webhook endpoints, deliveries and attempts: answered by the payments fake, the only one
    /// that sends webhooks; every other fake says so.
    Webhooks,
    /// Sends a forged webhook event (payments only; every other fake says it sends none).
    ForgeWebhook,
}

/// Every route of a fake's control API: method, path (`{id}` is a rule's id) and what it asks
/// for. The router reads this table and nothing else, so `docs/openapi/fakes.json`, which a
/// test compares with it, lists exactly what is served.
pub const CONTROL_ROUTES: &[(&str, &str, Control)] = &[
    ("GET", "/__twice", Control::Health),
    ("GET", "/__twice/health", Control::Health),
    ("GET", "/__twice/rules", Control::Rules),
    ("POST", "/__twice/rules", Control::AddRules),
    ("DELETE", "/__twice/rules", Control::ClearRules),
    ("DELETE", "/__twice/rules/{id}", Control::RemoveRule),
    ("GET", "/__twice/clock", Control::Clock),
    ("POST", "/__twice/clock/jump", Control::JumpClock),
    ("GET", "/__twice/contract", Control::Contract),
    ("PATCH", "/__twice/contract", Control::PatchContract),
    ("POST", "/__twice/contract", Control::PatchContract),
    ("POST", "/__twice/reset", Control::Reset),
    ("POST", "/__twice/seed", Control::Seed),
    ("GET", "/__twice/ledger", Control::Ledger),
    ("GET", "/__twice/journal", Control::Journal),
    ("GET", "/__twice/webhooks", Control::Webhooks),
    ("POST", "/__twice/webhooks/forge", Control::ForgeWebhook),
];

/// The control route `method` and `path` (under `/__twice`, without it) ask for, with the
/// rule id where the path has one.
pub fn control_route<'p>(method: &str, path: &'p str) -> Option<(Control, &'p str)> {
    CONTROL_ROUTES.iter().find_map(|(m, pattern, control)| {
        if *m == method { Some((*control, route_id(pattern, path)?)) } else { None }
    })
}

/// The methods the control API takes on `path` (under `/__twice`, without it), in the order
/// of [`CONTROL_ROUTES`]; empty for a path it does not have.
pub fn control_methods(path: &str) -> Vec<&'static str> {
    CONTROL_ROUTES
        .iter()
        .filter(|(_, pattern, _)| route_id(pattern, path).is_some())
        .map(|(m, _, _)| *m)
        .collect()
}

/// Whether `path` is `pattern` (a [`CONTROL_ROUTES`] path) with `/__twice` taken off: the
/// rule id where the pattern has one, `""` where it has none.
fn route_id<'p>(pattern: &str, path: &'p str) -> Option<&'p str> {
    let pattern = pattern.trim_start_matches("/__twice");
    match pattern.split_once("{id}") {
        None => (pattern == path).then_some(""),
        Some((before, after)) => {
            let id = path.strip_prefix(before)?.strip_suffix(after)?;
            (!id.is_empty() && !id.contains('/')).then_some(id)
        }
    }
}

/// A body that must be a JSON object: its first byte past white space is `{` (serde says
/// what is wrong with the rest).
fn object_body(body: &[u8]) -> Result<(), String> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        _ => Err("expected a JSON object".to_string()),
    }
}

/// Arms `rule` on `service`'s engine, refusing a fault that cannot act there (a late delivery
/// on a service that delivers nothing): armed, it would never fire, and a test relying on it
/// would pass for the wrong reason.
fn add_rule(service: &str, engine: &mut FaultEngine, rule: FaultRule) -> Result<String, String> {
    rule.fault.check_service(service)?;
    engine.add(rule)
}

fn parse_one_or_many(body: &[u8]) -> Result<Vec<FaultRule>, String> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    match value {
        serde_json::Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| serde_json::from_value(v).map_err(|e| format!("rule {i}: {e}")))
            .collect(),
        one => serde_json::from_value(one).map(|r| vec![r]).map_err(|e| e.to_string()),
    }
}
