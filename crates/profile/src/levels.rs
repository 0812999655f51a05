//! Samples by the memory level that served them (`sites[].memory_levels`): where the source
//! reports a data source with each sample (perf's `PERF_SAMPLE_DATA_SRC`: Intel PEBS, and AMD
//! IBS and Arm SPE as the kernel decodes them), how many of a site's samples each level of the
//! hierarchy served, their latency, and how many of them missed the TLB: the seed's Fig. 3 and
//! Tables 1 to 3 (`autonuma-characterization-graph.txt`), per site.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The level names a profile uses, nearest the core first, with what each means. A profile of
/// a later objtier may name others: readers keep them, after these.
pub const MEMORY_LEVELS: [(&str, &str); 13] = [
    ("l1", "the L1 data cache"),
    ("lfb", "a line fill buffer (a miss of L1 already under way)"),
    ("l2", "the L2 cache"),
    ("l3", "the last-level cache (L3)"),
    (
        "other-cache",
        "another cache level (L4, a memory-side cache)",
    ),
    ("remote-cache", "a cache of another socket"),
    ("ram", "local DRAM"),
    (
        "remote-ram",
        "DRAM of another node (another socket, or a CPU-less memory node)",
    ),
    ("cxl", "CXL-attached memory"),
    ("pmem", "persistent memory used as memory (Optane)"),
    ("io", "I/O memory"),
    ("uncached", "uncached memory"),
    (
        "unknown",
        "not said, or only where it missed (a store that missed L1)",
    ),
];

/// Where `name` sorts among [`MEMORY_LEVELS`] (names it does not list come after).
pub fn level_rank(name: &str) -> usize {
    MEMORY_LEVELS
        .iter()
        .position(|(n, _)| *n == name)
        .unwrap_or(MEMORY_LEVELS.len())
}

/// Whether a level is memory rather than a cache: what the seed calls an access "outside the
/// caches".
pub fn is_memory(name: &str) -> bool {
    matches!(name, "ram" | "remote-ram" | "cxl" | "pmem")
}

/// One site's samples served by one level.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LevelAccesses {
    /// Samples (in `measurement.access_unit`).
    pub accesses: f64,
    /// Their weight summed (`measurement.weight_unit`: PEBS load latency), where the source
    /// weighs its samples; 0 otherwise.
    #[serde(default)]
    pub weight: f64,
    /// Of the samples, those whose address translation missed the TLB, and their weight.
    #[serde(default)]
    pub tlb_misses: f64,
    #[serde(default)]
    pub tlb_miss_weight: f64,
    /// Of the samples, those whose line a snoop found modified in another core's cache (HITM).
    #[serde(default)]
    pub hitm: f64,
}

impl LevelAccesses {
    /// Adds `other`, scaled by `scale` (a merge by mean).
    pub fn add(&mut self, other: &LevelAccesses, scale: f64) {
        self.accesses += other.accesses * scale;
        self.weight += other.weight * scale;
        self.tlb_misses += other.tlb_misses * scale;
        self.tlb_miss_weight += other.tlb_miss_weight * scale;
        self.hitm += other.hitm * scale;
    }

    /// What the format cannot hold: a negative or non-finite count.
    pub(crate) fn check(&self) -> Result<(), String> {
        let values = [
            self.accesses,
            self.weight,
            self.tlb_misses,
            self.tlb_miss_weight,
            self.hitm,
        ];
        if values.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err("a memory level's count is negative or not a number".into());
        }
        if self.tlb_misses > self.accesses * (1.0 + 1e-9) {
            return Err("a memory level has more TLB misses than accesses".into());
        }
        if self.hitm > self.accesses * (1.0 + 1e-9) {
            return Err("a memory level has more HITM samples than accesses".into());
        }
        Ok(())
    }
}

/// The levels of several sites (or runs) together, each scaled by `scale`.
pub fn merge<'a>(
    all: impl Iterator<Item = &'a BTreeMap<String, LevelAccesses>>,
    scale: f64,
) -> BTreeMap<String, LevelAccesses> {
    let mut out: BTreeMap<String, LevelAccesses> = BTreeMap::new();
    for levels in all {
        for (name, counts) in levels {
            out.entry(name.clone()).or_default().add(counts, scale);
        }
    }
    out
}

/// The levels by tier of several sites (or runs) together, tier by tier, each scaled by
/// `scale`.
pub fn merge_by_tier<'a>(
    all: impl Iterator<Item = &'a Vec<BTreeMap<String, LevelAccesses>>>,
    scale: f64,
) -> Vec<BTreeMap<String, LevelAccesses>> {
    let mut out: Vec<BTreeMap<String, LevelAccesses>> = Vec::new();
    for tiers in all {
        if out.len() < tiers.len() {
            out.resize_with(tiers.len(), BTreeMap::new);
        }
        for (sum, levels) in out.iter_mut().zip(tiers) {
            for (name, counts) in levels {
                sum.entry(name.clone()).or_default().add(counts, scale);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_sort_nearest_first_and_merge_by_name() {
        assert!(level_rank("l1") < level_rank("l3"));
        assert!(level_rank("ram") < level_rank("cxl"));
        assert_eq!(level_rank("hbm"), MEMORY_LEVELS.len());
        assert!(is_memory("remote-ram") && !is_memory("l3"));
        let a = BTreeMap::from([(
            "ram".to_string(),
            LevelAccesses {
                accesses: 4.0,
                weight: 800.0,
                tlb_misses: 1.0,
                tlb_miss_weight: 300.0,
                hitm: 1.0,
            },
        )]);
        let b = BTreeMap::from([
            (
                "ram".to_string(),
                LevelAccesses {
                    accesses: 2.0,
                    weight: 400.0,
                    ..LevelAccesses::default()
                },
            ),
            (
                "l1".to_string(),
                LevelAccesses {
                    accesses: 10.0,
                    weight: 50.0,
                    ..LevelAccesses::default()
                },
            ),
        ]);
        let m = merge([&a, &b].into_iter(), 0.5);
        assert_eq!(m["ram"].accesses, 3.0);
        assert_eq!(m["ram"].weight, 600.0);
        assert_eq!(m["ram"].tlb_misses, 0.5);
        assert_eq!(m["ram"].hitm, 0.5);
        assert_eq!(m["l1"].accesses, 5.0);
        assert!(m["ram"].check().is_ok());
        let bad = LevelAccesses {
            accesses: 1.0,
            tlb_misses: 2.0,
            ..LevelAccesses::default()
        };
        assert!(bad.check().is_err());
    }
}
