//! The report's per-site figures: the summary of the run, the sites ranked by accesses (the
//! seed's objects: symbolized call path, bytes, accesses per byte, lifetimes, loads against
//! stores, which tier they lived in), each tier's top sites (the seed's Fig. 6), and latency
//! by tier where the source weighs its samples (Table 2, in `latency.rs`).
//!
//! Where a site's pages were comes from `series.tier_bytes`: bytes per tier at each interval's
//! end, as the daemon located them. A site's accesses in an interval are split among the tiers
//! in proportion to those bytes: exact for a site whose pages are all in one tier, an
//! approximation for one split between tiers (its hot pages may be the fast ones) and for an
//! interval in which pages moved (the location is the interval's end).

use super::LiveSnapshot;
use objtier_profile::{Profile, Site, SiteKind, Source};
use serde::Serialize;

/// Sites in each tier's top list (the seed's top 10).
pub const TIER_TOP: usize = 10;

/// What a source's `accesses` are, and how far to trust them: said beside every figure.
pub fn precision_of(source: Source) -> &'static str {
    match source {
        Source::Perf => {
            "perf samples: one every sample period of the event sampled (with mem-loads, loads \
             slower than the latency threshold): estimates proportional to the misses the \
             hardware saw, within about 1/√n of a site's n samples (±10 % at 100 samples); \
             objects freed before the interval's end lose their samples"
        }
        Source::Damon => {
            "DAMON access bits: pages found accessed at DAMON's samples, summed per region and \
             shared among the objects a region overlaps. It counts where the program touches \
             memory, not where it misses the cache, and tells objects apart only as finely as \
             its regions; objects born and freed between two looks are not seen"
        }
        Source::Proc => {
            "page reference bits read through /proc at most once an interval: a page counts once \
             per look however often it was touched, so counts are coarse (a ranking of sites, \
             not a measure of traffic); objects born and freed between two looks are not seen"
        }
        Source::Emulate => {
            "an emulated cache: every load and store that missed the modeled last-level cache, \
             counted exactly (no sampling)"
        }
        Source::None => {
            "no access source: allocations, bytes and lifetimes only; every access figure is zero"
        }
    }
}

/// [`precision_of`] in a line, for the sections after the summary.
pub fn precision_brief(source: Source) -> &'static str {
    match source {
        Source::Perf => "perf samples: estimates, within about 1/√n of a site's n samples",
        Source::Damon => {
            "DAMON access bits: where the program touches memory (not where it misses the \
             cache), told apart as finely as DAMON's regions"
        }
        Source::Proc => {
            "page reference bits, a page counted at most once an interval: a ranking of sites, \
             not a measure of traffic"
        }
        Source::Emulate => "an emulated cache: every miss, exactly",
        Source::None => "no access source: every access figure is zero",
    }
}

/// The run in one table (section 1).
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub label: String,
    pub program: String,
    pub exe: String,
    pub command: Vec<String>,
    pub duration_s: f64,
    pub source: &'static str,
    pub source_description: String,
    pub access_unit: String,
    pub precision: &'static str,
    pub precision_brief: &'static str,
    pub loads_and_stores: bool,
    pub weight_unit: Option<String>,
    /// What the source reported for the profiled processes, what of it fell on tracked
    /// objects, and the second over the first.
    pub sampled: f64,
    pub attributed: f64,
    pub attributed_share: Option<f64>,
    pub total_accesses: f64,
    pub peak_footprint_bytes: u64,
    pub tiers: Vec<TierSummary>,
    pub intervals: usize,
    pub interval_s: f64,
    pub processes: usize,
    pub dropped_events: u64,
    pub merged_runs: u32,
    pub sites: usize,
    /// Whether any site's pages were located (`series.tier_bytes`).
    pub located: bool,
    pub live: Option<LiveSnapshot>,
    pub created_unix_s: f64,
    pub objtier_version: String,
}

/// One tier of the machine profiled.
#[derive(Clone, Debug, Serialize)]
pub struct TierSummary {
    pub tier: usize,
    pub nodes: Vec<u32>,
    pub capacity_bytes: u64,
    pub read_latency_ns: Option<u64>,
    pub write_latency_ns: Option<u64>,
}

