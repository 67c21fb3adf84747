//! What receiving webhooks needs kept: the intents an event will start (`triggers`), the
//! events received (`webhook_events`: kept before the 2xx, so that a second delivery of one
//! is answered without acting, and started by a pass once the payment shows it) and each
//! worker's endpoint (`webhook_endpoints`: its id and secret, so that
//! a restarted worker keeps the endpoint the service owes deliveries to).
//!
//! A trigger is kept as the proposal that arms it; firing it proposes that intent, whose id
//! the intents table holds at most once, so an event taken twice still starts it once.

use rusqlite::{OptionalExtension, params};

use super::{IntentLog, LogError};

/// An intent waiting for its event: its id, and the proposal (as JSON) that arms it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub intent_id: String,
    pub event_type: String,
    pub object_id: String,
    pub proposal: String,
}

/// A worker's registered endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub id: String,
    pub secret: String,
    pub url: String,
}

impl Endpoint {
    /// The row kept while a registration is on its way: no id and no secret yet.
    pub fn in_flight(url: &str) -> Endpoint {
        Endpoint { id: String::new(), secret: String::new(), url: url.to_string() }
    }

    /// Whether the service's answer made it: an id and a secret.
    pub fn is_registered(&self) -> bool {
        !self.id.is_empty() && !self.secret.is_empty()
    }
}

/// What arming a trigger found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Armed {
    /// Kept now, or kept before with the same proposal.
    Kept,
    /// The id is kept with another proposal.
    Conflict,
}

