//! The placement: which tier each allocation site's objects are born in.
//!
//! Written by `objtier advise`, applied by `objtier run --placement`: the library allocates
//! each listed site's objects from memory bound to its tier, up to the site's budget there
//! (the rest of its objects, or the tail of the one that crosses the budget, one tier down);
//! objects of unlisted sites go to the fallback tier (none: wherever first touch puts them). A
//! tier that fills falls back to the next slower one; an allocation never fails because of a
//! placement. docs/formats.md is the reference.

use crate::error::FormatError;
use crate::{Module, Program, SiteKind};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `"format"` of every placement.
pub const PLACEMENT_FORMAT: &str = "objtier-placement";
/// `"version"` this build writes and reads.
pub const PLACEMENT_VERSION: u32 = 1;

/// A whole placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Placement {
    pub format: String,
    pub version: u32,
    pub program: Program,
    /// The algorithm that computed it (`hotset`, `knapsack`, `multi-knapsack`, `bandwidth`,
    /// or `flexmalloc` for one imported).
    pub algorithm: String,
    pub computed_for: ComputedFor,
    /// Where objects of sites not listed here go: a tier, or null for where first touch puts
    /// them.
    pub fallback_tier: Option<u32>,
    /// The modules the frames name, with the build-ids the profile saw: a module whose
    /// build-id differs at run time is skipped (its sites are not placed) with a warning.
    #[serde(default)]
    pub modules: Vec<Module>,
    pub sites: Vec<PlacedSite>,
    /// Per-phase guidance (`objtier advise --phases`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<PhasePlan>,
}

/// What the placement was computed for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ComputedFor {
    /// The tiers, fastest first: the bytes of the program's objects each may hold, and the
    /// cost coefficients the algorithm weighed loads and stores with.
    pub tiers: Vec<PlannedTier>,
    /// The profiles it came from (as given on the command line) and their source.
    #[serde(default)]
    pub profiles: Vec<String>,
    #[serde(default)]
    pub source: String,
    /// The profiles' peak footprint.
    #[serde(default)]
    pub peak_footprint_bytes: u64,
}

/// One tier as the advice saw it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlannedTier {
    /// `null`: unbounded.
    pub capacity_bytes: Option<u64>,
    #[serde(default = "one")]
    pub load_cost: f64,
    #[serde(default = "one")]
    pub store_cost: f64,
    /// The NUMA nodes of the tier, where the advice was given them (`--tiers FILE`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<u32>,
}

fn one() -> f64 {
    1.0
}

/// One placed site.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlacedSite {
    #[serde(default)]
    pub kind: SiteKind,
    /// `MODULE+0xOFFSET`, innermost first, as in the profile; empty for a pseudo-site.
    pub frames: Vec<String>,
    /// The tier its objects are born in.
    pub tier: u32,
    /// Bytes of its live objects `tier` may hold at once; beyond them its objects go to the
    /// next slower tier (spill-over). Null: no limit.
    #[serde(default)]
    pub budget_bytes: Option<u64>,
    /// With per-phase guidance: its arena (an index into `phases.arenas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arena: Option<usize>,
    /// For people and reports: the profile's peak live bytes and accesses of the site.
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub accesses: f64,
}

/// Per-phase guidance (Effler et al. §3.2): the run is a sequence of phases, each site belongs
/// to one arena, and each arena has a tier per phase; at a phase change the daemon moves every
/// arena whose tier changes, whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PhasePlan {
    /// Per arena, its tier in each phase.
    pub arenas: Vec<Vec<u32>>,
    /// Per phase, the share of its accesses each listed site took (indexed like `sites`): what
    /// the daemon compares each interval's accesses with to tell which phase the run is in.
    pub centroids: Vec<Vec<f64>>,
    /// The phase a run starts in.
    #[serde(default)]
    pub initial: usize,
}

impl Placement {
    /// An empty placement of `program`.
    pub fn new(program: Program, algorithm: &str, computed_for: ComputedFor) -> Placement {
        Placement {
            format: PLACEMENT_FORMAT.to_string(),
            version: PLACEMENT_VERSION,
            program,
            algorithm: algorithm.to_string(),
            computed_for,
            fallback_tier: None,
            modules: Vec::new(),
            sites: Vec::new(),
            phases: None,
        }
    }

    /// Parses and checks a placement read from `file` (named in errors).
    pub fn from_json(file: &Path, text: &str) -> Result<Placement, FormatError> {
        crate::parse(file, text)
    }

    /// Reads and checks the placement in `file`.
    pub fn load(file: &Path) -> Result<Placement, FormatError> {
        crate::load(file)
    }

    pub fn to_json(&self) -> String {
        crate::to_json_lines(self, "sites")
    }

    /// Checks what the types cannot: tiers in range, frames named, phases consistent.
    pub fn check(&self, file: &Path) -> Result<(), FormatError> {
        crate::Versioned::check(self, file)
    }

    /// The build-id the placement expects of module `path`.
    pub fn build_id_of(&self, path: &str) -> Option<&str> {
        self.modules
            .iter()
            .find(|m| m.path == path)
            .and_then(|m| m.build_id.as_deref())
    }