pub fn summary(label: &str, profile: &Profile, live: Option<LiveSnapshot>) -> Summary {
    let m = &profile.measurement;
    Summary {
        label: label.to_string(),
        program: profile.program.name.clone(),
        exe: profile.program.exe.clone(),
        command: profile.command.clone(),
        duration_s: profile.duration_s,
        source: profile.source.name(),
        source_description: m.description.clone(),
        access_unit: m.access_unit.clone(),
        precision: precision_of(profile.source),
        precision_brief: precision_brief(profile.source),
        loads_and_stores: m.loads_and_stores,
        weight_unit: m.weight_unit.clone(),
        sampled: m.sampled,
        attributed: m.attributed,
        attributed_share: m.attributed_share,
        total_accesses: profile.total_accesses(),
        peak_footprint_bytes: profile.peak_footprint_bytes,
        tiers: profile
            .tiers
            .iter()
            .enumerate()
            .map(|(tier, t)| TierSummary {
                tier,
                nodes: t.nodes.clone(),
                capacity_bytes: t.capacity_bytes,
                read_latency_ns: t.read_latency_ns,
                write_latency_ns: t.write_latency_ns,
            })
            .collect(),
        intervals: profile.intervals.len(),
        interval_s: m.interval_s,
        processes: profile.processes.len(),
        dropped_events: profile.processes.iter().map(|p| p.dropped_events).sum(),
        merged_runs: profile.merged_runs,
        sites: profile.sites.len(),
        located: located(profile),
        live,
        created_unix_s: profile.created_unix_s,
        objtier_version: profile.objtier_version.clone(),
    }
}

/// Whether the daemon located any of the profile's pages.
pub fn located(profile: &Profile) -> bool {
    profile.sites.iter().any(|s| {
        s.series
            .tier_bytes
            .as_ref()
            .is_some_and(|rows| rows.iter().any(|r| !r.is_empty()))
    })
}

/// How many tiers the profile speaks of: the machine's, or as many as a row of bytes per tier
/// names (a profile of a machine it does not describe).
pub fn tier_count(profile: &Profile) -> usize {
    let in_rows = profile
        .sites
        .iter()
        .filter_map(|s| s.series.tier_bytes.as_ref())
        .flatten()
        .map(Vec::len)
        .max()
        .unwrap_or(0);
    profile.tiers.len().max(in_rows)
}

/// Each tier's share of a row of bytes per tier; `None` where the row is empty (not located)
/// or holds no bytes.
pub fn tier_fractions(row: &[u64]) -> Option<Vec<f64>> {
    let total: u64 = row.iter().sum();
    (total > 0).then(|| row.iter().map(|&b| b as f64 / total as f64).collect())
}

/// One site as the report shows it (section 3).
#[derive(Clone, Debug, Serialize)]
pub struct SiteFigure {
    /// 1 for the most accessed site; `id` is `S{rank}`, what charts label it.
    pub rank: usize,
    pub id: String,
    /// Index in the profile's `sites`.
    pub index: usize,
    pub kind: &'static str,
    /// A short name: the first function that is not an allocator's, and where it allocated.
    pub label: String,
    /// Every frame, innermost first: its symbol where known, else `module+0xoffset`.
    pub frames: Vec<String>,
    pub allocations: u64,
    pub bytes_allocated: u64,
    pub peak_live_bytes: u64,
    pub accesses: f64,
    /// Of all the profile's accesses.
    pub access_share: f64,
    /// Accesses per MiB of peak live bytes (the seed's ranking: accesses over size).
    pub accesses_per_mib: f64,
    pub loads: Option<f64>,
    pub stores: Option<f64>,
    pub weight: Option<f64>,
    pub lifetime: LifetimeFigure,
    /// Accesses served by each tier (each interval's split by where the site's bytes were at
    /// its end); `None` where none of the site's pages were located.
    pub tier_accesses: Option<Vec<f64>>,
    /// Accesses in intervals whose location is unknown.
    pub unlocated_accesses: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LifetimeFigure {
    pub freed: u64,
    pub min_s: Option<f64>,
    pub median_s: Option<f64>,
    pub max_s: Option<f64>,
    pub past_one_interval: u64,
    pub live_at_exit: u64,
}

fn kind_name(kind: SiteKind) -> &'static str {
    match kind {
        SiteKind::Site => "site",
        SiteKind::SmallObjects => "small-objects",
        SiteKind::Unknown => "unknown",
    }
}

