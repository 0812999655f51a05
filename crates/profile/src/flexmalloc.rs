//! FlexMalloc's location files, both ways, so that ecoHMEM's users can bring their reports and
//! take ours.
//!
//! FlexMalloc (the run-time half of ecoHMEM) reads one call path per line, binary frames
//! ("BOM", ecoHMEM §VI) innermost first, then the allocator its objects go to:
//!
//! ```text
//! /usr/bin/lulesh2.0!004029df > /usr/bin/lulesh2.0!00402979 > /lib/libc.so.6!0002103a @ posix
//! ```
//!
//! `module!offset` is a file offset in the module, as objtier's `module+0xoffset` is, so the
//! frames translate one to one. Allocators name memory kinds (`posix` for DRAM,
//! `memkind/pmem`, `memkind/hbwmalloc`); [`AllocatorNames`] maps them to tiers. What the format
//! cannot say is left out of an export with a comment: pseudo-sites (the small-object
//! allocator's memory has no call path) and budgets (FlexMalloc places a site whole). Its
//! human-readable frames (`file.c:42`) cannot be matched without debug information and are
//! refused on import, with what to do.

use crate::error::FormatError;
use crate::placement::{ComputedFor, PlacedSite, Placement, PlannedTier};
use crate::{parse_frame, Program, SiteKind};
use std::path::Path;

/// Allocator name of each tier, fastest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocatorNames(pub Vec<String>);

impl AllocatorNames {
    /// ecoHMEM's names for `tiers` tiers: DRAM is `posix`, the slowest `memkind/pmem`, and a
    /// third, faster tier `memkind/hbwmalloc`.
    pub fn default_for(tiers: usize) -> AllocatorNames {
        let names: Vec<&str> = match tiers {
            0 | 1 => vec!["posix"],
            2 => vec!["posix", "memkind/pmem"],
            3 => vec!["memkind/hbwmalloc", "posix", "memkind/pmem"],
            _ => Vec::new(),
        };
        let mut names: Vec<String> = names.into_iter().map(String::from).collect();
        for t in names.len()..tiers {
            names.push(format!("tier{t}"));
        }
        AllocatorNames(names)
    }

    /// Parses `NAME=TIER,NAME=TIER...` (e.g. `posix=0,memkind/pmem=1`).
    pub fn parse(text: &str) -> Result<AllocatorNames, String> {
        let mut names: Vec<Option<String>> = Vec::new();
        for part in text.split(',').filter(|p| !p.is_empty()) {
            let (name, tier) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not NAME=TIER (e.g. posix=0)"))?;
            let tier: usize = tier
                .parse()
                .map_err(|_| format!("{tier:?} in {part:?} is not a tier number"))?;
            if tier >= 64 {
                return Err(format!("tier {tier} in {part:?}: at most 64 tiers"));
            }
            if names.len() <= tier {
                names.resize(tier + 1, None);
            }
            names[tier] = Some(name.to_string());
        }
        names
            .into_iter()
            .enumerate()
            .map(|(t, n)| n.ok_or_else(|| format!("no allocator is named for tier {t}")))
            .collect::<Result<_, _>>()
            .map(AllocatorNames)
    }

    fn tier_of(&self, name: &str) -> Option<u32> {
        self.0.iter().position(|n| n == name).map(|t| t as u32)
    }
}

/// `placement` as a FlexMalloc location file.
pub fn export(placement: &Placement, names: &AllocatorNames) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "# objtier placement of {} ({} algorithm), as FlexMalloc locations: module!offset frames, innermost first\n",
        placement.program.name, placement.algorithm
    ));
    for (t, tier) in placement.computed_for.tiers.iter().enumerate() {
        let name = names.0.get(t).map_or("?", String::as_str);
        match tier.capacity_bytes {
            Some(bytes) => out.push_str(&format!("# tier {t}: allocator {name}, {bytes} bytes\n")),
            None => out.push_str(&format!("# tier {t}: allocator {name}, unbounded\n")),
        }
    }
    for site in &placement.sites {
        let Some(name) = names.0.get(site.tier as usize) else {
            out.push_str(&format!(
                "# left out: a site in tier {}, which has no allocator name\n",
                site.tier
            ));
            continue;
        };
        if site.kind != SiteKind::Site {
            out.push_str(&format!(
                "# left out: {:?} pseudo-site (tier {}): FlexMalloc places call paths only\n",
                site.kind, site.tier
            ));
            continue;
        }
        if site.budget_bytes.is_some_and(|b| b < site.bytes) {
            out.push_str(&format!(
                "# the next site has {} of its {} bytes budgeted in tier {}; FlexMalloc places it whole\n",
                site.budget_bytes.unwrap_or(0),
                site.bytes,
                site.tier
            ));
        }
        let frames: Vec<String> = site
            .frames
            .iter()
            .filter_map(|f| parse_frame(f))
            .map(|(module, offset)| format!("{module}!{offset:08x}"))
            .collect();
        out.push_str(&format!("{} @ {name}\n", frames.join(" > ")));
    }
    out
}

