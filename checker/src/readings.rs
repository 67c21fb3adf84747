//! Readings of a ledger: where several intents act on one business key (partial refunds of
//! one payment, messages to one recipient) and an effect carries parameters more than one of
//! them authorised, with no tag to say whose it is, the ledger can be read more than one way.
//!
//! A *reading* of one business key gives each of its effects one of its candidates as owner.
//! Only the readings with as few duplicates as the ledger allows count: each lineage owns one
//! effect at most, so the effects beyond the most lineages any reading can give one each are
//! duplicates whichever intent made them (what a matching of effects to lineages proves). A
//! *world* picks one reading per business key. Every invariant is judged in every world
//! ([`judge`]): violated where it breaks in all of them, not judged where it breaks in some
//! (with the effects in doubt named), as judged otherwise. The world with the fewest violations
//! (the first, among equals) is the attribution the reports and the hazards read.

use std::collections::{BTreeMap, BTreeSet};

use super::attribution::Facts;
use results::EffectRef;
use results::Verdict;

/// The most readings of one business key listed; past it, one is kept and every verdict that
/// breaks is not judged instead.
const READINGS_MAX: usize = 4_096;
/// The most worlds judged; past it, the same.
const WORLDS_MAX: usize = 256;

/// A reading per group (`Facts::groups`), by index into its `readings`.
pub(super) type World = Vec<usize>;

/// What the ledger leaves open: `who` (`r1, r2 made payments re_1 (seq 1)`) and `why`.
pub(super) struct Doubt {
    who: String,
    why: String,
}

