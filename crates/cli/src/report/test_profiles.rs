//! Hand-made profiles for the report's unit tests.

use objtier_profile::profile::{Interval, TierInfo};
use objtier_profile::{Profile, Program, Site, Source};

/// A DAMON profile of `app` with `tiers` tiers (1 GiB each, the second 4 times slower) and
/// `intervals` intervals of one second; no sites.
pub fn profile(tiers: usize, intervals: usize) -> Profile {
    let mut p = Profile::new(Source::Damon, Program::of_exe("/bin/app", None));
    p.tiers = (0..tiers)
        .map(|t| TierInfo {
            nodes: vec![t as u32],
            capacity_bytes: 1 << 30,
            read_latency_ns: Some(80 << (2 * t)),
            write_latency_ns: Some(80 << (2 * t)),
        })
        .collect();
    p.intervals = (0..intervals)
        .map(|i| Interval {
            start_s: i as f64,
            end_s: i as f64 + 1.0,
        })
        .collect();
    p.duration_s = intervals as f64;
    p.measurement.interval_s = 1.0;
    p
}

/// A site of one object of `bytes` live from the first interval on, with `accesses` per
/// interval (one row each, from interval 0).
pub fn site(frame: &str, bytes: u64, accesses: &[f64]) -> Site {
    let mut s = Site {
        frames: vec![frame.to_string()],
        allocations: 1,
        bytes_allocated: bytes,
        peak_live_bytes: bytes,
        accesses: accesses.iter().sum(),
        ..Site::default()
    };
    for (i, &a) in accesses.iter().enumerate() {
        s.series.push(i, bytes, a, None, None, u64::from(i == 0));
    }
    s
}

/// A perf profile of two tiers and four intervals as the daemon records it now: one site whose
/// pages were followed (2 promoted in interval 1; 2 demoted in 2, one of them moved before; 2
/// promoted in 3, both moved before) and whose samples' data sources were recorded by tier
/// (tier 0: 6 from DRAM at 200 cycles; tier 1: 2 from CXL at 600, one a TLB miss; 2 from L1
/// at 10, of a page not located yet, in the total only).
pub fn recorded() -> Profile {
    use objtier_profile::levels::LevelAccesses;
    use objtier_profile::profile::PageMovesFollowed;
    use std::collections::BTreeMap;
    let mut p = profile(2, 4);
    p.source = Source::Perf;
    p.measurement.weight_unit = Some("latency cycles".into());
    p.measurement.page_moves = Some(PageMovesFollowed {
        history_bytes_max: 64 << 20,
        pages_not_followed: 0,
    });
    let mut s = site("/bin/app+0x10", 4 << 12, &[2.0, 2.0, 3.0, 3.0]);
    s.series.tier_bytes = Some(vec![vec![0, 4 << 12]; 4]);
    s.series.promoted_pages = Some(vec![0, 2, 0, 2]);
    s.series.demoted_pages = Some(vec![0, 0, 2, 0]);
    s.series.ping_pong_pages = Some(vec![0, 0, 1, 2]);
    let counts = |accesses: f64, weight: f64, tlb: f64| LevelAccesses {
        accesses,
        weight,
        tlb_misses: tlb,
        tlb_miss_weight: if tlb > 0.0 {
            weight / accesses * tlb
        } else {
            0.0
        },
        hitm: 0.0,
    };
    let tier0 = BTreeMap::from([("ram".to_string(), counts(6.0, 1200.0, 0.0))]);
    let tier1 = BTreeMap::from([("cxl".to_string(), counts(2.0, 1200.0, 1.0))]);
    s.memory_levels = BTreeMap::from([
        ("ram".to_string(), counts(6.0, 1200.0, 0.0)),
        ("cxl".to_string(), counts(2.0, 1200.0, 1.0)),
        ("l1".to_string(), counts(2.0, 20.0, 0.0)),
    ]);
    s.memory_levels_by_tier = vec![tier0, tier1];
    s.weight = Some(2420.0);
    p.sites = vec![s];
    p.peak_footprint_bytes = 4 << 12;
    p
}
