//! The control area: the way back from the daemon to the library, in the ring's memfd after the
//! ring, written by the daemon and read lock-free by the library: the tiers' nodes, where each
//! allocation site's new objects start, and resync requests.

use core::mem::size_of;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Most tiers the control area describes.
pub const MAX_TIERS: usize = 8;
/// Slots in the site placement table (a power of two).
pub const SITE_TABLE_SLOTS: usize = 4096;
/// Longest probe sequence in the site table, for both the writer and the readers.
pub const SITE_TABLE_MAX_PROBES: usize = 32;

/// One entry of the site table.
#[repr(C)]
pub struct SiteSlot {
    /// The site id; 0 marks an empty slot. Written once, after `advice`.
    pub site: AtomicU64,
    /// The daemon's advice on new objects of this site: in the low 32 bits the tier they start
    /// in, plus one (0: no tier); [`SHORT_LIVED_BIT`] if they are short-lived. 0: no advice.
    pub advice: AtomicU64,
}

/// In [`SiteSlot::advice`]: the site's objects die young (see [`SiteAdvice::short_lived`]).
pub const SHORT_LIVED_BIT: u64 = 1 << 32;
/// In [`SiteSlot::advice`]: the site's budget in its tier, in pages, in the bits from here up
/// (31 bits: 8 TiB); 0 for no budget.
const BUDGET_SHIFT: u32 = 33;
/// The largest budget the site table holds, in pages.
pub const MAX_BUDGET_PAGES: u64 = (1 << (64 - BUDGET_SHIFT)) - 1;

/// Bits of [`Control::flags`].
pub mod control_flags {
    /// The process is profiled: report every free, never taking an allocation back, so that
    /// every object's lifetime is known (`RingHeader::cancel` is not used).
    pub const PROFILING: u32 = 1 << 0;
}

/// What the daemon advises about the new objects of a site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteAdvice {
    /// The tier they start in.
    pub tier: Option<u32>,
    /// They die young: so many of the site's objects died within half an interval, and none
    /// lived longer, that reporting them costs the program and the daemon for nothing (an
    /// object that dies within an interval never becomes a record). The library still gives
    /// each its own pages, but reports only one in [`SHORT_LIVED_SAMPLE`](crate::SHORT_LIVED_SAMPLE) of them (with
    /// [`event_flags::SAMPLED`](crate::event_flags::SAMPLED)), and neither the allocation nor the free of the others.
    pub short_lived: bool,
    /// How many pages of the site's live objects `tier` may hold at once (a placement's
    /// budget); beyond them new objects, and the tail of the object that crosses the budget,
    /// start one tier down. 0: no budget.
    pub budget_pages: u64,
}

impl SiteAdvice {
    fn from_raw(raw: u64) -> SiteAdvice {
        let t = raw & 0xffff_ffff;
        SiteAdvice {
            tier: (t != 0 && t <= MAX_TIERS as u64).then(|| t as u32 - 1),
            short_lived: raw & SHORT_LIVED_BIT != 0,
            budget_pages: raw >> BUDGET_SHIFT,
        }
    }

    fn to_raw(self) -> u64 {
        self.tier.map_or(0, |t| t as u64 + 1)
            | if self.short_lived { SHORT_LIVED_BIT } else { 0 }
            | self.budget_pages.min(MAX_BUDGET_PAGES) << BUDGET_SHIFT
    }
}

/// The daemon-to-library half of the shared memory, at [`control_offset`](crate::control_offset). The daemon is the
/// only writer of everything but `resync_served`; the library reads it without locks and
/// treats what it finds as advice (an out-of-range tier or an empty node mask is ignored).
#[repr(C, align(64))]
pub struct Control {
    /// Bumped by the daemon when it wants every live object re-announced (it saw drops).
    pub resync_request: AtomicU32,
    /// The last `resync_request` the library served (written by the library).
    pub resync_served: AtomicU32,
    /// Number of valid entries in `tier_nodes`; 0 until the daemon has written them. Written
    /// last at attach, after the site table and everything below: a library that sees the tiers
    /// sees the placement too.
    pub tier_count: AtomicU32,
    /// Where objects of sites the site table does not place start: a tier plus one, or 0 for
    /// wherever first touch puts them (a placement's fallback tier).
    pub default_tier: AtomicU32,
    /// NUMA nodes of each tier, fastest first, as a bit mask of node ids below 64.
    pub tier_nodes: [AtomicU64; MAX_TIERS],
    /// The tier the small-object allocator's memory is bound to, plus one (0: none).
    pub small_objects_tier: AtomicU32,
    /// [`control_flags`].
    pub flags: AtomicU32,
    _pad0: [u8; 168],
    /// Site id -> starting tier.
    pub sites: [SiteSlot; SITE_TABLE_SLOTS],
}

