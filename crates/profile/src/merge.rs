//! Merging profiles of one program: several inputs, the ranks of an MPI job, the nodes of a
//! cluster (`objtier profile merge`).
//!
//! Sites are matched by kind and frames. `sum` adds every count, as if the runs had shared one
//! machine at once (ranks on a node); `mean` averages them over the profiles, giving a typical
//! run (what a placement applied to each rank alone should be computed from). Timelines are
//! aligned by interval index, which is right for ranks started together and an approximation
//! for runs of different inputs. Profiles of different programs, or measured by different
//! sources (whose units differ), are refused.

use crate::error::FormatError;
use crate::profile::{Interval, Lifetime, Profile, Series, Site};
use crate::{Module, SiteKind};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// How counts combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MergeBy {
    Sum,
    Mean,
}

impl std::str::FromStr for MergeBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sum" => Ok(MergeBy::Sum),
            "mean" => Ok(MergeBy::Mean),
            _ => Err(format!("unknown merge {s:?}: use sum or mean")),
        }
    }
}

/// The merge of `profiles` (each with the file it came from, for errors and warnings), and
/// warnings for people (modules seen with different build-ids).
pub fn merge(
    profiles: &[(PathBuf, Profile)],
    by: MergeBy,
) -> Result<(Profile, Vec<String>), FormatError> {
    let Some((first_file, first)) = profiles.first() else {
        return Err(FormatError::new(
            std::path::Path::new("-"),
            "no profiles to merge",
        ));
    };
    for (file, p) in &profiles[1..] {
        if !p.program.same_program(&first.program) {
            return Err(FormatError::new(
                file,
                format!(
                    "this is a profile of {}, and {} is one of {}: merge profiles of one program",
                    p.program.name,
                    first_file.display(),
                    first.program.name
                ),
            ));
        }
        if p.source != first.source {
            return Err(FormatError::new(
                file,
                format!(
                    "measured with {}, and {} with {}: their accesses are in different units",
                    p.source.name(),
                    first_file.display(),
                    first.source.name()
                ),
            )
            .hint("merge profiles taken with the same --source"));
        }
    }
    let mut warnings = Vec::new();
    if let Some((file, p)) = profiles
        .iter()
        .find(|(_, p)| p.program.build_id != first.program.build_id)
    {
        warnings.push(format!(
            "{} is of another build of {} than {} (build-id {} against {}): their sites may not match",
            file.display(),
            first.program.name,
            first_file.display(),
            p.program.build_id.as_deref().unwrap_or("none"),
            first.program.build_id.as_deref().unwrap_or("none"),
        ));
    }
    let n = profiles.len() as f64;
    let scale = match by {
        MergeBy::Sum => 1.0,
        MergeBy::Mean => 1.0 / n,
    };
    let mut out = Profile::new(first.source, first.program.clone());
    out.command = first.command.clone();
    out.created_unix_s = first.created_unix_s;
    out.objtier_version = first.objtier_version.clone();
    out.tiers = first.tiers.clone();
    out.measurement = first.measurement.clone();
    out.measurement.sampled = profiles
        .iter()
        .map(|(_, p)| p.measurement.sampled)
        .sum::<f64>()
        * scale;
    out.measurement.attributed = profiles
        .iter()
        .map(|(_, p)| p.measurement.attributed)
        .sum::<f64>()
        * scale;
    out.measurement.page_moves = profiles
        .iter()
        .filter_map(|(_, p)| p.measurement.page_moves.clone())
        .reduce(|a, b| crate::profile::PageMovesFollowed {
            history_bytes_max: a.history_bytes_max.max(b.history_bytes_max),
            pages_not_followed: a.pages_not_followed.max(b.pages_not_followed),
        });
    out.measurement.attributed_share = (out.measurement.sampled > 0.0)
        .then(|| out.measurement.attributed / out.measurement.sampled);
    let durations = profiles.iter().map(|(_, p)| p.duration_s);
    out.duration_s = match by {
        MergeBy::Sum => durations.fold(0.0, f64::max),
        MergeBy::Mean => durations.sum::<f64>() / n,
    };
    out.peak_footprint_bytes = scaled(
        profiles.iter().map(|(_, p)| p.peak_footprint_bytes).sum(),
        scale,
    );
    out.intervals = merged_intervals(profiles.iter().map(|(_, p)| p.intervals.as_slice()));
    out.merged_runs = profiles.iter().map(|(_, p)| p.merged_runs).sum();
    out.merged_by = Some(by);
    // Page counts are the runs' pages together, whatever `by`: a mean page is no page.
    out.pages = crate::pages::merge(profiles.iter().map(|(_, p)| p.pages.as_slice()));
    let mut modules: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (file, p) in profiles {
        out.processes.extend(p.processes.iter().cloned());
        for m in &p.modules {
            match modules.get(&m.path) {
                Some(seen) if seen != &m.build_id => warnings.push(format!(
                    "{}: module {} has build-id {}, another profile's {}",
                    file.display(),
                    m.path,
                    m.build_id.as_deref().unwrap_or("none"),
                    seen.as_deref().unwrap_or("none")
                )),
                Some(_) => {}
                None => {
                    modules.insert(m.path.clone(), m.build_id.clone());
                }
            }
        }
    }
    out.modules = modules
        .into_iter()
        .map(|(path, build_id)| Module { path, build_id })
        .collect();
    // Sites in the order first seen, so that merging is deterministic.
    let mut index: HashMap<(SiteKind, Vec<String>), usize> = HashMap::new();
    let mut groups: Vec<Vec<&Site>> = Vec::new();
    for (_, p) in profiles {
        for site in &p.sites {
            let key = (site.kind, site.frames.clone());
            let i = *index.entry(key).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[i].push(site);
        }
    }
    out.sites = groups
        .iter()
        .map(|sites| merge_sites(sites, scale, out.intervals.len()))
        .collect();
    Ok((out, warnings))
}

