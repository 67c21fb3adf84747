//! `no-stale-write`: where a contract offers a guard (fencing, conditional writes), no write
//! of an older worker life lands on a newer life's write it had not seen (see "Stale writes"
//! in the module documentation of [`super`]).

use vocabulary::{ACTIONS, ActionSpec, Guard};

use super::NO_STALE_WRITE;
use super::attribution::{Facts, Found, contract_for};
use results::Verdict;

impl Facts<'_> {
    /// The actions whose writes this scenario's contracts guard, with the guard.
    pub(super) fn guarded(&self) -> Vec<(&'static ActionSpec, Guard)> {
        ACTIONS
            .iter()
            .filter_map(|action| {
                let guard = action.guard?;
                guard.offered_by(&contract_for(action, self.scenario)).then_some((action, guard))
            })
            .filter(|(action, _)| {
                self.intents.iter().any(|i| i.attribution.is_some_and(|(r, _)| r.name == action.name))
            })
            .collect()
    }

    pub(super) fn no_stale_write(&self) -> Verdict {
        let guarded = self.guarded();
        if guarded.is_empty() {
            return Verdict::not_judged(
                NO_STALE_WRITE,
                "no intent writes to a service that offers fencing or conditional writes in this scenario",
            );
        }
        let contested: Vec<&ActionSpec> = guarded
            .iter()
            .filter(|(action, _)| self.senders().get(action.service).is_some_and(|s| s.arrivals.len() > 1))
            .map(|(action, _)| *action)
            .collect();
        if contested.is_empty() {
            let services: Vec<&str> = guarded.iter().map(|(r, _)| r.service).collect();
            return Verdict::not_judged(
                NO_STALE_WRITE,
                format!("only one worker life reached {}: no write could be stale", services.join(" and ")),
            );
        }
        let mut lines = Vec::new();
        for action in contested {
            let Some(senders) = self.senders().get(action.service) else { continue };
            let writes: Vec<(&Found, &str, u64)> = self
                .effects
                .iter()
                .filter(|e| e.action.name == action.name)
                .filter_map(|e| {
                    let (origin, arrived_ms) = senders.requests.get(e.effect.request_id.as_str())?;
                    Some((e, *origin, *arrived_ms))
                })
                .collect();
            for (j, (late, older, sent_ms)) in writes.iter().enumerate() {
                let Some(older_first) = senders.first(older) else { continue };
                let overtaken = writes[..j].iter().find(|(newer_write, newer, _)| {
                    newer_write.key == late.key
                        && newer != older
                        && senders.first(newer).is_some_and(|first| older_first < first)
                        && !senders.any_between(older, newer_write.effect.at_ms, *sent_ms)
                });
                if let Some((newer_write, newer, _)) = overtaken {
                    lines.push(format!(
                        "{} for {} was written by {older} and landed after {newer}'s write {} at {} ms, which \
                         {older} had not seen (none of its requests reached {} in between): a stale write won",
                        late.label_at(self.start_ms),
                        late.key_text(),
                        newer_write.label(),
                        newer_write.effect.at_ms.saturating_sub(self.start_ms),
                        action.service
                    ));
                }
            }
        }
        Verdict::from_evidence(NO_STALE_WRITE, lines)
    }
}