impl IntentLog {
    /// Keeps `trigger`, unless its intent id is already kept (then says whether the same).
    pub fn arm(&mut self, trigger: &Trigger) -> Result<Armed, LogError> {
        // One statement: a concurrent arm of the same id finds the first one's row.
        self.conn
            .prepare_cached(
                "INSERT OR IGNORE INTO triggers (intent_id, event_type, object_id, proposal) \
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut s| {
                s.execute(params![trigger.intent_id, trigger.event_type, trigger.object_id, trigger.proposal])
            })
            .map_err(|e| self.sqlite(e))?;
        let kept: String = self
            .conn
            .prepare_cached("SELECT proposal FROM triggers WHERE intent_id = ?1")
            .and_then(|mut s| s.query_row([&trigger.intent_id], |r| r.get(0)))
            .map_err(|e| self.sqlite(e))?;
        Ok(if kept == trigger.proposal { Armed::Kept } else { Armed::Conflict })
    }

    /// The triggers an event of `event_type` about `object_id` fires, in the order armed.
    pub fn triggers_for(&self, event_type: &str, object_id: &str) -> Result<Vec<Trigger>, LogError> {
        self.read_triggers(
            "SELECT intent_id, event_type, object_id, proposal FROM triggers \
             WHERE event_type = ?1 AND object_id = ?2 ORDER BY rowid",
            &[event_type, object_id],
        )
    }

    /// Whether any trigger is kept: only then does a worker need an endpoint.
    pub fn has_triggers(&self) -> Result<bool, LogError> {
        self.conn
            .prepare_cached("SELECT 1 FROM triggers LIMIT 1")
            .and_then(|mut s| s.exists([]))
            .map_err(|e| self.sqlite(e))
    }

    fn read_triggers(&self, sql: &str, args: &[&str]) -> Result<Vec<Trigger>, LogError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.sqlite(e))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok(Trigger {
                    intent_id: r.get(0)?,
                    event_type: r.get(1)?,
                    object_id: r.get(2)?,
                    proposal: r.get(3)?,
                })
            })
            .map_err(|e| self.sqlite(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sqlite(e))
    }

    /// Whether every trigger kept has started (its intent is recorded).
    pub fn all_triggers_started(&self) -> Result<bool, LogError> {
        self.conn
            .prepare_cached("SELECT 1 FROM triggers WHERE intent_id NOT IN (SELECT id FROM intents) LIMIT 1")
            .and_then(|mut s| s.exists([]))
            .map(|waiting| !waiting)
            .map_err(|e| self.sqlite(e))
    }

    /// Whether event `event_id` was received already.
    pub fn event_received(&self, event_id: &str) -> Result<bool, LogError> {
        self.conn
            .prepare_cached("SELECT 1 FROM webhook_events WHERE event_id = ?1")
            .and_then(|mut s| s.exists([event_id]))
            .map_err(|e| self.sqlite(e))
    }

    /// Whether an event of `event_type` about `object_id` started its triggers (a trigger
    /// armed after that starts at once).
    pub fn event_started_for(&self, event_type: &str, object_id: &str) -> Result<bool, LogError> {
        self.conn
            .prepare_cached(
                "SELECT 1 FROM webhook_events WHERE event_type = ?1 AND object_id = ?2 AND started_ms IS NOT NULL",
            )
            .and_then(|mut s| s.exists([event_type, object_id]))
            .map_err(|e| self.sqlite(e))
    }

    /// Keeps event `event_id` as received, durably, unless it was (a second delivery of it
    /// changes nothing); true when it is new.
    pub fn receive_event(
        &mut self,
        event_id: &str,
        event_type: &str,
        object_id: &str,
        at_ms: u64,
    ) -> Result<bool, LogError> {
        self.conn
            .prepare_cached(
                "INSERT OR IGNORE INTO webhook_events (event_id, event_type, object_id, received_ms) \
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut s| s.execute(params![event_id, event_type, object_id, at_ms as i64]))
            .map(|n| n == 1)
            .map_err(|e| self.sqlite(e))
    }

    /// The events received whose triggers have not started yet, oldest first: (id, type,
    /// object).
    pub fn events_waiting(&self) -> Result<Vec<(String, String, String)>, LogError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT event_id, event_type, object_id FROM webhook_events WHERE started_ms IS NULL \
                 ORDER BY received_ms, event_id",
            )
            .map_err(|e| self.sqlite(e))?;
        let rows =
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).map_err(|e| self.sqlite(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sqlite(e))
    }

    /// Notes that event `event_id` started its triggers.
    pub fn event_started(&mut self, event_id: &str, at_ms: u64) -> Result<(), LogError> {
        self.conn
            .prepare_cached(
                "UPDATE webhook_events SET started_ms = ?2 WHERE event_id = ?1 AND started_ms IS NULL",
            )
            .and_then(|mut s| s.execute(params![event_id, at_ms as i64]))
            .map(|_| ())
            .map_err(|e| self.sqlite(e))
    }

    /// Worker `worker_id`'s endpoint, if it registered one.
    pub fn endpoint(&self, worker_id: &str) -> Result<Option<Endpoint>, LogError> {
        self.conn
            .prepare_cached("SELECT endpoint_id, secret, url FROM webhook_endpoints WHERE worker_id = ?1")
            .and_then(|mut s| {
                s.query_row([worker_id], |r| {
                    Ok(Endpoint { id: r.get(0)?, secret: r.get(1)?, url: r.get(2)? })
                })
                .optional()
            })
            .map_err(|e| self.sqlite(e))
    }

    /// Keeps worker `worker_id`'s endpoint (a new one, or the old one at a new URL).
    pub fn keep_endpoint(&mut self, worker_id: &str, endpoint: &Endpoint) -> Result<(), LogError> {
        self.conn
            .prepare_cached(
                "INSERT INTO webhook_endpoints (worker_id, endpoint_id, secret, url) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (worker_id) DO UPDATE SET endpoint_id = ?2, secret = ?3, url = ?4",
            )
            .and_then(|mut s| s.execute(params![worker_id, endpoint.id, endpoint.secret, endpoint.url]))
            .map(|_| ())
            .map_err(|e| self.sqlite(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trigger(id: &str, proposal: &str) -> Trigger {
        Trigger {
            intent_id: id.into(),
            event_type: "payment_intent.succeeded".into(),
            object_id: "pi_1".into(),
            proposal: proposal.into(),
        }
    }

    #[test]
    fn triggers_events_and_endpoints_are_kept_once() {
        let run = IntentLog::fresh_in_memory().unwrap();
        let mut log = IntentLog::open_in_memory(run.name()).unwrap();
        assert!(!log.has_triggers().unwrap());
        assert_eq!(log.arm(&trigger("a", "{1}")).unwrap(), Armed::Kept);
        assert_eq!(log.arm(&trigger("a", "{1}")).unwrap(), Armed::Kept);
        assert_eq!(log.arm(&trigger("a", "{2}")).unwrap(), Armed::Conflict);
        log.arm(&trigger("b", "{3}")).unwrap();
        let ids: Vec<String> = log
            .triggers_for("payment_intent.succeeded", "pi_1")
            .unwrap()
            .into_iter()
            .map(|t| t.intent_id)
            .collect();
        assert_eq!(ids, ["a", "b"]);
        assert!(log.triggers_for("payment_intent.succeeded", "pi_2").unwrap().is_empty());

        assert!(log.receive_event("evt_1", "payment_intent.succeeded", "pi_1", 1).unwrap());
        assert!(!log.receive_event("evt_1", "payment_intent.succeeded", "pi_1", 2).unwrap());
        assert!(log.event_received("evt_1").unwrap() && !log.event_received("evt_2").unwrap());
        assert!(!log.event_started_for("payment_intent.succeeded", "pi_1").unwrap());
        assert_eq!(log.events_waiting().unwrap().len(), 1);
        log.event_started("evt_1", 3).unwrap();
        assert!(log.events_waiting().unwrap().is_empty());
        assert!(log.event_started_for("payment_intent.succeeded", "pi_1").unwrap());

        assert_eq!(log.endpoint("w1").unwrap(), None);
        let first = Endpoint { id: "we_1".into(), secret: "whsec_1".into(), url: "http://a/webhooks".into() };
        log.keep_endpoint("w1", &first).unwrap();
        let moved = Endpoint { url: "http://b/webhooks".into(), ..first.clone() };
        log.keep_endpoint("w1", &moved).unwrap();
        assert_eq!(log.endpoint("w1").unwrap(), Some(moved));
        assert_eq!(log.endpoint("w2").unwrap(), None);

        // What the sim's next run on this warm name starts from: every table empty.
        log.empty().unwrap();
        assert!(!log.has_triggers().unwrap() && !log.event_received("evt_1").unwrap());
        assert_eq!(log.endpoint("w1").unwrap(), None);
    }
}
