//! Proactive placement by allocation site (paper §3.5): where each site's new objects start.

/// How proactive placement by allocation site (paper §3.5) decides where a site's new objects
/// start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SitePlacement {
    /// No proactive placement: new objects go where first touch puts them.
    Off,
    /// The paper's conservative scheme (§5.4.1): a site starts its new objects below the
    /// fastest tier only when none of its live records keeps it fast.
    Conservative,
    /// A site starts its new objects in a tier when at least this share of its live records'
    /// bytes is planned there (0.5..=1).
    Threshold(f64),
}

/// The threshold scheme's default share.
pub const DEFAULT_SITE_THRESHOLD: f64 = 0.8;

impl std::str::FromStr for SitePlacement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "unknown proactive placement {s:?}: use off, conservative (or on), or \
                 threshold[:SHARE] with SHARE in [0.5, 1] (default {DEFAULT_SITE_THRESHOLD})"
            )
        };
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "false" => Ok(Self::Off),
            "on" | "true" | "conservative" => Ok(Self::Conservative),
            "threshold" => Ok(Self::Threshold(DEFAULT_SITE_THRESHOLD)),
            other => {
                let share = other
                    .strip_prefix("threshold:")
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .filter(|v| (0.5..=1.0).contains(v))
                    .ok_or_else(bad)?;
                Ok(Self::Threshold(share))
            }
        }
    }
}

impl std::fmt::Display for SitePlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SitePlacement::Off => f.write_str("off"),
            SitePlacement::Conservative => f.write_str("conservative"),
            SitePlacement::Threshold(share) => write!(f, "threshold:{share}"),
        }
    }
}

/// The hash of [`proactive_placements`]' site counts: one 128-bit multiply of the id, folded,
/// with a key and a multiplier drawn from std's random hash keys for each map, instead of
/// SipHash's rounds (most of the time proactive placement took at 10^6 records). Site ids come
/// from the processes, so the hash is keyed like std's: ids chosen to collide for one map's
/// keys collide by chance for the next map's. It is not SipHash's cryptographic strength; a
/// process that could make the daemon's maps degrade would only slow this count down.
#[derive(Clone, Copy)]
struct SiteIds {
    key: u64,
    multiplier: u64,
}

impl SiteIds {
    fn new() -> SiteIds {
        use std::hash::BuildHasher;
        let random = std::collections::hash_map::RandomState::new();
        SiteIds {
            key: random.hash_one(0u64),
            multiplier: random.hash_one(1u64) | 1,
        }
    }
}

impl std::hash::BuildHasher for SiteIds {
    type Hasher = SiteIdHasher;

    fn build_hasher(&self) -> SiteIdHasher {
        SiteIdHasher {
            ids: *self,
            hash: 0,
        }
    }
}

struct SiteIdHasher {
    ids: SiteIds,
    hash: u64,
}