impl Facts<'_> {
    /// Lists each group's readings and applies the first world.
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
        }
        self.apply_world(&vec![0; self.groups.len()]);
    }

    /// Every world, in order (the first reading of every group first), and whether there
    /// were too many to judge them all.
    pub(super) fn worlds(&self) -> (Vec<World>, bool) {
        let mut worlds: Vec<World> = vec![Vec::with_capacity(self.groups.len())];
        let mut too_many = self.groups.iter().any(|g| g.too_many);
        for group in &self.groups {
            let n = group.readings.len().max(1);
            if worlds.len().saturating_mul(n) > WORLDS_MAX {
                too_many = true;
                worlds.iter_mut().for_each(|w| w.push(0));
                continue;
            }
            worlds = worlds
                .into_iter()
                .flat_map(|w| {
                    (0..n).map(move |r| {
                        let mut next = w.clone();
                        next.push(r);
                        next
                    })
                })
                .collect();
        }
        (worlds, too_many)
    }

    /// Every verdict, in [`super::INVARIANTS`] order then [`super::EXPECTED_STATES`], in the
    /// world applied.
    pub(super) fn verdicts(&self) -> Vec<Verdict> {
        vec![
            self.no_duplicate_effect(),
            self.no_unauthorised_effect(),
            self.honest_terminal_states(),
            self.unknown_is_not_a_lie(),
            self.nothing_lost(),
            self.lineage(),
            self.workflow(),
            self.no_stale_write(),
            self.liveness(),
            self.refusal_respected(),
            self.expected_states(),
        ]
    }

    /// Every verdict, judged in every world (see [`judge`]); leaves the world with the fewest
    /// violations (the first among equals) applied, as the attribution the reports and the
    /// hazards read.
    pub(super) fn judge_worlds(&mut self) -> Vec<Verdict> {
        // Nearly every run: one reading of every business key, applied already.
        if self.groups.iter().all(|g| g.readings.len() <= 1 && !g.too_many) {
            return self.verdicts();
        }
        let (worlds, too_many) = self.worlds();
        let per_world: Vec<Vec<Verdict>> = worlds
            .iter()
            .map(|world| {
                self.apply_world(world);
                self.verdicts()
            })
            .collect();
        let likeliest = (0..per_world.len())
            .min_by_key(|w| per_world[*w].iter().filter(|v| v.violated()).count())
            .unwrap_or(0);
        self.apply_world(&worlds[likeliest]);
        judge(per_world, &self.in_doubt(too_many), too_many)
    }

    /// The effects of the world applied, by owner's id.
    pub(super) fn attribution(&self) -> BTreeMap<String, Vec<EffectRef>> {
        let mut out: BTreeMap<String, Vec<EffectRef>> = BTreeMap::new();
        for found in &self.effects {
            if let Some(owner) = found.owner {
                out.entry(self.intents[owner].id().to_string()).or_default().push(EffectRef {
                    service: found.service.to_string(),
                    seq: found.effect.seq,
                    object_id: found.effect.object_id.clone(),
                    at_ms: found.effect.at_ms,
                });
            }
        }
        out
    }

    /// Makes `world` the attribution: each effect's owner and lineage, each intent's effects.
    pub(super) fn apply_world(&mut self, world: &[usize]) {
        for intent in &mut self.intents {
            intent.effects.clear();
        }
        for (g, r) in world.iter().enumerate() {
            let Some(reading) = self.groups[g].readings.get(*r) else { continue };
            let owners: Vec<(usize, Option<usize>)> =
                self.groups[g].effects.iter().copied().zip(reading.iter().copied()).collect();
            for (e, owner) in owners {
                let lineage = self.lineage_of(e, owner);
                let effect = &mut self.effects[e];
                effect.owner = owner;
                effect.lineage = lineage;
                if let Some(o) = owner {
                    self.intents[o].effects.push(e);
                }
            }
        }
        for intent in &mut self.intents {
            intent.effects.sort_unstable();
        }
    }

    /// What the ledger leaves open, for the verdicts that depend on it: which intents may have
    /// made which effects, and why the checker cannot tell.
    pub(super) fn in_doubt(&self, too_many: bool) -> Doubt {
        let doubtful: Vec<usize> = self
            .groups
            .iter()
            .flat_map(|g| g.effects.iter().copied())
            .filter(|e| self.effects[*e].candidates.len() > 1)
            .collect();
        let intents: BTreeSet<usize> =
            doubtful.iter().flat_map(|e| self.effects[*e].candidates.iter().copied()).collect();
        let intents: Vec<usize> = intents.into_iter().collect();
        let how = if too_many { "; there are more ways to read them than the checker weighs" } else { "" };
        Doubt {
            who: format!("{} made {}", self.ids_text(&intents), self.effects_text(&doubtful)),
            why: format!(
                "{} parameters more than one of them authorised and no tag naming its intent (such as metadata {}){how}",
                if doubtful.len() == 1 { "it carries" } else { "each carries" },
                vocabulary::INTENT_TAG
            ),
        }
    }

    /// The effect's lineage when `owner` owns it: its owner's, or the one lineage of its key
    /// when nobody may own it.
    fn lineage_of(&self, e: usize, owner: Option<usize>) -> Option<usize> {
        owner.map(|o| self.intents[o].lineage).or(self.effects[e].lineage_alone)
    }

    /// The effects of `reading` beyond one per lineage.
    fn excess_of(&self, g: usize, reading: &[Option<usize>]) -> usize {
        let group = &self.groups[g];
        let mut used = BTreeSet::new();
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
        // Every effect with one owner at most: one reading (nearly every run).
        if group.effects.iter().all(|e| self.effects[*e].candidates.len() <= 1) {
            let reading =
                group.effects.iter().map(|e| self.effects[*e].candidates.first().copied()).collect();
            return (vec![reading], false);
        }
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
        let mut load: BTreeMap<usize, usize> = BTreeMap::new();
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

/// One verdict per invariant from the verdicts of every world (`per_world`, each in the same
/// order): what breaks in all of them is violated, what breaks in some only is not judged with
/// `doubt`, the rest as the first world says. With `too_many`, not every world was judged: a
/// verdict that differs between the worlds judged is not proven either way.
pub(super) fn judge(per_world: Vec<Vec<Verdict>>, doubt: &Doubt, too_many: bool) -> Vec<Verdict> {
    let mut worlds = per_world.into_iter();
    let Some(first) = worlds.next() else { return Vec::new() };
    let rest: Vec<Vec<Verdict>> = worlds.collect();
    let open = || format!("it depends on which of {}: {}", doubt.who, doubt.why);
    first
        .into_iter()
        .enumerate()
        .map(|(i, verdict)| {
            let others: Vec<&Verdict> = rest.iter().filter_map(|w| w.get(i)).collect();
            let broken = others.iter().filter(|v| v.violated()).count() + usize::from(verdict.violated());
            if broken == 0 {
                return verdict;
            }
            let same = others.iter().all(|v| v.evidence == verdict.evidence);
            if broken < others.len() + 1 || too_many && !same {
                return Verdict::not_judged(&verdict.invariant, open());
            }
            if same {
                return verdict;
            }
            let mut lines = vec![format!(
                "whichever of {} ({}), this breaks; as one reading has it:",
                doubt.who, doubt.why
            )];
            lines.extend(verdict.evidence);
            Verdict::from_evidence(&verdict.invariant, lines)
        })
        .collect()
}