const _: () = {
    assert!(size_of::<SiteSlot>() == 16);
    assert!(size_of::<Control>() == 256 + SITE_TABLE_SLOTS * 16);
    assert!(SITE_TABLE_SLOTS.is_power_of_two());
};

#[inline]
fn site_slot_index(site: u64, probe: usize) -> usize {
    // Site ids are already hashes; fold the high bits in so that ids differing only there spread.
    ((site ^ (site >> 32)) as usize).wrapping_add(probe) & (SITE_TABLE_SLOTS - 1)
}

impl Control {
    /// What the daemon advises about new objects of `site` (nothing for an unknown site).
    /// Lock-free.
    #[inline]
    pub fn site_advice(&self, site: u64) -> SiteAdvice {
        if site == 0 {
            return SiteAdvice::default();
        }
        for probe in 0..SITE_TABLE_MAX_PROBES {
            let slot = &self.sites[site_slot_index(site, probe)];
            match slot.site.load(Ordering::Acquire) {
                0 => break,
                s if s == site => return SiteAdvice::from_raw(slot.advice.load(Ordering::Relaxed)),
                _ => {}
            }
        }
        SiteAdvice::default()
    }

    /// The tier the daemon wants new objects of `site` to start in, if any. Lock-free.
    #[inline]
    pub fn site_tier(&self, site: u64) -> Option<u32> {
        self.site_advice(site).tier
    }

    /// Sets (or with `None` clears) the starting tier of `site`, keeping whether it is
    /// short-lived; any budget is cleared. Only one writer (the daemon) may call this. Returns
    /// false when the table has no room for a new site.
    pub fn set_site_tier(&self, site: u64, tier: Option<u32>) -> bool {
        self.set_site_placement(site, tier, 0)
    }

    /// Sets the starting tier of `site` and its budget there in pages (0: none; see
    /// [`SiteAdvice::budget_pages`]), keeping whether it is short-lived. Only one writer (the
    /// daemon) may call this. Returns false when the table has no room for a new site.
    pub fn set_site_placement(&self, site: u64, tier: Option<u32>, budget_pages: u64) -> bool {
        let budget_pages = if tier.is_some() { budget_pages } else { 0 };
        self.update_site_advice(site, |advice| SiteAdvice {
            tier,
            budget_pages,
            ..advice
        })
    }

    /// The index of `site`'s slot in the table, if it has one: stable for as long as the
    /// control area lives (slots are never reused), so the library keys its per-site counters
    /// by it.
    pub fn site_slot(&self, site: u64) -> Option<usize> {
        if site == 0 {
            return None;
        }
        (0..SITE_TABLE_MAX_PROBES)
            .map(|probe| site_slot_index(site, probe))
            .take_while(|&i| self.sites[i].site.load(Ordering::Acquire) != 0)
            .find(|&i| self.sites[i].site.load(Ordering::Acquire) == site)
    }

    /// The fallback tier of unplaced sites, if the daemon set one.
    #[inline]
    pub fn default_tier(&self) -> Option<u32> {
        tier_plus_one(self.default_tier.load(Ordering::Acquire))
    }

    /// The tier small-object memory is bound to, if the daemon set one.
    #[inline]
    pub fn small_objects_tier(&self) -> Option<u32> {
        tier_plus_one(self.small_objects_tier.load(Ordering::Acquire))
    }

    /// Whether a [`control_flags`] bit is set.
    #[inline]
    pub fn has_flag(&self, flag: u32) -> bool {
        self.flags.load(Ordering::Relaxed) & flag != 0
    }

    /// Marks (or unmarks) `site` short-lived ([`SiteAdvice::short_lived`]), keeping its tier.
    /// Only one writer (the daemon) may call this. Returns false when the table has no room for
    /// a new site.
    pub fn set_site_short_lived(&self, site: u64, short_lived: bool) -> bool {
        self.update_site_advice(site, |advice| SiteAdvice {
            short_lived,
            ..advice
        })
    }

