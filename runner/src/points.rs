//! Request points, as both drivers see them: "when payments has received the first refund
//! request and before it answers".
//!
//! A scenario's events at [`Point::Request`] are grouped by point (service, method, path,
//! n-th match); [`RequestPoints::reached`] counts every request that arrives at a service,
//! from any worker, and says which point a request reaches and which events are due there.
//! Each point is reached once. The sim driver calls it from its in-process transport; the live
//! driver from the [`fake_services::Tap`] of its listeners, where the reply of a request that
//! reaches a point is held at a gate until the point's events have been applied.

use std::sync::Mutex;

use scenarios::{Point, Scenario};

/// One request point and its count so far.
#[derive(Debug)]
struct Armed {
    service: String,
    method: Option<String>,
    path: Option<String>,
    nth: u64,
    seen: u64,
    /// Indexes into the scenario's events.
    events: Vec<usize>,
    reached: bool,
}

impl Armed {
    fn matches(&self, service: &str, method: &str, path: &str) -> bool {
        self.service == service
            && self.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self.path.as_deref().is_none_or(|p| match p.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => p == path,
            })
    }
}

/// The request points of one run.
#[derive(Debug)]
pub struct RequestPoints {
    armed: Mutex<Vec<Armed>>,
}

impl RequestPoints {
    /// The scenario's request points, in the order their first event appears.
    pub fn new(scenario: &Scenario) -> RequestPoints {
        let mut armed: Vec<Armed> = Vec::new();
        for (i, event) in scenario.events.iter().enumerate() {
            let Point::Request { service, method, path, nth } = &event.at else { continue };
            match armed
                .iter_mut()
                .find(|a| (&a.service, &a.method, &a.path, a.nth) == (service, method, path, *nth))
            {
                Some(a) => a.events.push(i),
                None => armed.push(Armed {
                    service: service.clone(),
                    method: method.clone(),
                    path: path.clone(),
                    nth: *nth,
                    seen: 0,
                    events: vec![i],
                    reached: false,
                }),
            }
        }
        RequestPoints { armed: Mutex::new(armed) }
    }

    /// Counts a request arriving at `service`; the events due at the points it reaches (the
    /// n-th match of each), in scenario order. Empty for most requests.
    pub fn reached(&self, service: &str, method: &str, path: &str) -> Vec<usize> {
        let mut due = Vec::new();
        for a in self.lock().iter_mut().filter(|a| !a.reached && a.matches(service, method, path)) {
            a.seen += 1;
            if a.seen == a.nth {
                a.reached = true;
                due.extend(a.events.iter().copied());
            }
        }
        due.sort_unstable();
        due
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Armed>> {
        // Only counters live here; a panic elsewhere leaves them usable.
        self.armed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_point_is_reached_once_at_its_nth_match_by_any_caller() {
        let scenario: Scenario = serde_json::from_value(json!({
            "name": "points",
            "intents": [],
            "events": [
                {"at": {"service": "payments", "method": "POST", "nth": 2}, "do": "crash"},
                {"at": {"service": "workspaces"}, "do": "heal"},
                {"at": {"service": "payments", "method": "POST", "nth": 2}, "do": "pause", "for_ms": 3000},
                {"at": {"service": "files", "path": "/reports/*"}, "do": "heal"},
            ],
        }))
        .unwrap();
        let points = RequestPoints::new(&scenario);
        assert!(points.reached("payments", "GET", "/v1/refunds").is_empty(), "not a POST");
        assert!(points.reached("payments", "post", "/v1/refunds").is_empty(), "the first POST");
        assert_eq!(points.reached("payments", "POST", "/v1/refunds"), [0, 2], "the second");
        assert!(points.reached("payments", "POST", "/v1/refunds").is_empty(), "reached once");
        assert_eq!(points.reached("workspaces", "GET", "/v1/workspaces"), [1]);
        assert!(points.reached("files", "PUT", "/other/x").is_empty());
        assert_eq!(points.reached("files", "PUT", "/reports/q3.csv"), [3]);
    }
}