fn scaled(value: u64, scale: f64) -> u64 {
    (value as f64 * scale).round() as u64
}

/// Interval `i` of the merge spans the mean of the profiles' interval `i`.
fn merged_intervals<'a>(timelines: impl Iterator<Item = &'a [Interval]>) -> Vec<Interval> {
    let mut sums: Vec<(f64, f64, u32)> = Vec::new();
    for timeline in timelines {
        for (i, interval) in timeline.iter().enumerate() {
            if sums.len() <= i {
                sums.push((0.0, 0.0, 0));
            }
            sums[i].0 += interval.start_s;
            sums[i].1 += interval.end_s;
            sums[i].2 += 1;
        }
    }
    sums.into_iter()
        .map(|(start, end, n)| Interval {
            start_s: start / n as f64,
            end_s: end / n as f64,
        })
        .collect()
}

fn sum_optional(mut values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values.try_fold(0.0, |acc, v| Some(acc + v?))
}

/// One interval of a merged series, summed over the sites.
#[derive(Default)]
struct Row {
    live_bytes: f64,
    accesses: f64,
    loads: Option<f64>,
    stores: Option<f64>,
    allocations: f64,
    tier_bytes: Vec<f64>,
    moves: crate::profile::PageMoves,
}

fn merge_sites(sites: &[&Site], scale: f64, intervals: usize) -> Site {
    let first = sites[0];
    let mut out = Site {
        kind: first.kind,
        frames: first.frames.clone(),
        symbols: sites
            .iter()
            .map(|s| &s.symbols)
            .find(|s| !s.is_empty())
            .cloned()
            .unwrap_or_default(),
        allocations: scaled(sites.iter().map(|s| s.allocations).sum(), scale),
        bytes_allocated: scaled(sites.iter().map(|s| s.bytes_allocated).sum(), scale),
        peak_live_bytes: scaled(sites.iter().map(|s| s.peak_live_bytes).sum(), scale),
        accesses: sites.iter().map(|s| s.accesses).sum::<f64>() * scale,
        loads: sum_optional(sites.iter().map(|s| s.loads)).map(|v| v * scale),
        stores: sum_optional(sites.iter().map(|s| s.stores)).map(|v| v * scale),
        weight: sum_optional(sites.iter().map(|s| s.weight)).map(|v| v * scale),
        memory_levels: crate::levels::merge(sites.iter().map(|s| &s.memory_levels), scale),
        memory_levels_by_tier: crate::levels::merge_by_tier(
            sites.iter().map(|s| &s.memory_levels_by_tier),
            scale,
        ),
        lifetime: merge_lifetimes(sites.iter().map(|s| &s.lifetime), scale),
        series: Series::default(),
    };
    let mut rows: BTreeMap<usize, Row> = BTreeMap::new();
    let with_loads = sites
        .iter()
        .all(|s| s.series.loads.is_some() || s.series.is_empty());
    let with_stores = sites
        .iter()
        .all(|s| s.series.stores.is_some() || s.series.is_empty());
    for site in sites {
        let s = &site.series;
        for row in 0..s.len() {
            let e = rows.entry(s.interval[row]).or_insert_with(|| Row {
                loads: with_loads.then_some(0.0),
                stores: with_stores.then_some(0.0),
                ..Row::default()
            });
            e.live_bytes += s.live_bytes[row] as f64;
            e.accesses += s.accesses[row];
            if let (Some(sum), Some(col)) = (e.loads.as_mut(), &s.loads) {
                *sum += col[row];
            }
            if let (Some(sum), Some(col)) = (e.stores.as_mut(), &s.stores) {
                *sum += col[row];
            }
            e.allocations += s.allocations[row] as f64;
            if let Some(tiers) = s.tier_bytes.as_ref().and_then(|c| c.get(row)) {
                if e.tier_bytes.len() < tiers.len() {
                    e.tier_bytes.resize(tiers.len(), 0.0);
                }
                for (sum, &b) in e.tier_bytes.iter_mut().zip(tiers) {
                    *sum += b as f64;
                }
            }
            e.moves.add(s.page_moves(row));
        }
    }
    let with_tiers = sites.iter().any(|s| s.series.tier_bytes.is_some());
    for (interval, row) in rows {
        if interval < intervals {
            out.series.push(
                interval,
                (row.live_bytes * scale).round() as u64,
                row.accesses * scale,
                row.loads.map(|v| v * scale),
                row.stores.map(|v| v * scale),
                (row.allocations * scale).round() as u64,
            );
            if with_tiers {
                out.series.set_last_tier_bytes(
                    row.tier_bytes
                        .iter()
                        .map(|b| (b * scale).round() as u64)
                        .collect(),
                );
            }
            let (promoted, demoted) = (
                scaled(row.moves.promoted, scale),
                scaled(row.moves.demoted, scale),
            );
            out.series
                .add_to_last_page_moves(crate::profile::PageMoves {
                    promoted,
                    demoted,
                    // Rounded apart, the part may not exceed the whole.
                    ping_pong: scaled(row.moves.ping_pong, scale).min(promoted + demoted),
                });
        }
    }
    out
}