    fn update_site_advice(&self, site: u64, change: impl FnOnce(SiteAdvice) -> SiteAdvice) -> bool {
        if site == 0 {
            return false;
        }
        for probe in 0..SITE_TABLE_MAX_PROBES {
            let slot = &self.sites[site_slot_index(site, probe)];
            match slot.site.load(Ordering::Acquire) {
                0 => {
                    let value = change(SiteAdvice::default()).to_raw();
                    if value == 0 {
                        return true;
                    }
                    slot.advice.store(value, Ordering::Relaxed);
                    slot.site.store(site, Ordering::Release);
                    return true;
                }
                s if s == site => {
                    let old = SiteAdvice::from_raw(slot.advice.load(Ordering::Relaxed));
                    slot.advice.store(change(old).to_raw(), Ordering::Relaxed);
                    return true;
                }
                _ => {}
            }
        }
        false
    }

    /// NUMA node mask of `tier`, if the daemon described it.
    #[inline]
    pub fn tier_nodes(&self, tier: u32) -> Option<u64> {
        let count = self.tier_count.load(Ordering::Acquire) as usize;
        if tier as usize >= count.min(MAX_TIERS) {
            return None;
        }
        let mask = self.tier_nodes[tier as usize].load(Ordering::Relaxed);
        (mask != 0).then_some(mask)
    }

    /// Tier of NUMA `node`, if the daemon described it.
    pub fn tier_of_node(&self, node: u32) -> Option<u32> {
        if node >= 64 {
            return None;
        }
        let count = (self.tier_count.load(Ordering::Acquire) as usize).min(MAX_TIERS);
        (0..count)
            .find(|&t| self.tier_nodes[t].load(Ordering::Relaxed) & (1 << node) != 0)
            .map(|t| t as u32)
    }

    /// Publishes the tiers (daemon side). Node ids of 64 and above cannot be described.
    pub fn set_tiers(&self, tiers: &[u64]) {
        let count = tiers.len().min(MAX_TIERS);
        self.tier_count.store(0, Ordering::Release);
        for (slot, &mask) in self.tier_nodes.iter().zip(&tiers[..count]) {
            slot.store(mask, Ordering::Relaxed);
        }
        self.tier_count.store(count as u32, Ordering::Release);
    }
}

/// A stored tier plus one (0 and out-of-range values: none).
fn tier_plus_one(raw: u32) -> Option<u32> {
    (raw != 0 && raw as usize <= MAX_TIERS).then(|| raw - 1)
}

