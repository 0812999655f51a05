//! Where a process's sites start their new objects (the control area's site table, mirrored
//! here with who placed each), and what the plans since have said of the placements the site
//! store may remember.

use objtier_policy::PlacementStreaks;
use objtier_wire::Control;
use std::collections::{BTreeMap, HashMap};

/// Plans a proactive placement must survive, after the one that made it and with none of its
/// site's records seen accessed in the two intervals before each, before the site store
/// remembers it for the program's next runs. A placement is a guess about the objects the site
/// will allocate; the plans after it see those objects (born in the placed tier, made records,
/// sampled), and a placement made in a program's last seconds was never checked at all (see
/// docs/design/warm-start-evidence.md).
pub const REMEMBER_AFTER_PLANS: u32 = 2;

/// What the plans since a proactive or warm-start placement have said of it, for the site store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// This many plans kept it with its site's records unaccessed ([`REMEMBER_AFTER_PLANS`]
    /// confirm it; a warm start's placement starts confirmed).
    Quiet(u32),
    /// A plan saw its site's records accessed while it held: the store forgets the site,
    /// whatever an earlier save or run said of it.
    Disproved,
}

/// Who placed a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacedBy {
    /// `objtier place`.
    Hand,
    /// The proactive policy.
    Proactive,
    /// Warm start: remembered from an earlier run of the program (the proactive policy may
    /// override it, like its own placements).
    WarmStart,
    /// The placement the process was started with (`objtier run --placement`): the proactive
    /// policy leaves it alone.
    Guided,
}

impl PlacedBy {
    /// As `objtier status` shows it.
    pub fn describe(self) -> &'static str {
        match self {
            PlacedBy::Hand => "objtier place",
            PlacedBy::Proactive => "proactive",
            PlacedBy::WarmStart => "warm start",
            PlacedBy::Guided => "placement file",
        }
    }
}

/// A process's site placements (see the module doc).
#[derive(Default)]
pub struct SitePlacements {
    /// Starting tiers set for sites (mirrors the control area's table, for status), and who
    /// set each: the proactive policy never overrides a placement made with `objtier place`.
    placements: BTreeMap<u64, (u32, PlacedBy)>,
    /// The proactive policy's hysteresis: its latest wish per site and how long it held.
    streaks: PlacementStreaks,
    /// Per site placed by the proactive policy or the warm start: what the plans since have
    /// said of the placement.
    evidence: HashMap<u64, Evidence>,
    /// Records (by start) of watched sites the daemon moved lately: the numbers
    /// (`Totals::intervals`) of the last two intervals that moved each, the latest first. Pages
    /// can look accessed in the interval they were moved in, so those intervals' accesses are
    /// no evidence (see `objtier_policy::accessed_by_the_program`).
    moved_in: HashMap<u64, [u64; 2]>,
}

/// What a change of placement means for the site store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placed {
    /// The control area's table is full around the site: nothing changed.
    Refused,
    /// Placed (or cleared); the store need not hear of it yet.
    Quietly,
    /// Placed (or cleared), and the store should hear of it.
    ForTheStore,
}

impl SitePlacements {
    /// The tier `site`'s new objects start in, and who said so.
    pub fn get(&self, site: &u64) -> Option<&(u32, PlacedBy)> {
        self.placements.get(site)
    }

    pub fn contains_key(&self, site: &u64) -> bool {
        self.placements.contains_key(site)
    }