/// A placement of `program` from FlexMalloc location text read from `file`.
pub fn import(
    file: &Path,
    text: &str,
    names: &AllocatorNames,
    program: Program,
) -> Result<Placement, FormatError> {
    let tiers = names.0.len().max(1);
    let computed_for = ComputedFor {
        tiers: (0..tiers)
            .map(|t| PlannedTier {
                capacity_bytes: None,
                load_cost: 1.0 + t as f64,
                store_cost: 1.0 + t as f64,
                nodes: Vec::new(),
            })
            .collect(),
        profiles: vec![file.display().to_string()],
        source: "flexmalloc".into(),
        peak_footprint_bytes: 0,
    };
    let mut placement = Placement::new(program, "flexmalloc", computed_for);
    for (i, line) in text.lines().enumerate() {
        let at = |column: usize| (i + 1, column);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let error = |column: usize, problem: String, hint: &str| {
            let (l, c) = at(column);
            FormatError::new(file, problem).at(l, c).hint(hint)
        };
        let Some((path, allocator)) = line.rsplit_once('@') else {
            return Err(error(
                1,
                "no \"@ ALLOCATOR\" at the end of the line".into(),
                "each line is FRAME > FRAME ... @ ALLOCATOR",
            ));
        };
        let allocator = allocator.trim();
        let tier = names.tier_of(allocator).ok_or_else(|| {
            error(
                line.len() - allocator.len() + 1,
                format!("allocator {allocator:?} is not one of {:?}", names.0),
                "name each allocator's tier with --flexmalloc-tiers NAME=TIER,...",
            )
        })?;
        let mut frames = Vec::new();
        for frame in path.split('>').map(str::trim) {
            let column = line.find(frame).unwrap_or(0) + 1;
            let Some((module, offset)) = frame.rsplit_once('!') else {
                let hint = if frame.contains(':') {
                    "this is a source-location frame (file:line), which objtier cannot match \
                     without debug information: make the report with binary frames \
                     (module!offset, ecoHMEM's BOM format)"
                } else {
                    "frames are module!hexoffset"
                };
                return Err(error(
                    column,
                    format!("frame {frame:?} is not module!offset"),
                    hint,
                ));
            };
            let offset =
                u64::from_str_radix(offset.trim_start_matches("0x"), 16).map_err(|_| {
                    error(
                        column,
                        format!("offset {offset:?} is not hexadecimal"),
                        "frames are module!hexoffset",
                    )
                })?;
            if module.is_empty() {
                return Err(error(
                    column,
                    format!("frame {frame:?} names no module"),
                    "frames are module!hexoffset",
                ));
            }
            frames.push(format!("{module}+{offset:#x}"));
        }
        placement.sites.push(PlacedSite {
            kind: SiteKind::Site,
            frames,
            tier,
            ..PlacedSite::default()
        });
    }
    Ok(placement)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_flexmalloc() {
        let names = AllocatorNames::default_for(2);
        let text = "# a comment\n\
            /usr/bin/lulesh2.0!004029df > /usr/bin/lulesh2.0!00402979 > /lib/libc.so.6!0002103a @ posix\n\
            \n\
            /usr/bin/lulesh2.0!00402979 @ memkind/pmem\n";
        let p = import(
            Path::new("l.txt"),
            text,
            &names,
            Program::of_exe("/usr/bin/lulesh2.0", None),
        )
        .unwrap();
        assert_eq!(p.sites.len(), 2);
        assert_eq!(p.sites[0].frames[0], "/usr/bin/lulesh2.0+0x4029df");
        assert_eq!(p.sites[0].tier, 0);
        assert_eq!(p.sites[1].tier, 1);
        Placement::from_json(Path::new("p.json"), &p.to_json()).unwrap();
        let back = export(&p, &names);
        let lines: Vec<&str> = back.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            vec![
                "/usr/bin/lulesh2.0!004029df > /usr/bin/lulesh2.0!00402979 > /lib/libc.so.6!0002103a @ posix",
                "/usr/bin/lulesh2.0!00402979 @ memkind/pmem"
            ]
        );
    }

    #[test]
    fn exports_say_what_they_leave_out() {
        let names = AllocatorNames::default_for(2);
        let mut p = import(
            Path::new("l.txt"),
            "/a!10 @ posix\n",
            &names,
            Program::default(),
        )
        .unwrap();
        p.sites[0].budget_bytes = Some(1);
        p.sites[0].bytes = 10;
        p.sites.push(PlacedSite {
            kind: SiteKind::SmallObjects,
            tier: 1,
            ..PlacedSite::default()
        });
        let text = export(&p, &names);
        assert!(text.contains("FlexMalloc places it whole"), "{text}");
        assert!(text.contains("left out: SmallObjects"), "{text}");
    }

    #[test]
    fn bad_lines_say_where() {
        let names = AllocatorNames::default_for(2);
        let e = import(
            Path::new("l.txt"),
            "\n/a!10 @ dram\n",
            &names,
            Program::default(),
        )
        .unwrap_err();
        assert_eq!(e.at, Some((2, 9)));
        assert!(e.to_string().contains("--flexmalloc-tiers"), "{e}");
        let e = import(
            Path::new("l.txt"),
            "main.c:42 > libc-start.c:342 @ posix\n",
            &names,
            Program::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("source-location frame"), "{e}");
        let e = import(
            Path::new("l.txt"),
            "/a!zz @ posix\n",
            &names,
            Program::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("not hexadecimal"), "{e}");
        assert!(import(Path::new("l.txt"), "/a!10\n", &names, Program::default()).is_err());
    }

    #[test]
    fn allocator_names_parse() {
        assert_eq!(
            AllocatorNames::parse("memkind/pmem=1,posix=0").unwrap(),
            AllocatorNames(vec!["posix".into(), "memkind/pmem".into()])
        );
        assert!(AllocatorNames::parse("posix=1")
            .unwrap_err()
            .contains("tier 0"));
        assert!(AllocatorNames::parse("posix").is_err());
        assert_eq!(AllocatorNames::default_for(3).0[0], "memkind/hbwmalloc");
        assert_eq!(AllocatorNames::default_for(5).0[4], "tier4");
    }
}