/// Every site, most accessed first (ties: more bytes first, then the profile's order).
pub fn sites(profile: &Profile) -> Vec<SiteFigure> {
    let total = profile.total_accesses();
    let tiers = tier_count(profile);
    let mut order: Vec<usize> = (0..profile.sites.len()).collect();
    order.sort_by(|&a, &b| {
        let (sa, sb) = (&profile.sites[a], &profile.sites[b]);
        sb.accesses
            .total_cmp(&sa.accesses)
            .then(sb.peak_live_bytes.cmp(&sa.peak_live_bytes))
            .then(a.cmp(&b))
    });
    let mut figures: Vec<SiteFigure> = order
        .into_iter()
        .enumerate()
        .map(|(position, index)| {
            let site = &profile.sites[index];
            let (tier_accesses, unlocated_accesses) = tier_accesses(site, tiers);
            SiteFigure {
                rank: position + 1,
                id: format!("S{}", position + 1),
                index,
                kind: kind_name(site.kind),
                label: site_label(site),
                frames: frames(site),
                allocations: site.allocations,
                bytes_allocated: site.bytes_allocated,
                peak_live_bytes: site.peak_live_bytes,
                accesses: site.accesses,
                access_share: if total > 0.0 {
                    site.accesses / total
                } else {
                    0.0
                },
                accesses_per_mib: if site.peak_live_bytes > 0 {
                    site.accesses / (site.peak_live_bytes as f64 / (1 << 20) as f64)
                } else {
                    0.0
                },
                loads: site.loads,
                stores: site.stores,
                weight: site.weight,
                lifetime: LifetimeFigure {
                    freed: site.lifetime.freed,
                    min_s: site.lifetime.min_s,
                    // The median is its histogram bucket's upper bound: keep it within the
                    // lifetimes seen.
                    median_s: match (
                        site.lifetime.median_s,
                        site.lifetime.min_s,
                        site.lifetime.max_s,
                    ) {
                        (Some(m), Some(lo), Some(hi)) if lo <= hi => Some(m.clamp(lo, hi)),
                        (m, _, _) => m,
                    },
                    max_s: site.lifetime.max_s,
                    past_one_interval: site.lifetime.past_one_interval,
                    live_at_exit: site.lifetime.live_at_exit,
                },
                tier_accesses,
                unlocated_accesses,
            }
        })
        .collect();
    disambiguate(profile, &mut figures);
    figures
}

/// Sites whose labels are the same (one function allocating from several call paths) get
/// the first frame in which their call paths differ appended.
fn disambiguate(profile: &Profile, figures: &mut [SiteFigure]) {
    let keys: Vec<(String, usize)> = figures.iter().map(|f| (f.label.clone(), f.index)).collect();
    for (i, f) in figures.iter_mut().enumerate() {
        let frames = &profile.sites[f.index].frames;
        // The deepest first difference from any twin tells this site apart from all of them.
        let differs_at = keys
            .iter()
            .enumerate()
            .filter(|&(j, (label, _))| j != i && *label == keys[i].0)
            .map(|(_, &(_, index))| {
                let twin = &profile.sites[index].frames;
                (0..frames.len()).find(|&k| twin.get(k) != frames.get(k))
            })
            .max()
            .flatten();
        if let Some(k) = differs_at {
            f.label = format!("{} ← {}", f.label, f.frames[k]);
        }
    }
}

/// A site's accesses per tier, and those of intervals not located.
fn tier_accesses(site: &Site, tiers: usize) -> (Option<Vec<f64>>, f64) {
    let mut by_tier = vec![0.0; tiers];
    let mut located = false;
    let mut unlocated = 0.0;
    let rows = site.series.tier_bytes.as_deref().unwrap_or(&[]);
    for (row, &accesses) in site.series.accesses.iter().enumerate() {
        match rows.get(row).and_then(|r| tier_fractions(r)) {
            Some(fractions) => {
                located = true;
                for (t, f) in fractions.iter().enumerate().take(tiers) {
                    by_tier[t] += accesses * f;
                }
            }
            None => unlocated += accesses,
        }
    }
    // Accesses the site has beyond its rows (a snapshot without a series): not located.
    let in_rows: f64 = site.series.accesses.iter().sum();
    unlocated += (site.accesses - in_rows).max(0.0);
    (located.then_some(by_tier), unlocated)
}

