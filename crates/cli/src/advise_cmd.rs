//! `objtier advise`: a placement from one or more profiles (merged), for the tiers given
//! (`--fast-capacity` for the common two, `--tiers FILE` for any number, with load and store
//! costs), by one of the advise algorithms (`objtier_policy::advise`); it prints, per tier,
//! the bytes planned and the share of the profile's accesses that tier would serve, for every
//! algorithm side by side, and writes the chosen one's placement. FlexMalloc's location files
//! can be read instead of a profile and written beside the placement.

use anyhow::{bail, Context};
use clap::Args;
use objtier_policy::advise::{
    self, phases, Advice, Algorithm, IntervalDemand, SiteDemand, TierOutcome, TierSpec, Timeline,
};
use objtier_profile::flexmalloc::{self, AllocatorNames};
use objtier_profile::merge::{merge, MergeBy};
use objtier_profile::placement::{ComputedFor, PhasePlan, PlacedSite, PlannedTier};
use objtier_profile::{Placement, Profile, Program, Site, SiteKind};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The algorithm `objtier advise` uses unless told otherwise (docs/evaluation.md says why).
pub const DEFAULT_ALGORITHM: Algorithm = Algorithm::Hotset;

#[derive(Args)]
pub struct AdviseArgs {
    /// Profiles of one program (`objtier profile`); several are merged (--merge).
    #[arg(required_unless_present = "import_flexmalloc")]
    profiles: Vec<PathBuf>,
    /// The fast tier's capacity for the program's objects: a size (16G) or a share of the
    /// profile's peak footprint (25%). The other tier is unbounded.
    #[arg(long, conflicts_with = "tiers", value_parser = parse_capacity)]
    fast_capacity: Option<Capacity>,
    /// The tiers, fastest first, as a TOML file: per `[[tier]]` its capacity (a size or a share
    /// of the footprint; none for unbounded), load_cost, store_cost and nodes (default costs:
    /// the kernel's HMAT latencies where it has them).
    #[arg(long, value_name = "FILE")]
    tiers: Option<PathBuf>,
    /// hotset, knapsack, multi-knapsack or bandwidth [default: hotset].
    #[arg(long)]
    algorithm: Option<Algorithm>,
    /// Per-phase guidance: split the run into up to N phases by which sites it accesses, and
    /// give each group of sites a tier per phase.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    phases: Option<u32>,
    /// How several profiles combine: mean (a typical run) or sum [default: mean].
    #[arg(long, default_value = "mean")]
    merge: MergeBy,
    /// Where objects of sites the profile did not see accessed go: a tier, or first-touch
    /// (wherever the kernel puts them: the fast tier while it has room) [default: the slowest
    /// tier, so that they do not take the room the profile's hot sites will want].
    #[arg(long, value_name = "TIER|first-touch", value_parser = parse_fallback)]
    fallback_tier: Option<Fallback>,
    /// Where to write the placement [default: PROGRAM.placement.json].
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Print what every algorithm would give as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the placement as a FlexMalloc location file (ecoHMEM's `module!offset ... @
    /// allocator` lines).
    #[arg(long, value_name = "FILE")]
    export_flexmalloc: Option<PathBuf>,
    /// Make the placement from a FlexMalloc location file instead of a profile.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["fast_capacity", "tiers", "phases"])]
    import_flexmalloc: Option<PathBuf>,
    /// FlexMalloc allocator names of the tiers, NAME=TIER,... [default: posix=0,memkind/pmem=1].
    #[arg(long, value_name = "NAME=TIER,...")]
    flexmalloc_tiers: Option<String>,
    /// With --import-flexmalloc: the program's executable (the placement applies to it).
    #[arg(long, value_name = "EXE")]
    program: Option<String>,
}

/// A capacity: bytes, or a share of the profile's peak footprint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Capacity {
    Bytes(u64),
    Share(f64),
}

fn parse_capacity(text: &str) -> Result<Capacity, String> {
    match text.trim().strip_suffix('%') {
        Some(pct) => match pct.trim().parse::<f64>() {
            Ok(p) if p > 0.0 && p <= 100.0 => Ok(Capacity::Share(p / 100.0)),
            _ => Err(format!(
                "{text:?}: a share is a percentage above 0 and at most 100 (e.g. 25%)"
            )),
        },
        None => objtier_policy::units::parse_size(text).map(Capacity::Bytes),
    }
}