    /// Bytes the placement plans in each tier (for people: budgets where set, else the
    /// profile's bytes).
    pub fn planned_bytes_by_tier(&self) -> Vec<u64> {
        let mut out = vec![0; self.computed_for.tiers.len().max(1)];
        for site in &self.sites {
            if let Some(slot) = out.get_mut(site.tier as usize) {
                *slot += site.budget_bytes.map_or(site.bytes, |b| b.min(site.bytes));
            }
        }
        out
    }
}

impl crate::Versioned for Placement {
    const FORMAT: &'static str = PLACEMENT_FORMAT;
    const VERSION: u32 = PLACEMENT_VERSION;
    const WHAT: &'static str = "placement";
    const MADE_BY: &'static str = "objtier advise";

    fn check(&self, file: &Path) -> Result<(), FormatError> {
        let bad = |problem: String| {
            FormatError::new(file, problem).hint(
                "the placement was changed by hand or written by a broken tool: make it again \
                 with `objtier advise`",
            )
        };
        let tiers = self.computed_for.tiers.len().max(1) as u32;
        if let Some(t) = self.fallback_tier.filter(|&t| t >= tiers) {
            return Err(bad(format!(
                "fallback_tier is {t}, but the placement has {tiers} tier(s)"
            )));
        }
        let arenas = self.phases.as_ref().map_or(0, |p| p.arenas.len());
        for (i, site) in self.sites.iter().enumerate() {
            crate::check_frames(site.kind, &site.frames)
                .map_err(|p| bad(format!("sites[{i}]: {p}")))?;
            if site.tier >= tiers {
                return Err(bad(format!(
                    "sites[{i}] is placed in tier {}, but the placement has {tiers} tier(s)",
                    site.tier
                )));
            }
            if let Some(a) = site.arena.filter(|&a| a >= arenas) {
                return Err(bad(format!("sites[{i}] names arena {a}, of {arenas}")));
            }
        }
        if let Some(phases) = &self.phases {
            let count = phases.centroids.len();
            if count == 0 || phases.initial >= count {
                return Err(bad(format!(
                    "phases: initial phase {} of {count}",
                    phases.initial
                )));
            }
            for (a, tiers_by_phase) in phases.arenas.iter().enumerate() {
                if tiers_by_phase.len() != count || tiers_by_phase.iter().any(|&t| t >= tiers) {
                    return Err(bad(format!(
                        "phases.arenas[{a}] must give a tier below {tiers} for each of the {count} phases"
                    )));
                }
            }
            if let Some(c) = phases
                .centroids
                .iter()
                .position(|c| c.len() != self.sites.len())
            {
                return Err(bad(format!(
                    "phases.centroids[{c}] has {} entries for {} sites",
                    phases.centroids[c].len(),
                    self.sites.len()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Placement {
        let mut p = Placement::new(
            Program::of_exe("/usr/bin/app", None),
            "hotset",
            ComputedFor {
                tiers: vec![
                    PlannedTier {
                        capacity_bytes: Some(16 << 30),
                        load_cost: 80.0,
                        store_cost: 80.0,
                        nodes: vec![],
                    },
                    PlannedTier {
                        capacity_bytes: None,
                        load_cost: 320.0,
                        store_cost: 320.0,
                        nodes: vec![],
                    },
                ],
                ..ComputedFor::default()
            },
        );
        p.sites.push(PlacedSite {
            frames: vec!["/usr/bin/app+0x10".into()],
            tier: 0,
            budget_bytes: Some(1 << 20),
            bytes: 2 << 20,
            accesses: 10.0,
            ..PlacedSite::default()
        });
        p.sites.push(PlacedSite {
            kind: SiteKind::SmallObjects,
            tier: 1,
            ..PlacedSite::default()
        });
        p
    }

    #[test]
    fn round_trips_and_checks() {
        let p = sample();
        let file = Path::new("app.placement.json");
        assert_eq!(Placement::from_json(file, &p.to_json()).unwrap(), p);
        let mut bad = p.clone();
        bad.sites[0].tier = 2;
        let e = Placement::from_json(file, &bad.to_json()).unwrap_err();
        assert!(
            e.to_string().contains("sites[0] is placed in tier 2"),
            "{e}"
        );
        let mut bad = p.clone();
        bad.fallback_tier = Some(5);
        assert!(Placement::from_json(file, &bad.to_json()).is_err());
        let mut bad = p.clone();
        bad.phases = Some(PhasePlan {
            arenas: vec![vec![0, 1]],
            centroids: vec![vec![1.0, 0.0]],
            initial: 0,
        });
        let e = Placement::from_json(file, &bad.to_json()).unwrap_err();
        assert!(e.to_string().contains("phases.arenas[0]"), "{e}");
        let e = Placement::from_json(
            file,
            &crate::profile::Profile::new(crate::Source::Damon, Program::default()).to_json(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("this is a profile, not a placement"),
            "{e}"
        );
    }
}