impl std::hash::Hasher for SiteIdHasher {
    #[inline]
    fn write_u64(&mut self, id: u64) {
        let product = ((self.hash ^ id ^ self.ids.key) as u128) * self.ids.multiplier as u128;
        self.hash = product as u64 ^ (product >> 64) as u64;
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// One record, as proactive placement sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SiteRecord {
    /// Allocation site id; 0 (unknown) is never placed.
    pub site: u64,
    /// Tier the plan assigned.
    pub tier: usize,
    pub bytes: u64,
    /// Accessed for real and lastingly (the daemon asks for accesses in each of the last two
    /// intervals, after the record's first two).
    pub warm: bool,
}

/// Proactive placement by allocation site (paper §3.5, for any number of tiers): where each
/// site's new objects should start, from where the plan puts its live records. `None` means no
/// placement (new objects go where first touch puts them, normally the fastest tier while it
/// has room). Cold sites then stop taking the fast tier's free room only to be demoted an
/// interval later.
///
/// [`SitePlacement::Conservative`]: the paper places a site only when *all* its live objects
/// are planned slow. With budgets filled by resident bytes, small cold objects often stay
/// planned fast only because they fit the budget's leftover next to a hot object that did not,
/// so a record keeps its site fast only if it is planned into the fastest tier *and* warm. A
/// site is placed, in the fastest tier any of its records is planned into below the fastest,
/// when at least one record is planned below the fastest tier and none keeps it fast; it loses
/// the placement as soon as one does.
///
/// [`SitePlacement::Threshold`]: a site is placed in the tier holding at least the given share
/// of its records' planned bytes (none when that tier is the fastest, or no tier has the share).
/// It places sites whose objects are *mostly* cold, where the conservative scheme waits for all.
pub fn proactive_placements(
    scheme: SitePlacement,
    records: impl IntoIterator<Item = SiteRecord>,
) -> std::collections::BTreeMap<u64, Option<usize>> {
    use std::collections::{BTreeMap, HashMap};
    match scheme {
        SitePlacement::Off => BTreeMap::new(),
        SitePlacement::Conservative => {
            // Per site: whether a record keeps it fast, and the fastest tier below the fastest.
            // Hashed while records are counted, which a million times over is several times
            // quicker than a search tree; ordered once at the end.
            let mut sites = HashMap::<u64, (bool, Option<usize>), _>::with_hasher(SiteIds::new());
            for r in records.into_iter().filter(|r| r.site != 0) {
                let (keeps_fast, slow_tier) = sites.entry(r.site).or_default();
                if r.tier == 0 {
                    *keeps_fast |= r.warm;
                } else {
                    *slow_tier = Some(slow_tier.map_or(r.tier, |t: usize| t.min(r.tier)));
                }
            }
            sites
                .into_iter()
                .map(|(site, (keeps_fast, slow_tier))| (site, slow_tier.filter(|_| !keeps_fast)))
                .collect()
        }
        SitePlacement::Threshold(share) => {
            let mut sites = HashMap::<u64, Vec<u64>, _>::with_hasher(SiteIds::new());
            for r in records.into_iter().filter(|r| r.site != 0) {
                let by_tier = sites.entry(r.site).or_default();
                if by_tier.len() <= r.tier {
                    by_tier.resize(r.tier + 1, 0);
                }
                by_tier[r.tier] += r.bytes;
            }
            sites
                .into_iter()
                .map(|(site, by_tier)| {
                    let total: u64 = by_tier.iter().sum();
                    let tier = by_tier
                        .iter()
                        .position(|&b| total > 0 && b as f64 >= share * total as f64)
                        .filter(|&t| t > 0);
                    (site, tier)
                })
                .collect()
        }
    }
}

/// Intervals a record must have lived before its accesses keep its site fast, and intervals a
/// proactive placement decision must hold before it is applied.
pub const SETTLED_INTERVALS: u32 = 2;

/// Whether a record `age_ns` old was seen accessed, in the last interval (`recent` accesses) or
/// the one before (`previous`), when what was seen tells of the program:
/// - not in the interval it was born in: an object is written when it is initialised, so that
///   interval says nothing of whether it stays cold (a placed site that keeps allocating would
///   have its placement disproved whenever sampling caught a birth).
/// - not in an interval in which the daemon moved its pages (`moved`: in the last interval, in
///   the one before): a page can look accessed in the interval it was moved in.
pub fn accessed_by_the_program(
    recent: f64,
    previous: f64,
    age_ns: u64,
    interval_ns: u64,
    moved: [bool; 2],
) -> bool {
    (recent > 0.0 && age_ns >= interval_ns && !moved[0])
        || (previous > 0.0 && age_ns >= 2 * interval_ns && !moved[1])
}

/// The hysteresis of proactive placement: per site, the latest wish and for how many intervals
/// in a row it held. A wish is applied once it has held for [`SETTLED_INTERVALS`], so that one
/// interval's sampling noise does not flip a site back and forth.
#[derive(Clone, Debug, Default)]
pub struct PlacementStreaks {
    streaks: std::collections::HashMap<u64, (Option<u32>, u32)>,
}

impl PlacementStreaks {
    /// This interval wishes `site` placed in `tier` (None: nowhere); true once the wish has held
    /// long enough to apply.
    pub fn settled(&mut self, site: u64, tier: Option<u32>) -> bool {
        let streak = self.streaks.entry(site).or_insert((tier, 0));
        if streak.0 == tier {
            streak.1 += 1;
        } else {
            *streak = (tier, 1);
        }
        streak.1 >= SETTLED_INTERVALS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::MIB;

    fn rec(site: u64, tier: usize, bytes: u64, warm: bool) -> SiteRecord {
        SiteRecord {
            site,
            tier,
            bytes,
            warm,
        }
    }

    /// Structured site ids (consecutive, or apart by a power of two) hash apart, and two maps
    /// hash them differently.
    /// A record's accesses in the interval of its birth (its initialising writes), or in one in
    /// which the daemon moved its pages, do not disprove its site's placement; other accesses do.
    #[test]
    fn only_accesses_that_tell_of_the_program_disprove_a_placement() {
        let i = 2_000_000_000;
        let still = [false; 2];
        // Born within the last interval: neither interval's accesses count.
        assert!(!accessed_by_the_program(1.0, 1.0, i / 2, i, still));
        // Born in the interval before the last: its last interval's accesses count, the
        // previous one's (its birth) do not.
        assert!(accessed_by_the_program(1.0, 0.0, i + i / 2, i, still));
        assert!(!accessed_by_the_program(0.0, 1.0, i + i / 2, i, still));
        // Older: both count.
        assert!(accessed_by_the_program(0.0, 1.0, 2 * i, i, still));
        assert!(accessed_by_the_program(1.0, 0.0, 5 * i, i, still));
        // Never accessed: never evidence.
        assert!(!accessed_by_the_program(0.0, 0.0, 5 * i, i, still));
        // Moved in the last interval: its accesses then do not count, the one before's do.
        assert!(!accessed_by_the_program(1.0, 0.0, 5 * i, i, [true, false]));
        assert!(accessed_by_the_program(1.0, 1.0, 5 * i, i, [true, false]));
        // Moved in the interval before: the last one's accesses count.
        assert!(!accessed_by_the_program(0.0, 1.0, 5 * i, i, [false, true]));
        assert!(accessed_by_the_program(1.0, 1.0, 5 * i, i, [false, true]));
        assert!(!accessed_by_the_program(1.0, 1.0, 5 * i, i, [true, true]));
    }

    #[test]
    fn a_wish_applies_once_it_held_for_the_settling_intervals() {
        let mut streaks = PlacementStreaks::default();
        assert!(!streaks.settled(1, Some(1)));
        assert!(streaks.settled(1, Some(1)));
        assert!(!streaks.settled(1, None), "a new wish starts again");
        assert!(streaks.settled(1, None));
        assert!(!streaks.settled(2, Some(1)), "each site on its own");
    }

    #[test]
    fn site_ids_hash_apart_and_differently_per_map() {
        use std::hash::BuildHasher;
        let (one, other) = (SiteIds::new(), SiteIds::new());
        let ids: std::collections::BTreeSet<u64> = [0, 12, 32, 48]
            .iter()
            .flat_map(|&shift| (1..=4096u64).map(move |i| i << shift))
            .collect();
        let mut hashes = std::collections::HashSet::new();
        let mut differ = 0;
        for &id in &ids {
            assert!(hashes.insert(one.hash_one(id)), "{id:#x} collides");
            differ += usize::from(one.hash_one(id) != other.hash_one(id));
        }
        assert!(differ > ids.len() - 4);
    }

    #[test]
    fn proactive_placement_for_sites_kept_out_of_the_fast_tier() {
        let got = proactive_placements(
            SitePlacement::Conservative,
            [
                rec(1, 1, MIB, false),
                rec(1, 1, MIB, true), // all planned slow: starts slow
                rec(2, 1, MIB, false),
                rec(2, 0, MIB, true), // one record planned fast and accessed: no placement
                rec(3, 2, MIB, false),
                rec(3, 1, MIB, false), // three tiers: the fastest of its tiers below the fastest
                rec(4, 0, MIB, false),
                rec(4, 1, MIB, false), // fast only by the budget's leftover, not by use: slow
                rec(5, 0, MIB, false), // nothing planned slow: no evidence, no placement
                rec(0, 1, MIB, false), // unknown site: never placed
            ],
        );
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec![
                (1, Some(1)),
                (2, None),
                (3, Some(1)),
                (4, Some(1)),
                (5, None)
            ]
        );
        assert!(proactive_placements(SitePlacement::Off, [rec(1, 1, MIB, false)]).is_empty());
    }