impl Capacity {
    fn bytes(self, footprint: u64) -> u64 {
        match self {
            Capacity::Bytes(b) => b,
            Capacity::Share(s) => (footprint as f64 * s) as u64,
        }
    }
}

/// Where unlisted sites go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fallback {
    Tier(u32),
    FirstTouch,
}

fn parse_fallback(text: &str) -> Result<Fallback, String> {
    match text {
        "first-touch" | "none" => Ok(Fallback::FirstTouch),
        t => t
            .parse()
            .map(Fallback::Tier)
            .map_err(|_| format!("{t:?}: give a tier number or first-touch")),
    }
}

/// `--tiers FILE`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TiersFile {
    tier: Vec<TierEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TierEntry {
    #[serde(default)]
    nodes: Vec<u32>,
    capacity: Option<String>,
    load_cost: Option<f64>,
    store_cost: Option<f64>,
}

pub fn run(args: AdviseArgs) -> anyhow::Result<ExitCode> {
    if let Some(file) = &args.import_flexmalloc {
        return import(&args, file);
    }
    let profile = load_profiles(&args.profiles, args.merge)?;
    let footprint = profile.peak_footprint_bytes;
    let planned_tiers = tiers(&args, &profile)?;
    let specs: Vec<TierSpec> = planned_tiers
        .iter()
        .map(|t| TierSpec {
            capacity_bytes: t.capacity_bytes.unwrap_or(u64::MAX),
            load_cost: t.load_cost,
            store_cost: t.store_cost,
        })
        .collect();
    let (placeable, demands) = demands(&profile);
    // Sites the profile saw no access to are cold by its measure: they go to the slowest tier
    // and take no part in the advice.
    let (accessed, unaccessed): (Vec<usize>, Vec<usize>) =
        (0..demands.len()).partition(|&i| demands[i].accesses > 0.0);
    let cold_bytes: u64 = unaccessed.iter().map(|&i| demands[i].bytes).sum();
    let accessed_demands: Vec<SiteDemand> = accessed.iter().map(|&i| demands[i].clone()).collect();
    let timeline = Timeline {
        interval_seconds: profile.intervals.iter().map(|i| i.seconds()).collect(),
    };
    let total: f64 = profile.total_accesses();
    let unplaceable = total - demands.iter().map(|d| d.accesses).sum::<f64>();
    let chosen = args.algorithm.unwrap_or(DEFAULT_ALGORITHM);
    let outcomes: Vec<(Algorithm, Vec<TierOutcome>)> = Algorithm::ALL
        .iter()
        .map(|&a| {
            let advice = advise::advise(a, &accessed_demands, &specs, &timeline);
            let mut outcome = advise::evaluate(&accessed_demands, &specs, &advice);
            if let Some(slowest) = outcome.last_mut() {
                slowest.bytes += cold_bytes;
            }
            (a, scaled(outcome, total))
        })
        .collect();
    let advice = advise::advise(chosen, &accessed_demands, &specs, &timeline);
    let mut placement = Placement::new(
        profile.program.clone(),
        chosen.name(),
        ComputedFor {
            tiers: planned_tiers.clone(),
            profiles: args
                .profiles
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            source: profile.source.name().to_string(),
            peak_footprint_bytes: footprint,
        },
    );
    placement.modules = profile.modules.clone();
    placement.fallback_tier = match args.fallback_tier {
        Some(Fallback::Tier(t)) if (t as usize) < specs.len() => Some(t),
        Some(Fallback::Tier(t)) => bail!(
            "--fallback-tier {t}: the placement has {} tier(s), 0 to {}",
            specs.len(),
            specs.len() - 1
        ),
        Some(Fallback::FirstTouch) | None => None,
    };
    placement.sites = placed_sites(
        &placeable,
        &demands,
        &accessed,
        &unaccessed,
        &advice,
        (specs.len() - 1) as u32,
    );
    let mut phase_summary = None;
    if let Some(n) = args.phases {
        // Over the accessed sites only, the placement's.
        let found = phases::segment(&accessed_demands, &timeline, n as usize);
        let per_phase = phases::per_phase(chosen, &accessed_demands, &specs, &timeline, &found);
        phase_summary = Some(apply_phases(&mut placement, &found, &per_phase));
    }
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.placement.json", profile.program.name)));
    objtier_profile::write_text(&output, &placement.to_json())
        .with_context(|| format!("cannot write the placement {}", output.display()))?;
    if let Some(file) = &args.export_flexmalloc {
        let names = allocator_names(&args, specs.len())?;
        objtier_profile::write_text(file, &flexmalloc::export(&placement, &names))
            .with_context(|| format!("cannot write {}", file.display()))?;
    }
    if args.json {
        let algorithms: serde_json::Map<String, serde_json::Value> = outcomes
            .iter()
            .map(|(a, o)| {
                (
                    a.name().to_string(),
                    serde_json::json!(o
                        .iter()
                        .enumerate()
                        .map(|(t, o)| serde_json::json!({
                            "tier": t, "bytes": o.bytes, "accesses": o.accesses, "share": o.share
                        }))
                        .collect::<Vec<_>>()),
                )
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "placement": output,
                "program": profile.program.name,
                "algorithm": chosen.name(),
                "peak_footprint_bytes": footprint,
                "tiers": planned_tiers,
                "sites": placement.sites.len(),
                "unaccessed_sites": unaccessed.len(),
                "unplaceable_share": if total > 0.0 { unplaceable / total } else { 0.0 },
                "algorithms": algorithms,
                "phases": phase_summary,
            }))?
        );
    } else {
        print_table(
            &profile,
            &planned_tiers,
            chosen,
            &outcomes,
            total,
            unplaceable,
            &output,
        );
        if !unaccessed.is_empty() {
            println!(
                "  {} site(s) the profile saw no access to ({}) go to the slowest tier; sites it did not see {}",
                unaccessed.len(),
                mib(cold_bytes),
                placement
                    .fallback_tier
                    .map_or("are left to first touch".to_string(), |t| format!("go to tier {t}"))
            );
        }
        if let Some(summary) = phase_summary {
            println!("{summary}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The profiles, merged when there are several.
fn load_profiles(files: &[PathBuf], by: MergeBy) -> anyhow::Result<Profile> {
    let mut profiles = files
        .iter()
        .map(|f| Ok((f.clone(), Profile::load(f)?)))
        .collect::<Result<Vec<_>, objtier_profile::FormatError>>()?;
    if profiles.len() == 1 {
        return Ok(profiles.remove(0).1);
    }
    let (merged, warnings) = merge(&profiles, by)?;
    for w in warnings {
        eprintln!("objtier: warning: {w}");
    }
    Ok(merged)
}

/// The tiers the advice fills, fastest first.
fn tiers(args: &AdviseArgs, profile: &Profile) -> anyhow::Result<Vec<PlannedTier>> {
    let footprint = profile.peak_footprint_bytes;
    let hmat = |tier: usize, nodes: &[u32]| -> (Option<f64>, Option<f64>) {
        // The profile's own tiers first (the machine it was taken on), else this machine's.
        if nodes.is_empty() {
            if let Some(t) = profile.tiers.get(tier) {
                if t.read_latency_ns.is_some() {
                    return (
                        t.read_latency_ns.map(|l| l as f64),
                        t.write_latency_ns.or(t.read_latency_ns).map(|l| l as f64),
                    );
                }
            }
        }
        let node = nodes.first().copied().or_else(|| {
            profile
                .tiers
                .get(tier)
                .and_then(|t| t.nodes.first().copied())
        });
        let read = |what: &str| -> Option<f64> {
            let node = node?;
            std::fs::read_to_string(format!(
                "/sys/devices/system/node/node{node}/access0/initiators/{what}_latency"
            ))
            .ok()?
            .trim()
            .parse()
            .ok()
        };
        let r = read("read");
        (r, read("write").or(r))
    };
    // Without latencies: each tier a few times slower than the one before (CXL against DRAM).
    let default_cost = |tier: usize| 4f64.powi(tier as i32);
    if let Some(file) = &args.tiers {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the tiers file {}", file.display()))?;
        let parsed: TiersFile = toml::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{}: {e}; it lists [[tier]] tables, fastest first, each with capacity = \"16G\" or \
                 \"25%\" (none for unbounded), load_cost, store_cost and nodes",
                file.display()
            )
        })?;
        if parsed.tier.len() < 2 {
            bail!("{}: give at least two tiers", file.display());
        }
        return parsed
            .tier
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let capacity = t
                    .capacity
                    .as_deref()
                    .map(|c| parse_capacity(c).map(|c| c.bytes(footprint)))
                    .transpose()
                    .map_err(|e| anyhow::anyhow!("{}: tier {i}: {e}", file.display()))?;
                let (read, write) = hmat(i, &t.nodes);
                Ok(PlannedTier {
                    capacity_bytes: capacity,
                    load_cost: t.load_cost.or(read).unwrap_or_else(|| default_cost(i)),
                    store_cost: t.store_cost.or(write).unwrap_or_else(|| default_cost(i)),
                    nodes: t.nodes.clone(),
                })
            })
            .collect();
    }
    let Some(capacity) = args.fast_capacity else {
        bail!(
            "say how much fast memory the program gets: --fast-capacity SIZE (e.g. 16G) or \
             PCT% of the profile's peak footprint ({:.1} MiB), or --tiers FILE for more tiers",
            footprint as f64 / (1 << 20) as f64
        );
    };
    Ok((0..2)
        .map(|i| {
            let (read, write) = hmat(i, &[]);
            PlannedTier {
                capacity_bytes: (i == 0).then(|| capacity.bytes(footprint)),
                load_cost: read.unwrap_or_else(|| default_cost(i)),
                store_cost: write.unwrap_or_else(|| default_cost(i)),
                nodes: Vec::new(),
            }
        })
        .collect())
}