fn merge_lifetimes<'a>(lifetimes: impl Iterator<Item = &'a Lifetime>, scale: f64) -> Lifetime {
    let mut out = Lifetime::default();
    let mut histogram: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
    let (mut freed, mut past, mut live) = (0u64, 0u64, 0u64);
    for l in lifetimes {
        freed += l.freed;
        past += l.past_one_interval;
        live += l.live_at_exit;
        out.min_s = min_option(out.min_s, l.min_s, f64::min);
        out.max_s = min_option(out.max_s, l.max_s, f64::max);
        for &(upper, count) in &l.histogram {
            histogram.entry(upper.to_bits()).or_insert((upper, 0)).1 += count;
        }
    }
    out.freed = scaled(freed, scale);
    out.past_one_interval = scaled(past, scale);
    out.live_at_exit = scaled(live, scale);
    let mut buckets: Vec<(f64, u64)> = histogram.into_values().collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    out.median_s = crate::profile::median_of_histogram(&buckets);
    out.histogram = buckets
        .into_iter()
        .map(|(upper, count)| (upper, scaled(count, scale)))
        .filter(|&(_, count)| count > 0)
        .collect();
    out
}

fn min_option(a: Option<f64>, b: Option<f64>, pick: fn(f64, f64) -> f64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(pick(a, b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Source;
    use crate::Program;

    fn profile(name: &str, accesses: f64, loads: Option<f64>) -> Profile {
        let mut p = Profile::new(
            Source::Perf,
            Program::of_exe(&format!("/usr/bin/{name}"), None),
        );
        p.intervals = vec![
            Interval {
                start_s: 0.0,
                end_s: 2.0,
            },
            Interval {
                start_s: 2.0,
                end_s: 4.0,
            },
        ];
        p.peak_footprint_bytes = 100;
        let mut site = Site {
            frames: vec![format!("/usr/bin/{name}+0x10")],
            allocations: 2,
            bytes_allocated: 20,
            peak_live_bytes: 10,
            accesses,
            loads,
            stores: loads.map(|l| accesses - l),
            lifetime: Lifetime {
                freed: 2,
                min_s: Some(0.5),
                max_s: Some(1.0),
                median_s: Some(0.5),
                histogram: vec![(0.5, 1), (1.0, 1)],
                ..Lifetime::default()
            },
            ..Site::default()
        };
        site.series
            .push(1, 10, accesses, loads, loads.map(|l| accesses - l), 2);
        p.sites.push(site);
        p
    }

    #[test]
    fn sums_and_means_match_sites_by_frames() {
        let a = (PathBuf::from("a.json"), profile("app", 10.0, Some(6.0)));
        let mut b = (PathBuf::from("b.json"), profile("app", 30.0, Some(10.0)));
        b.1.sites.push(Site {
            kind: SiteKind::SmallObjects,
            accesses: 4.0,
            ..Site::default()
        });
        let (sum, warnings) = merge(&[a.clone(), b.clone()], MergeBy::Sum).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(sum.sites.len(), 2);
        let s = &sum.sites[0];
        assert_eq!(
            (s.allocations, s.accesses, s.loads, s.stores),
            (4, 40.0, Some(16.0), Some(24.0))
        );
        assert_eq!(s.series.interval, vec![1]);
        assert_eq!(s.series.accesses, vec![40.0]);
        assert_eq!(s.lifetime.freed, 4);
        assert_eq!(s.lifetime.histogram, vec![(0.5, 2), (1.0, 2)]);
        assert_eq!(sum.peak_footprint_bytes, 200);
        assert_eq!(sum.merged_runs, 2);
        let (mean, _) = merge(&[a, b], MergeBy::Mean).unwrap();
        assert_eq!(mean.sites[0].accesses, 20.0);
        assert_eq!(mean.sites[0].allocations, 2);
        assert_eq!(mean.sites[1].accesses, 2.0);
        assert_eq!(mean.peak_footprint_bytes, 100);
        // The merge is itself a valid profile.
        Profile::from_json(std::path::Path::new("m.json"), &mean.to_json()).unwrap();
    }

    #[test]
    fn page_moves_and_memory_levels_add_up() {
        use crate::levels::LevelAccesses;
        use crate::profile::PageMoves;
        use std::collections::BTreeMap;
        let mut a = (PathBuf::from("a.json"), profile("app", 10.0, None));
        a.1.sites[0].series.add_to_last_page_moves(PageMoves {
            promoted: 3,
            demoted: 1,
            ping_pong: 1,
        });
        a.1.sites[0].memory_levels.insert(
            "ram".into(),
            LevelAccesses {
                accesses: 4.0,
                weight: 1000.0,
                ..LevelAccesses::default()
            },
        );
        a.1.sites[0].memory_levels_by_tier = vec![
            BTreeMap::new(),
            BTreeMap::from([("ram".to_string(), a.1.sites[0].memory_levels["ram"].clone())]),
        ];
        let mut b = (PathBuf::from("b.json"), profile("app", 30.0, None));
        b.1.sites[0].series.add_to_last_page_moves(PageMoves {
            promoted: 0,
            demoted: 2,
            ping_pong: 2,
        });
        let (sum, _) = merge(&[a.clone(), b.clone()], MergeBy::Sum).unwrap();
        let s = &sum.sites[0];
        assert_eq!(
            s.series.page_moves(0),
            PageMoves {
                promoted: 3,
                demoted: 3,
                ping_pong: 3
            }
        );
        assert_eq!(s.memory_levels["ram"].accesses, 4.0);
        assert_eq!(s.memory_levels_by_tier.len(), 2);
        assert_eq!(s.memory_levels_by_tier[1]["ram"].weight, 1000.0);
        let (mean, _) = merge(&[a, b], MergeBy::Mean).unwrap();
        let m = mean.sites[0].series.page_moves(0);
        assert!(m.ping_pong <= m.promoted + m.demoted, "{m:?}");
        assert_eq!(mean.sites[0].memory_levels["ram"].weight, 500.0);
        Profile::from_json(std::path::Path::new("m.json"), &mean.to_json()).unwrap();
    }

    #[test]
    fn unknown_loads_stay_unknown() {
        let a = (PathBuf::from("a.json"), profile("app", 10.0, Some(6.0)));
        let b = (PathBuf::from("b.json"), profile("app", 30.0, None));
        let (sum, _) = merge(&[a, b], MergeBy::Sum).unwrap();
        assert_eq!(sum.sites[0].loads, None);
        assert_eq!(sum.sites[0].series.loads, None);
    }

    #[test]
    fn refuses_other_programs_and_sources() {
        let a = (PathBuf::from("a.json"), profile("app", 1.0, None));
        let b = (PathBuf::from("b.json"), profile("other", 1.0, None));
        let e = merge(&[a.clone(), b], MergeBy::Sum).unwrap_err();
        assert!(
            e.to_string().contains("b.json: this is a profile of other"),
            "{e}"
        );
        let mut c = (PathBuf::from("c.json"), profile("app", 1.0, None));
        c.1.source = Source::Damon;
        let e = merge(&[a.clone(), c], MergeBy::Sum).unwrap_err();
        assert!(e.to_string().contains("different units"), "{e}");
        let mut d = (PathBuf::from("d.json"), profile("app", 1.0, None));
        d.1.program.build_id = Some("ff".into());
        let (_, warnings) = merge(&[a, d], MergeBy::Sum).unwrap();
        assert!(warnings[0].contains("another build of app"), "{warnings:?}");
        assert!(merge(&[], MergeBy::Sum).is_err());
    }
}