/// Frames for people: each one's symbol, else the module's file name and the offset.
pub fn frames(site: &Site) -> Vec<String> {
    site.frames
        .iter()
        .enumerate()
        .map(|(i, frame)| match site.symbols.get(i).cloned().flatten() {
            Some(symbol) => symbol,
            None => short_frame(frame),
        })
        .collect()
}

/// `/usr/lib/libfoo.so.1+0x1234` as `libfoo.so.1+0x1234`.
/// Python extension modules lose their ABI tag (`_igraph.cpython-311-x86_64-linux-gnu.so` is
/// `_igraph.so`): it is the same in every frame of a program, and half a table's width.
fn short_frame(frame: &str) -> String {
    match objtier_profile::parse_frame(frame) {
        Some((module, offset)) => {
            let name = objtier_profile::file_name(module);
            let name = match name.find(".cpython-") {
                Some(i) if name.ends_with(".so") => format!("{}.so", &name[..i]),
                _ => name.to_string(),
            };
            format!("{name}+{offset:#x}")
        }
        None => frame.to_string(),
    }
}

/// Functions that only pass an allocation on: a site is named for its first frame past them.
const ALLOCATOR_FUNCTIONS: [&str; 14] = [
    "operator new",
    "operator new[]",
    "malloc",
    "calloc",
    "realloc",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "__libc_",
    "__rust_",
    "alloc::",
    "<alloc::",
    "std::alloc",
    "_Zn",
];

/// Functions every call path passes through on its way out: they name no site.
const ENTRY_FUNCTIONS: [&str; 4] = [
    "__libc_start_main",
    "__libc_start_call_main",
    "_start",
    "start_thread",
];

/// Modules whose frames are the allocator's, for sites without symbols.
const ALLOCATOR_MODULES: [&str; 3] = ["libc.so", "libstdc++.so", "libobjtier.so"];