/// The profile's placeable sites (allocation sites, and the small-object allocator's memory;
/// objects of unknown site cannot be placed), and each as the advisor sees it.
pub(crate) fn demands(profile: &Profile) -> (Vec<&Site>, Vec<SiteDemand>) {
    let placeable: Vec<&Site> = profile
        .sites
        .iter()
        .filter(|s| s.kind != SiteKind::Unknown && (s.peak_live_bytes > 0 || s.accesses > 0.0))
        .collect();
    let demands = placeable
        .iter()
        .map(|s| SiteDemand {
            bytes: s.peak_live_bytes,
            accesses: s.accesses,
            loads: s.loads,
            stores: s.stores,
            allocations: s.allocations,
            series: (0..s.series.len())
                .map(|row| IntervalDemand {
                    interval: s.series.interval[row],
                    live_bytes: s.series.live_bytes[row],
                    accesses: s.series.accesses[row],
                    loads: s.series.loads.as_ref().map(|c| c[row]),
                    stores: s.series.stores.as_ref().map(|c| c[row]),
                    allocations: s.series.allocations[row],
                })
                .collect(),
        })
        .collect();
    (placeable, demands)
}

/// Outcomes as shares of *all* the profile's accesses (the unplaceable ones included).
fn scaled(mut outcomes: Vec<TierOutcome>, total: f64) -> Vec<TierOutcome> {
    for o in &mut outcomes {
        o.share = if total > 0.0 { o.accesses / total } else { 0.0 };
    }
    outcomes
}

