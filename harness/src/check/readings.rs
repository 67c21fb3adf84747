//! Readings of a ledger: where several intents act on one business key (partial refunds of
//! one payment, messages to one recipient) and an effect carries parameters more than one of
//! them authorised, with no tag to say whose it is, the ledger can be read more than one way.
//!
//! A *reading* gives each effect of a business key one of its candidates as owner. Only the
//! readings with as few duplicates as the ledger allows count: each lineage owns one effect at
//! most, so the effects beyond the most lineages any reading can give one each are duplicates
//! whichever intent made them (what a matching of effects to lineages proves). A claim is
//! judged against what every such reading says: held when every reading bears it out,
//! violated when none does, and not judged, with why, when it depends on whose effect was
//! whose. The first reading that bears every claim out is the *chosen* one, which the other
//! checks and the reports read as the attribution.

use super::attribution::Facts;

/// The most readings of one business key listed; past it, only one is kept and the claims
/// that depend on the reading are not judged.
const READINGS_MAX: usize = 4_096;

/// One business key's intents and effects, and the readings its ledger allows.
#[derive(Default)]
pub(super) struct Group {
    /// The intents acting on the key, in scenario order.
    pub(super) intents: Vec<usize>,
    /// Its effects (indices into `Facts::effects`), in ledger order.
    pub(super) effects: Vec<usize>,
    /// Each reading with as few duplicates as the ledger allows: an owner per effect of
    /// `effects` (`None` for an effect no intent may own).
    pub(super) readings: Vec<Vec<Option<usize>>>,
    /// The readings were more than [`READINGS_MAX`]: only one is kept.
    pub(super) too_many: bool,
    /// Effects beyond what the key's lineages can own, one each: duplicates whoever made them.
    pub(super) excess: usize,
    /// Whether every effect has at most one possible owner, so that there is one reading.
    pub(super) fixed: bool,
    /// The reading the attribution reports (see the module documentation).
    pub(super) chosen: usize,
}

impl Facts<'_> {
    /// Lists each group's readings, chooses one, and records its owners in the effects and
    /// the intents.
    pub(super) fn read_groups(&mut self) {
        for g in 0..self.groups.len() {
            let (readings, too_many) = self.readings_of(g);
            let fixed = self.groups[g].effects.iter().all(|e| self.effects[*e].candidates.len() <= 1);
            let excess = readings.first().map_or(0, |r| self.excess_of(g, r));
            let group = &mut self.groups[g];
            group.fixed = fixed;
            group.too_many = too_many;
            group.excess = excess;
            group.readings = readings;
            let chosen = (0..self.groups[g].readings.len())
                .find(|r| self.reading_claim_lines(g, *r).is_empty())
                .unwrap_or(0);
            self.groups[g].chosen = chosen;
            self.apply_reading(g, chosen);
        }
        for intent in &mut self.intents {
            intent.effects.sort_unstable();
        }
    }

    /// The effects `intent` owns in reading `r` of group `g`, in ledger order.
    pub(super) fn owned_in(&self, g: usize, r: usize, intent: usize) -> Vec<usize> {
        let group = &self.groups[g];
        group
            .effects
            .iter()
            .zip(&group.readings[r])
            .filter(|(_, owner)| **owner == Some(intent))
            .map(|(e, _)| *e)
            .collect()
    }

    fn apply_reading(&mut self, g: usize, r: usize) {
        let Some(reading) = self.groups[g].readings.get(r) else { return };
        let owners: Vec<(usize, Option<usize>)> =
            self.groups[g].effects.iter().copied().zip(reading.iter().copied()).collect();
        for (e, owner) in owners {
            let effect = &mut self.effects[e];
            effect.owner = owner;
            if let Some(o) = owner {
                effect.lineage = Some(self.intents[o].lineage);
                self.intents[o].effects.push(e);
            }
        }
    }

    /// The lineage effect `e` occupies when `owner` owns it: its owner's, or the one lineage
    /// of its key when nobody may own it.
    fn lineage_of(&self, e: usize, owner: Option<usize>) -> Option<usize> {
        owner.map(|o| self.intents[o].lineage).or(self.effects[e].lineage)
    }

    /// The effects of `reading` beyond one per lineage.
    fn excess_of(&self, g: usize, reading: &[Option<usize>]) -> usize {
        let group = &self.groups[g];
        let mut used = std::collections::BTreeSet::new();
        let mut placed = 0;
        for (e, owner) in group.effects.iter().zip(reading) {
            if let Some(lineage) = self.lineage_of(*e, *owner) {
                placed += 1;
                used.insert(lineage);
            }
        }
        placed - used.len()
    }

    /// Every reading of group `g` with the fewest duplicates, in order (each effect's
    /// candidates in scenario order, effects in ledger order), and whether there were too
    /// many to list.
    fn readings_of(&self, g: usize) -> (Vec<Vec<Option<usize>>>, bool) {
        let group = &self.groups[g];
        let choices: Vec<&[usize]> =
            group.effects.iter().map(|e| self.effects[*e].candidates.as_slice()).collect();
        let ways = choices.iter().try_fold(1usize, |n, c| n.checked_mul(c.len().max(1)));
        if ways.is_none_or(|n| n > READINGS_MAX) {
            return (vec![self.spread_reading(g)], true);
        }
        let mut all: Vec<Vec<Option<usize>>> = vec![Vec::with_capacity(choices.len())];
        for candidates in &choices {
            all = match candidates {
                [] => all
                    .into_iter()
                    .map(|mut r| {
                        r.push(None);
                        r
                    })
                    .collect(),
                _ => all
                    .into_iter()
                    .flat_map(|r| {
                        candidates.iter().map(move |c| {
                            let mut next = r.clone();
                            next.push(Some(*c));
                            next
                        })
                    })
                    .collect(),
            };
        }
        let excess: Vec<usize> = all.iter().map(|r| self.excess_of(g, r)).collect();
        let fewest = excess.iter().copied().min().unwrap_or(0);
        let readings = all.into_iter().zip(excess).filter(|(_, x)| *x == fewest).map(|(r, _)| r).collect();
        (readings, false)
    }

    /// One reading that spreads the effects over the lineages, each to the candidate whose
    /// lineage holds the fewest so far: for a group with too many readings to list.
    fn spread_reading(&self, g: usize) -> Vec<Option<usize>> {
        let mut load: std::collections::BTreeMap<usize, usize> = std::collections::BTreeMap::new();
        let mut reading = Vec::new();
        for e in &self.groups[g].effects {
            let owner = self.effects[*e]
                .candidates
                .iter()
                .copied()
                .min_by_key(|c| load.get(&self.intents[*c].lineage).copied().unwrap_or(0));
            if let Some(lineage) = self.lineage_of(*e, owner) {
                *load.entry(lineage).or_default() += 1;
            }
            reading.push(owner);
        }
        reading
    }
}
