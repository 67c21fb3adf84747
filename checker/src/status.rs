//! The final status: `nothing-lost` (every acknowledged intent is in it), `liveness` (every
//! intent in it is terminal after the reconcile rounds, or, for serve, when the application's
//! claims were checked) and `expected-states` (the scenario's `expect` table).

use std::collections::BTreeSet;

use super::attribution::{Facts, Intent};
use super::{EXPECTED_STATES, LIVENESS, NOTHING_LOST, is_terminal};
use results::Route;
use results::Verdict;

impl Facts<'_> {
    pub(super) fn nothing_lost(&self) -> Verdict {
        if self.observed.acknowledged.iter().all(|id| self.exempt.contains(id.as_str())) {
            let reason = match self.observed.route {
                Route::Run => "the executor acknowledged no intent as recorded",
                // Under serve the claims are the acknowledgements: an intent they leave out is
                // `expected-states`' to catch.
                Route::Serve => "the application's claims name no intent",
            };
            return Verdict::not_judged(NOTHING_LOST, reason);
        }
        let mut seen = BTreeSet::new();
        let mut lines = Vec::new();
        for id in &self.observed.acknowledged {
            let id = id.as_str();
            if !seen.insert(id) || self.exempt.contains(id) {
                continue;
            }
            if !self.claims.contains_key(id) {
                lines.push(format!("{id} was acknowledged as recorded but is missing from the final status"));
            }
        }
        Verdict::from_evidence(NOTHING_LOST, lines)
    }

    pub(super) fn liveness(&self) -> Verdict {
        let rounds = self.observed.reconcile_rounds;
        let mut ids: Vec<&str> = Vec::new();
        let mut seen = BTreeSet::new();
        let acknowledged = self.observed.acknowledged.iter().map(String::as_str);
        let claimed = self.intents.iter().filter(|i| i.claim.is_some()).map(Intent::id);
        for id in acknowledged.chain(claimed) {
            if seen.insert(id) && !self.exempt.contains(id) {
                ids.push(id);
            }
        }
        let mut lines = Vec::new();
        for id in ids {
            // A missing claim is `nothing-lost`'s to report.
            let Some(claim) = self.claims.get(id) else { continue };
            if !is_terminal(&claim.state) {
                // Serve judges an application's claims at the moment its test asks: no heal,
                // no reconcile rounds of the harness's, so none to count.
                let when = match self.observed.route {
                    Route::Run => {
                        format!("after {rounds} reconcile round{}", if rounds == 1 { "" } else { "s" })
                    }
                    Route::Serve => "when the application's claims were checked".to_string(),
                };
                lines.push(format!("{id} is still {} {when}: not terminal", claim.state));
            }
        }
        if lines.is_empty() && self.claims.keys().all(|id| self.exempt.contains(id)) {
            let reason = match self.observed.route {
                Route::Run => "the executor reported no intent",
                Route::Serve => "the application's claims name no intent",
            };
            return Verdict::not_judged(LIVENESS, reason);
        }
        Verdict::from_evidence(LIVENESS, lines)
    }

    pub(super) fn expected_states(&self) -> Verdict {
        if self.scenario.expect.keys().all(|id| self.exempt.contains(id.as_str())) {
            return Verdict::not_judged(EXPECTED_STATES, "the scenario expects no states");
        }
        let mut lines = Vec::new();
        for (id, want) in &self.scenario.expect {
            if self.exempt.contains(id.as_str()) {
                continue;
            }
            match self.claims.get(id.as_str()) {
                None => lines.push(format!("{id}: expected {want}, but there is no claim for it")),
                Some(claim) if !want.accepts(&claim.state) => {
                    lines.push(format!("{id}: expected {want}, claimed {}", claim.state))
                }
                Some(_) => {}
            }
        }
        Verdict::from_evidence(EXPECTED_STATES, lines)
    }
}