/// The placement's sites: each accessed site where the advice put it, then each site the
/// profile saw no access to in the slowest tier (an arena of phases covers the first only).
fn placed_sites(
    sites: &[&Site],
    demands: &[SiteDemand],
    accessed: &[usize],
    unaccessed: &[usize],
    advice: &Advice,
    slowest: u32,
) -> Vec<PlacedSite> {
    let site = |i: usize, tier: u32, budget_bytes: Option<u64>| PlacedSite {
        kind: sites[i].kind,
        frames: sites[i].frames.clone(),
        tier,
        budget_bytes,
        arena: None,
        bytes: demands[i].bytes,
        accesses: demands[i].accesses,
    };
    let placed = accessed.iter().zip(&advice.sites).map(|(&i, placed)| {
        let budget = (placed.tier_bytes < demands[i].bytes).then_some(placed.tier_bytes);
        site(i, placed.tier as u32, budget)
    });
    placed
        .chain(unaccessed.iter().map(|&i| site(i, slowest, None)))
        .collect()
}

/// Puts per-phase guidance into `placement`: arenas, each site's arena and its tier in the
/// first phase; returns a line for people.
fn apply_phases(
    placement: &mut Placement,
    found: &phases::Phases,
    per_phase: &phases::PhaseAdvice,
) -> String {
    let initial = found.interval_phase.first().copied().unwrap_or(0);
    let arenas: Vec<Vec<u32>> = per_phase
        .arenas
        .iter()
        .map(|tiers| tiers.iter().map(|&t| t as u32).collect())
        .collect();
    for (site, &arena) in placement.sites.iter_mut().zip(&per_phase.site_arena) {
        site.arena = Some(arena);
        if let Some(&tier) = arenas.get(arena).and_then(|a| a.get(initial)) {
            site.tier = tier;
        }
        // An arena moves whole at a phase change: no budgets.
        site.budget_bytes = None;
    }
    let count = found.centroids.len().max(1);
    let changes = found
        .interval_phase
        .windows(2)
        .filter(|w| w[0] != w[1])
        .count();
    if arenas.iter().all(|a| a.len() == count) && !found.centroids.is_empty() {
        placement.phases = Some(PhasePlan {
            arenas,
            centroids: found.centroids.clone(),
            initial,
        });
    }
    format!(
        "phases: {count} found ({changes} change(s) over {} intervals), {} arena(s)",
        found.interval_phase.len(),
        per_phase.arenas.len()
    )
}

