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