// SAFETY: all fields are atomics.
unsafe impl Sync for Control {}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::advice;
    use crate::ring::tests::ring;

    #[test]
    fn site_table_sets_finds_and_clears() {
        let (_mem, r) = ring(8);
        let c = r.control();
        assert_eq!(c.site_tier(7), None);
        assert!(c.set_site_tier(7, Some(1)));
        assert_eq!(c.site_tier(7), Some(1));
        assert!(c.set_site_tier(7, Some(0)));
        assert_eq!(c.site_tier(7), Some(0));
        assert!(c.set_site_tier(7, None));
        assert_eq!(c.site_tier(7), None);
        assert!(
            !c.set_site_tier(0, Some(1)),
            "site 0 means unknown and is never placed"
        );
        // Colliding ids (same slot) all get entries, up to the probe limit.
        let (_mem, r) = ring(8);
        let c = r.control();
        let colliding = |i: u64| (i << 12) | (i << 44);
        for i in 1..=SITE_TABLE_MAX_PROBES as u64 {
            assert!(
                c.set_site_tier(colliding(i), Some(i as u32 % 3)),
                "entry {i}"
            );
        }
        assert!(
            !c.set_site_tier(colliding(1000), Some(1)),
            "probe limit reached"
        );
        for i in 1..=SITE_TABLE_MAX_PROBES as u64 {
            assert_eq!(c.site_tier(colliding(i)), Some(i as u32 % 3));
        }
        assert_eq!(c.site_tier(colliding(1000)), None);
    }

    #[test]
    fn a_site_is_short_lived_and_placed_independently() {
        let (_mem, r) = ring(8);
        let c = r.control();
        assert_eq!(c.site_advice(9), SiteAdvice::default());
        assert!(c.set_site_short_lived(9, true));
        assert_eq!(
            c.site_advice(9),
            SiteAdvice {
                tier: None,
                short_lived: true,
                budget_pages: 0
            }
        );
        assert!(c.set_site_tier(9, Some(2)));
        assert_eq!(
            c.site_advice(9),
            SiteAdvice {
                tier: Some(2),
                short_lived: true,
                budget_pages: 0
            },
            "placing keeps the mark"
        );
        assert!(c.set_site_short_lived(9, false));
        assert_eq!(c.site_tier(9), Some(2), "unmarking keeps the tier");
        assert!(!c.site_advice(9).short_lived);
        // Clearing advice a site never had adds no entry.
        assert!(c.set_site_short_lived(10, false));
        assert_eq!(
            c.sites
                .iter()
                .filter(|s| s.site.load(Ordering::Relaxed) == 10)
                .count(),
            0
        );
        // A value with the mark and an out-of-range tier: the mark still holds.
        c.sites[site_slot_index(9, 0)]
            .advice
            .store(SHORT_LIVED_BIT | 99, Ordering::Relaxed);
        assert_eq!(
            c.site_advice(9),
            SiteAdvice {
                tier: None,
                short_lived: true,
                budget_pages: 0
            }
        );
    }

    #[test]
    fn a_placement_has_a_budget_and_a_slot_that_stays() {
        let (_mem, r) = ring(8);
        let c = r.control();
        assert_eq!(c.site_slot(9), None);
        assert!(c.set_site_placement(9, Some(0), 1234));
        let slot = c.site_slot(9).unwrap();
        assert_eq!(c.site_advice(9).budget_pages, 1234);
        assert!(c.set_site_short_lived(9, true));
        assert_eq!(
            c.site_advice(9).budget_pages,
            1234,
            "marking keeps the budget"
        );
        assert!(c.set_site_placement(9, Some(1), MAX_BUDGET_PAGES + 5));
        assert_eq!(c.site_advice(9).budget_pages, MAX_BUDGET_PAGES, "clamped");
        assert!(c.set_site_tier(9, None));
        assert_eq!(c.site_advice(9).budget_pages, 0, "no tier, no budget");
        assert_eq!(c.site_slot(9), Some(slot), "a slot is never given up");
        assert_eq!(c.site_advice(9).tier, None);
        assert!(c.site_advice(9).short_lived);
        assert_eq!(c.default_tier(), None);
        c.default_tier.store(2, Ordering::Release);
        assert_eq!(c.default_tier(), Some(1));
        c.default_tier.store(99, Ordering::Release);
        assert_eq!(c.default_tier(), None, "out of range: none");
        assert!(!c.has_flag(control_flags::PROFILING));
        c.flags.store(control_flags::PROFILING, Ordering::Relaxed);
        assert!(c.has_flag(control_flags::PROFILING));
    }

    #[test]
    fn tiers_map_nodes() {
        let (_mem, r) = ring(8);
        let c = r.control();
        assert_eq!(c.tier_nodes(0), None, "nothing until the daemon writes");
        c.set_tiers(&[0b01, 0b110]);
        assert_eq!(c.tier_nodes(0), Some(1));
        assert_eq!(c.tier_nodes(1), Some(6));
        assert_eq!(c.tier_nodes(2), None);
        assert_eq!(c.tier_of_node(2), Some(1));
        assert_eq!(c.tier_of_node(3), None);
        assert_eq!(c.tier_of_node(99), None);
    }

    #[test]
    fn header_advice_matches_the_wire() {
        let header = include_str!("../../../include/objtier.h");
        let defined = |name: &str| -> u32 {
            let line = header
                .lines()
                .find(|l| l.split_whitespace().nth(1) == Some(name))
                .unwrap_or_else(|| panic!("{name} missing from include/objtier.h"));
            let expr = line.split_once(name).unwrap().1;
            let expr = expr.split("/*").next().unwrap().trim();
            let expr = expr
                .trim_start_matches('(')
                .trim_end_matches(')')
                .replace('u', "");
            let (one, shift) = expr.split_once("<<").expect("values are written 1u << N");
            assert_eq!(one.trim(), "1");
            1 << shift.trim().parse::<u32>().unwrap()
        };
        for (name, value) in [
            ("OBJTIER_ADVICE_PREFER_FAST", advice::PREFER_FAST),
            ("OBJTIER_ADVICE_REQUIRE_FAST", advice::REQUIRE_FAST),
            ("OBJTIER_ADVICE_PREFER_SLOW", advice::PREFER_SLOW),
            ("OBJTIER_ADVICE_REQUIRE_SLOW", advice::REQUIRE_SLOW),
            ("OBJTIER_ADVICE_HOT", advice::HOT),
            ("OBJTIER_ADVICE_COLD", advice::COLD),
            ("OBJTIER_ADVICE_READ_MOSTLY", advice::READ_MOSTLY),
            ("OBJTIER_ADVICE_WRITE_MOSTLY", advice::WRITE_MOSTLY),
            ("OBJTIER_ADVICE_SCRATCH", advice::SCRATCH),
            (
                "OBJTIER_ADVICE_LATENCY_SENSITIVE",
                advice::LATENCY_SENSITIVE,
            ),
        ] {
            assert_eq!(defined(name), value, "{name}");
        }
    }
}