fn allocator_names(args: &AdviseArgs, tiers: usize) -> anyhow::Result<AllocatorNames> {
    match &args.flexmalloc_tiers {
        Some(text) => {
            AllocatorNames::parse(text).map_err(|e| anyhow::anyhow!("--flexmalloc-tiers: {e}"))
        }
        None => Ok(AllocatorNames::default_for(tiers)),
    }
}

fn import(args: &AdviseArgs, file: &Path) -> anyhow::Result<ExitCode> {
    let names = allocator_names(args, 2)?;
    let text = objtier_profile::read_text(file, "FlexMalloc location file")?;
    let program = args
        .program
        .as_deref()
        .map(|exe| {
            Program::of_exe(
                exe,
                objtier_sys::elf::build_id(Path::new(exe)).ok().flatten(),
            )
        })
        .unwrap_or_default();
    let mut placement = flexmalloc::import(file, &text, &names, program)?;
    placement.fallback_tier = match args.fallback_tier {
        Some(Fallback::Tier(t)) => Some(t),
        _ => None,
    };
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("flexmalloc.placement.json"));
    Placement::from_json(&output, &placement.to_json())?;
    objtier_profile::write_text(&output, &placement.to_json())
        .with_context(|| format!("cannot write {}", output.display()))?;
    if placement.program.name.is_empty() {
        eprintln!(
            "objtier: note: no --program given: the placement applies to every process it is \
             given to"
        );
    }
    println!(
        "{} FlexMalloc location(s) of {} read into {} (tiers: {})",
        placement.sites.len(),
        file.display(),
        output.display(),
        names.0.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

fn print_table(
    profile: &Profile,
    tiers: &[PlannedTier],
    chosen: Algorithm,
    outcomes: &[(Algorithm, Vec<TierOutcome>)],
    total: f64,
    unplaceable: f64,
    output: &Path,
) {
    let capacities: Vec<String> = tiers
        .iter()
        .enumerate()
        .map(|(t, tier)| {
            format!(
                "tier {t} {}",
                tier.capacity_bytes.map_or("unbounded".to_string(), mib)
            )
        })
        .collect();
    println!(
        "placement of {} by {} (peak footprint {}; {}): {}",
        profile.program.name,
        chosen.name(),
        mib(profile.peak_footprint_bytes),
        capacities.join(", "),
        output.display()
    );
    let mut header = format!("  {:<16}", "algorithm");
    for t in 0..tiers.len() {
        header.push_str(&format!(
            " {:>14} {:>8}",
            format!("tier {t} bytes"),
            "accesses"
        ));
    }
    println!("{header}");
    for (a, o) in outcomes {
        let mark = if *a == chosen { " *" } else { "" };
        let mut line = format!("  {:<16}", format!("{}{mark}", a.name()));
        for tier in o {
            line.push_str(&format!(
                " {:>14} {:>7.1}%",
                mib(tier.bytes),
                100.0 * tier.share
            ));
        }
        println!("{line}");
    }
    if total > 0.0 && unplaceable > 0.0 {
        println!(
            "  objects of unknown sites (not placeable): {:.1} % of the accesses",
            100.0 * unplaceable / total
        );
    }
    if total == 0.0 {
        println!(
            "  the profile has no accesses (source {}): every algorithm can only guess; profile \
             with an access source (see `objtier doctor`)",
            profile.source.name()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_and_fallbacks_parse() {
        assert_eq!(parse_capacity("16G"), Ok(Capacity::Bytes(16 << 30)));
        assert_eq!(parse_capacity("25%"), Ok(Capacity::Share(0.25)));
        assert!(parse_capacity("0%").is_err());
        assert!(parse_capacity("150%").is_err());
        assert!(parse_capacity("lots").is_err());
        assert_eq!(Capacity::Share(0.5).bytes(100), 50);
        assert_eq!(parse_fallback("1"), Ok(Fallback::Tier(1)));
        assert_eq!(parse_fallback("first-touch"), Ok(Fallback::FirstTouch));
        assert!(parse_fallback("slow").is_err());
    }
}
