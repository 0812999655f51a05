//! `objtier report`: Moura et al.'s characterization (`autonuma-characterization-graph.txt`)
//! for any profile: which objects are hot, where they lived, how much fast memory the program
//! needs, what the tiering moved and whether it paid.
//!
//! The figures are computed once, by pure functions of a [`Profile`] (no I/O: unit-tested on
//! hand-made profiles), into a [`Report`] that the writers only render: [`html`] (one
//! self-contained file, charts drawn by plotters into inline SVG), [`csv`] (a table per file)
//! and JSON (the [`Report`] serialized as is). One job per file:
//!
//! - [`figures`]: the summary, the sites ranked by accesses with their lifetimes and tiers,
//!   each tier's top sites; [`latency`]: latency and data source by tier;
//! - [`curve`]: how much fast memory the program needs, per advise algorithm, and the share
//!   the run actually got where it had tiers;
//! - [`timeline`]: accesses, live bytes per tier and per site, and the migrations (recorded
//!   page by page with their ping-pong, or derived from each site's bytes per tier in older
//!   profiles), interval by interval;
//! - [`pages`]: touches per page and reuse times, for sources with page detail;
//! - [`charts`]: the SVG charts.
//!
//! Every figure says which source measured it ([`figures::precision_of`]): a report of a
//! DAMON profile is not a report of a PEBS one, and the reader is told the difference.

pub mod charts;
pub mod csv;
pub mod curve;
pub mod figures;
pub mod html;
pub mod latency;
pub mod pages;
pub mod timeline;

#[cfg(test)]
mod test_profiles;

use objtier_profile::Profile;
use serde::Serialize;

/// One profile to report on, named for people.
pub struct Input {
    /// What the report calls it: the profile's file name, or `pid N`.
    pub label: String,
    pub profile: Profile,
    /// Set when the profile is a daemon's snapshot of a live process (`--pid`).
    pub live: Option<LiveSnapshot>,
}

/// What `profile-snapshot` said of a live process.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LiveSnapshot {
    pub pid: u32,
    /// Profiled from its start (its recording so far), or not (its live objects now, and the
    /// daemon's access estimates of their records).
    pub profiled: bool,
}

/// Everything reported about one profile.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub summary: figures::Summary,
    pub curve: curve::Curve,
    pub sites: Vec<figures::SiteFigure>,
    pub tier_top: Option<Vec<figures::TierTop>>,
    pub over_time: timeline::OverTime,
    pub pages: pages::PagesFigure,
    pub latency: latency::Latency,
}

/// The report of `input`.
pub fn build(input: &Input) -> Report {
    let profile = &input.profile;
    let sites = figures::sites(profile);
    Report {
        summary: figures::summary(&input.label, profile, input.live.clone()),
        curve: curve::curve(profile, &curve::CAPACITY_PERCENTS),
        tier_top: figures::tier_top(&sites, figures::TIER_TOP),
        over_time: timeline::over_time(profile, &sites),
        pages: pages::figure(profile.source, pages::from_profile(profile).as_deref()),
        latency: latency::latency(profile, &sites),
        sites,
    }
}

/// `bytes` for people: 1.5 GiB, 12.0 MiB, 4 KiB.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A share for people: 12.3 %.
pub fn percent(share: f64) -> String {
    format!("{:.1} %", 100.0 * share)
}

/// Seconds for people: 850 ms, 2.50 s, 3 min 5 s.
pub fn human_seconds(s: f64) -> String {
    if !s.is_finite() {
        "-".to_string()
    } else if s < 1e-6 {
        "< 1 µs".to_string()
    } else if s < 1e-3 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else if s < 120.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.0} min {:.0} s", (s / 60.0).floor(), s % 60.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(4096), "4.0 KiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(200 << 20), "200 MiB");
        assert_eq!(percent(0.1234), "12.3 %");
        assert_eq!(human_seconds(0.25), "250 ms");
        assert_eq!(human_seconds(2.5), "2.50 s");
        assert_eq!(human_seconds(185.0), "3 min 5 s");
        assert_eq!(human_seconds(f64::NAN), "-");
        assert_eq!(human_seconds(0.0), "< 1 µs");
    }

    /// `--json` is the report serialized: the recorded moves and the data sources are in it.
    #[test]
    fn the_json_has_the_recorded_moves_and_data_sources() {
        let r = build(&Input {
            label: "c.json".into(),
            profile: test_profiles::recorded(),
            live: None,
        });
        let json = serde_json::to_value(&r).unwrap();
        let m = &json["over_time"]["migrations"];
        assert_eq!(m["known"], "recorded");
        assert_eq!(m["ping_pong_pages"], serde_json::json!([0, 0, 1, 2]));
        assert_eq!(m["total_ping_pong_pages"], 3);
        assert_eq!(m["sites"][0]["ping_pong_pages"], 3);
        let l = &json["latency"];
        assert_eq!(l["by_tier_from"], "recorded");
        assert_eq!(l["levels"][2]["level"], "cxl");
        assert_eq!(l["levels_by_tier"][0][0]["mean_weight"], 200.0);
        assert!(l["note"].as_str().unwrap().contains("data source"));
    }
}