/// A site's short name: its first frame that is not the allocator's, named by the first
/// function (from there outwards) that has a symbol. The pseudo-sites have names of their own.
pub fn site_label(site: &Site) -> String {
    match site.kind {
        SiteKind::SmallObjects => return "small objects (the allocator's arenas)".to_string(),
        SiteKind::Unknown => return "objects of unknown site".to_string(),
        SiteKind::Site => {}
    }
    let symbol = |i: usize| site.symbols.get(i).cloned().flatten();
    let is_allocator = |i: usize| match symbol(i) {
        Some(s) => ALLOCATOR_FUNCTIONS.iter().any(|a| s.starts_with(a)),
        None => objtier_profile::parse_frame(&site.frames[i]).is_some_and(|(module, _)| {
            let name = objtier_profile::file_name(module);
            ALLOCATOR_MODULES.iter().any(|m| name.starts_with(m))
        }),
    };
    let Some(first) = (0..site.frames.len()).find(|&i| !is_allocator(i)) else {
        return site
            .frames
            .first()
            .map_or(String::new(), |f| short_frame(f));
    };
    let names = |s: &str| {
        !ENTRY_FUNCTIONS.iter().any(|e| {
            s.starts_with(e) && !s[e.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
        })
    };
    let named = (first..site.frames.len()).find(|&i| symbol(i).is_some_and(|s| names(&s)));
    match named {
        Some(i) if i == first => function_of(&symbol(i).unwrap_or_default()),
        Some(i) => format!(
            "{} via {}",
            function_of(&symbol(i).unwrap_or_default()),
            short_frame(&site.frames[first])
        ),
        None => short_frame(&site.frames[first]),
    }
}

/// `f+0x10 (file.rs:3)` as `f (file.rs:3)`: the offset says nothing to people.
fn function_of(symbol: &str) -> String {
    let (name, place) = match symbol.find(" (") {
        Some(i) => (&symbol[..i], &symbol[i..]),
        None => (symbol, ""),
    };
    let name = match name.rfind("+0x") {
        Some(i) => &name[..i],
        None => name,
    };
    format!("{name}{place}")
}

/// One tier's most accessed sites (the seed's Fig. 6: the top 10 per tier).
#[derive(Clone, Debug, Serialize)]
pub struct TierTop {
    pub tier: usize,
    /// All accesses the tier served, and their share of the located accesses.
    pub accesses: f64,
    pub share_of_located: f64,
    pub sites: Vec<TierTopSite>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TierTopSite {
    pub id: String,
    pub label: String,
    pub accesses: f64,
    /// Of the tier's accesses.
    pub share: f64,
}

/// Each tier's `n` most accessed sites, from the sites' accesses per tier; `None` when no
/// page was located.
pub fn tier_top(sites: &[SiteFigure], n: usize) -> Option<Vec<TierTop>> {
    let tiers = sites
        .iter()
        .filter_map(|s| s.tier_accesses.as_ref().map(Vec::len))
        .max()?;
    let located: f64 = sites
        .iter()
        .filter_map(|s| s.tier_accesses.as_ref())
        .flatten()
        .sum();
    Some(
        (0..tiers)
            .map(|tier| {
                let of = |s: &SiteFigure| {
                    s.tier_accesses
                        .as_ref()
                        .and_then(|a| a.get(tier).copied())
                        .unwrap_or(0.0)
                };
                let accesses: f64 = sites.iter().map(of).sum();
                let mut ranked: Vec<&SiteFigure> = sites.iter().filter(|s| of(s) > 0.0).collect();
                // Stable: equal accesses keep the overall ranking.
                ranked.sort_by(|a, b| of(b).total_cmp(&of(a)));
                TierTop {
                    tier,
                    accesses,
                    share_of_located: if located > 0.0 {
                        accesses / located
                    } else {
                        0.0
                    },
                    sites: ranked
                        .into_iter()
                        .take(n)
                        .map(|s| TierTopSite {
                            id: s.id.clone(),
                            label: s.label.clone(),
                            accesses: of(s),
                            share: of(s) / accesses,
                        })
                        .collect(),
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_profiles::{profile, site};

    #[test]
    fn sites_rank_by_accesses_with_their_tiers() {
        let mut p = profile(2, 3);
        // A cold 4 MiB site entirely in tier 1, and a hot 1 MiB site in tier 0 then half down.
        let mut cold = site("/bin/app+0x10", 4 << 20, &[1.0, 1.0, 2.0]);
        cold.series.tier_bytes = Some(vec![vec![0, 4 << 20]; 3]);
        let mut hot = site("/bin/app+0x20", 1 << 20, &[30.0, 30.0, 40.0]);
        hot.series.tier_bytes = Some(vec![
            vec![1 << 20, 0],
            vec![1 << 19, 1 << 19],
            vec![], // not located
        ]);
        p.sites = vec![cold, hot];
        let s = sites(&p);
        assert_eq!(s[0].id, "S1");
        assert_eq!(s[0].index, 1, "the hot site first");
        assert!((s[0].access_share - 100.0 / 104.0).abs() < 1e-12);
        assert!((s[0].accesses_per_mib - 100.0).abs() < 1e-12);
        assert!((s[1].accesses_per_mib - 1.0).abs() < 1e-12);
        assert_eq!(s[0].tier_accesses, Some(vec![45.0, 15.0]));
        assert_eq!(s[0].unlocated_accesses, 40.0);
        assert_eq!(s[1].tier_accesses, Some(vec![0.0, 4.0]));
        let top = tier_top(&s, 1).unwrap();
        assert_eq!(top.len(), 2);
        assert_eq!(top[0].sites.len(), 1);
        assert_eq!(top[0].sites[0].id, "S1");
        assert_eq!(top[0].sites[0].share, 1.0);
        assert_eq!(top[1].accesses, 19.0);
        assert_eq!(
            top[1].sites[0].id, "S1",
            "15 of tier 1's 19 are the hot site's"
        );
        assert!((top[1].sites[0].share - 15.0 / 19.0).abs() < 1e-12);
        assert!((top[0].share_of_located - 45.0 / 64.0).abs() < 1e-12);
    }

    #[test]
    fn without_locations_there_are_no_tier_figures() {
        let mut p = profile(2, 2);
        p.sites = vec![site("/bin/app+0x10", 4096, &[1.0, 2.0])];
        let s = sites(&p);
        assert_eq!(s[0].tier_accesses, None);
        assert_eq!(s[0].unlocated_accesses, 3.0);
        assert!(tier_top(&s, TIER_TOP).is_none());
        assert!(!located(&p));
        assert!(crate::report::latency::latency(&p, &s).by_tier.is_none());
    }

    #[test]
    fn sites_are_named_past_the_allocator() {
        let mut s = site("/usr/lib/libstdc++.so.6+0xa958c", 4096, &[]);
        s.frames.push("/usr/lib/igraph.so+0x2cedc8".into());
        s.frames.push("/usr/lib/igraph.so+0x389b7".into());
        s.symbols = vec![
            Some("operator new(unsigned long)+0x1b".into()),
            None,
            Some("igraph_pagerank+0x376 (pagerank.c:12)".into()),
        ];
        assert_eq!(
            site_label(&s),
            "igraph_pagerank (pagerank.c:12) via igraph.so+0x2cedc8"
        );
        assert_eq!(
            frames(&s),
            [
                "operator new(unsigned long)+0x1b",
                "igraph.so+0x2cedc8",
                "igraph_pagerank+0x376 (pagerank.c:12)"
            ]
        );
        // Without symbols: past libc's frames.
        let ext = site(
            "/usr/lib/_igraph.cpython-311-x86_64-linux-gnu.so+0x77d08",
            4096,
            &[],
        );
        assert_eq!(site_label(&ext), "_igraph.so+0x77d08");
        let mut bare = site("/lib/libc.so.6+0x99", 4096, &[]);
        bare.frames.push("/usr/bin/hpcc+0x3fcb3".into());
        assert_eq!(site_label(&bare), "hpcc+0x3fcb3");
        // The program's entry is no name either.
        bare.frames.push("/lib/libc.so.6+0x2724a".into());
        bare.symbols = vec![None, None, Some("__libc_start_main+0x85".into())];
        assert_eq!(site_label(&bare), "hpcc+0x3fcb3");
        bare.symbols[2] = Some("__libc_start_main_impl+0x85".into());
        assert_eq!(site_label(&bare), "__libc_start_main_impl via hpcc+0x3fcb3");
        s.symbols[1] = Some("make_vector+0x4".into());
        assert_eq!(site_label(&s), "make_vector");
        let small = Site {
            kind: SiteKind::SmallObjects,
            ..Site::default()
        };
        assert!(site_label(&small).starts_with("small objects"));
    }

    #[test]
    fn sites_of_one_label_are_told_apart_by_their_call_paths() {
        let mut p = profile(1, 1);
        let mut a = site("/bin/app+0x10", 4096, &[2.0]);
        a.frames.push("/bin/app+0x100".into());
        let mut b = site("/bin/app+0x10", 4096, &[1.0]);
        b.frames.push("/bin/app+0x200".into());
        p.sites = vec![a, b, site("/bin/app+0x30", 4096, &[0.5])];
        let s = sites(&p);
        assert_eq!(s[0].label, "app+0x10 ← app+0x100");
        assert_eq!(s[1].label, "app+0x10 ← app+0x200");
        assert_eq!(s[2].label, "app+0x30");
    }

    #[test]
    fn lifetimes_keep_the_median_within_what_was_seen() {
        let mut p = profile(1, 1);
        let mut s = site("/bin/app+0x10", 4096, &[1.0]);
        s.lifetime.min_s = Some(0.18);
        s.lifetime.max_s = Some(0.188);
        s.lifetime.median_s = Some(0.201); // its bucket's upper bound
        p.sites = vec![s];
        assert_eq!(sites(&p)[0].lifetime.median_s, Some(0.188));
    }

    #[test]
    fn the_summary_says_what_measured_it() {
        let mut p = profile(2, 4);
        p.measurement.attributed_share = Some(0.9);
        p.sites = vec![site("/bin/app+0x10", 4096, &[1.0; 4])];
        let s = summary("app.profile.json", &p, None);
        assert_eq!(s.source, "damon");
        assert!(s.precision.contains("DAMON"));
        assert_eq!(s.attributed_share, Some(0.9));
        assert_eq!(s.intervals, 4);
        assert_eq!(s.tiers.len(), 2);
        assert_eq!(s.total_accesses, 4.0);
        for source in [
            Source::Perf,
            Source::Damon,
            Source::Proc,
            Source::Emulate,
            Source::None,
        ] {
            assert!(!precision_of(source).is_empty());
            assert!(!precision_brief(source).is_empty());
        }
    }

    #[test]
    fn tier_fractions_of_rows() {
        assert_eq!(tier_fractions(&[]), None);
        assert_eq!(tier_fractions(&[0, 0]), None);
        assert_eq!(tier_fractions(&[1, 3]), Some(vec![0.25, 0.75]));
    }
}