    #[test]
    fn threshold_placement_follows_the_share_of_bytes() {
        let got = proactive_placements(
            SitePlacement::Threshold(0.8),
            [
                // 9 of 10 MiB planned slow, one warm MiB fast: placed slow (conservative would not).
                rec(1, 1, 9 * MIB, false),
                rec(1, 0, MIB, true),
                // 7 of 10 MiB slow: under the share, no placement.
                rec(2, 1, 7 * MIB, false),
                rec(2, 0, 3 * MIB, false),
                // Mostly fast: no placement.
                rec(3, 0, 9 * MIB, true),
                rec(3, 1, MIB, false),
                // Three tiers, the middle one holds the share.
                rec(4, 1, 8 * MIB, false),
                rec(4, 2, 2 * MIB, false),
            ],
        );
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec![(1, Some(1)), (2, None), (3, None), (4, Some(1))]
        );
        assert_eq!("threshold".parse(), Ok(SitePlacement::Threshold(0.8)));
        assert_eq!("threshold:0.6".parse(), Ok(SitePlacement::Threshold(0.6)));
        assert_eq!("on".parse(), Ok(SitePlacement::Conservative));
        assert!("threshold:0.2".parse::<SitePlacement>().is_err());
        assert!("sometimes"
            .parse::<SitePlacement>()
            .unwrap_err()
            .contains("conservative"));
    }
}