    /// Every placement, by site.
    pub fn iter(&self) -> std::collections::btree_map::Iter<'_, u64, (u32, PlacedBy)> {
        self.placements.iter()
    }

    /// The placed sites, in order.
    pub fn keys(&self) -> impl Iterator<Item = &u64> + '_ {
        self.placements.keys()
    }

    pub fn is_empty(&self) -> bool {
        self.placements.is_empty()
    }

    pub fn len(&self) -> usize {
        self.placements.len()
    }

    /// What the plans have said of the placement of `site`, if it is watched.
    pub fn evidence(&self, site: u64) -> Option<Evidence> {
        self.evidence.get(&site).copied()
    }

    /// Whether `site`'s placement is watched (proactive, or remembered).
    pub fn watched(&self, site: u64) -> bool {
        self.evidence.contains_key(&site)
    }

    /// The proactive policy wishes `site` placed in `tier` this interval: true once the wish
    /// has held long enough to apply ([`PlacementStreaks::settled`]).
    pub fn wish_settled(&mut self, site: u64, tier: Option<u32>) -> bool {
        self.streaks.settled(site, tier)
    }

    /// The numbers of the last two intervals that moved the record at `start` (of a watched
    /// site), the latest first.
    pub fn moved_in(&self, start: u64) -> Option<&[u64; 2]> {
        self.moved_in.get(&start)
    }

    /// The records (by start) of watched sites moved lately.
    pub fn moved_records(&self) -> impl Iterator<Item = &u64> + '_ {
        self.moved_in.keys()
    }

    /// Interval `this` moved the record at `start` of `site`: remembered if the site is
    /// watched.
    pub fn moved(&mut self, start: u64, site: u64, this: u64) {
        if self.evidence.contains_key(&site) {
            let n = self.moved_in.entry(start).or_insert([this; 2]);
            *n = [this, n[0]];
        }
    }

    /// Forgets the moves that no plan after interval `this` looks back at.
    pub fn forget_moves_before(&mut self, this: u64) {
        // The next plan looks back at this interval and the last one.
        self.moved_in.retain(|_, n| n[0] + 1 >= this);
    }

    /// Sets (or clears) where `site`'s new objects start, in `control` and here.
    pub(super) fn set(
        &mut self,
        control: &Control,
        site: u64,
        tier: Option<u32>,
        by: PlacedBy,
    ) -> Placed {
        if !control.set_site_tier(site, tier) {
            return Placed::Refused;
        }
        match tier {
            Some(t) => self.placements.insert(site, (t, by)),
            None => self.placements.remove(&site),
        };
        // Placements the policy or the store made are watched (`plans_ended`); one from the
        // store was confirmed in an earlier run.
        let proactive = tier.is_some() && by == PlacedBy::Proactive;
        match (tier, by) {
            (Some(_), PlacedBy::Proactive) => self.evidence.insert(site, Evidence::Quiet(0)),
            (Some(_), PlacedBy::WarmStart) => self
                .evidence
                .insert(site, Evidence::Quiet(REMEMBER_AFTER_PLANS)),
            _ => self.evidence.remove(&site),
        };
        // Learnt in this run (or a remembered placement undone): the store should hear of it,
        // a proactive placement once it has held (`plans_ended`).
        if by != PlacedBy::WarmStart && !proactive {
            Placed::ForTheStore
        } else {
            Placed::Quietly
        }
    }

    /// Places `site` as the process's placement file says (in `tier`, with a budget of
    /// `budget_pages` in the site table, 0 for none): the proactive policy leaves it alone.
    /// False if the control area's table has no room for it.
    pub(crate) fn set_guided(
        &mut self,
        control: &Control,
        site: u64,
        tier: u32,
        budget_pages: u64,
    ) -> bool {
        if !control.set_site_placement(site, Some(tier), budget_pages) {
            return false;
        }
        self.placements.insert(site, (tier, PlacedBy::Guided));
        true
    }

    /// A plan has been made with these placements in force. A watched placement whose site
    /// had a record seen accessed in the last two intervals (`busy`) is disproved; any other
    /// has held for one more plan. True if the store should hear of it (a placement disproved,
    /// or one that has now held for [`REMEMBER_AFTER_PLANS`]).
    pub(super) fn plans_ended(&mut self, pid: u32, busy: impl Fn(u64) -> bool) -> bool {
        let mut changed = false;
        for (&site, evidence) in self.evidence.iter_mut() {
            let Evidence::Quiet(plans) = evidence else {
                continue;
            };
            if busy(site) {
                tracing::info!(
                    pid,
                    site = format_args!("{site:#x}"),
                    held_plans = *plans,
                    "proactive placement disproved: a record of its site was seen accessed (not as it was born or moved); the site store will not keep it"
                );
                *evidence = Evidence::Disproved;
                changed = true;
            } else {
                *plans += 1;
                changed |= *plans == REMEMBER_AFTER_PLANS;
            }
        }
        changed
    }
}
