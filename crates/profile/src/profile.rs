//! The profile: what one run (or several, merged) did per allocation site.
//!
//! Written by `objtier profile` (the daemon records it), read by `objtier advise`, `objtier
//! report` and scripts. Independent of ASLR and pids: sites are named by their call paths as
//! `module+0xoffset` frames (offsets into the module's file, as `/proc/PID/maps` gives them),
//! and times are seconds since the profile began. docs/formats.md is the reference; the
//! contract scripts may rely on is marked there.

use crate::error::FormatError;
use crate::{Module, Program, SiteKind};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `"format"` of every profile.
pub const PROFILE_FORMAT: &str = "objtier-profile";
/// `"version"` this build writes and reads.
pub const PROFILE_VERSION: u32 = 1;

/// Where the accesses came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// PMU address sampling (PEBS, IBS, SPE) or a perf software event.
    Perf,
    /// DAMON's page access bits.
    Damon,
    /// Page references through `/proc`.
    Proc,
    /// An emulated cache: every load and store, exactly (`objtier profile --source emulate`).
    Emulate,
    /// No access source: allocations and lifetimes only.
    None,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Perf => "perf",
            Source::Damon => "damon",
            Source::Proc => "proc",
            Source::Emulate => "emulate",
            Source::None => "none",
        }
    }
}

/// A whole profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Profile {
    pub format: String,
    pub version: u32,
    pub source: Source,
    pub program: Program,
    /// The command that was profiled, as given.
    #[serde(default)]
    pub command: Vec<String>,
    /// When the profile was taken (Unix time).
    #[serde(default)]
    pub created_unix_s: f64,
    /// The objtier that wrote it.
    #[serde(default)]
    pub objtier_version: String,
    pub measurement: Measurement,
    /// From the first process's attach to the last one's exit.
    pub duration_s: f64,
    /// The most bytes the profiled processes held in tracked objects and small-object blocks
    /// at once (all processes together): what "50 % of the footprint" is a share of.
    pub peak_footprint_bytes: u64,
    /// The machine's tiers while profiling, fastest first.
    #[serde(default)]
    pub tiers: Vec<TierInfo>,
    /// Every module a site's frame names, with its build-id.
    #[serde(default)]
    pub modules: Vec<Module>,
    /// The processes the profile covers.
    #[serde(default)]
    pub processes: Vec<ProcessInfo>,
    /// The timeline: the daemon's intervals while the profile was taken.
    #[serde(default)]
    pub intervals: Vec<Interval>,
    pub sites: Vec<Site>,
    /// Page detail per site, where the source saw every access (`emulate`; see
    /// [`crate::pages`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pages: Vec<crate::pages::SitePages>,
    /// How many profiles were merged into this one (1 for a profile of one run), and how.
    #[serde(default = "one")]
    pub merged_runs: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_by: Option<crate::merge::MergeBy>,
}

fn one() -> u32 {
    1
}

/// How the accesses were measured, and how much of them could be attributed to objects.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Measurement {
    /// The source as the daemon described it (event, intervals).
    #[serde(default)]
    pub description: String,
    /// What one unit of `accesses` is (e.g. "sampled page accesses", "samples").
    #[serde(default)]
    pub access_unit: String,
    /// Whether `loads` and `stores` are told apart.
    #[serde(default)]
    pub loads_and_stores: bool,
    /// What `weight` sums (e.g. "latency cycles"), where the source has a weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_unit: Option<String>,
    /// Everything the source reported for the profiled processes, and the part of it that fell
    /// on their tracked objects; `attributed_share` is the second over the first.
    #[serde(default)]
    pub sampled: f64,
    #[serde(default)]
    pub attributed: f64,
    #[serde(default)]
    pub attributed_share: Option<f64>,
    /// The daemon's interval.
    #[serde(default)]
    pub interval_s: f64,
    /// Where the daemon followed each page's tier from one look to the next, what bounded it
    /// (the sites' `series.promoted_pages`, `demoted_pages` and `ping_pong_pages` count what it
    /// saw); absent where it did not (a profile without tiers, or of an older objtier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_moves: Option<PageMovesFollowed>,
}

/// How the daemon followed each page's tier for `series.promoted_pages` and the columns beside
/// it: a byte per page of every record it located, kept from one look to the next, within a
/// bound per process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PageMovesFollowed {
    /// The most bytes a process's page history may hold: one per page, and 64 per record.
    pub history_bytes_max: u64,
    /// The most pages, at one look at one process, that found no room in its history: their
    /// moves are not counted (0: every located page was followed).
    pub pages_not_followed: u64,
}

/// One tier of the profiling machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TierInfo {
    pub nodes: Vec<u32>,
    pub capacity_bytes: u64,
    /// Latency the kernel reports for the tier (HMAT), where it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_latency_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_latency_ns: Option<u64>,
}

/// One profiled process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProcessInfo {
    pub pid: u32,
    pub exe: String,
    pub attached_s: f64,
    pub detached_s: f64,
    pub peak_live_bytes: u64,
    /// Events the process's ring dropped (lost precision: a resync followed).
    #[serde(default)]
    pub dropped_events: u64,
}

/// One interval of the timeline, in seconds since the profile began.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Interval {
    pub start_s: f64,
    pub end_s: f64,
}

impl Interval {
    pub fn seconds(&self) -> f64 {
        (self.end_s - self.start_s).max(0.0)
    }
}

/// One allocation site (or pseudo-site).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Site {
    #[serde(default)]
    pub kind: SiteKind,
    /// `MODULE+0xOFFSET`, innermost first; empty for a pseudo-site.
    pub frames: Vec<String>,
    /// For people: each frame's symbol (`function+0xoffset`), null where the module has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub symbols: Vec<Option<String>>,
    pub allocations: u64,
    pub bytes_allocated: u64,
    pub peak_live_bytes: u64,
    /// What the source attributed to the site's objects, in `measurement.access_unit`.
    pub accesses: f64,
    /// Of those, loads and stores, where the source tells them apart (null otherwise).
    pub loads: Option<f64>,
    pub stores: Option<f64>,
    /// The source's weight summed over the site's samples (PEBS latency), where it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// The site's samples by the memory level that served them, where the source says (perf's
    /// data source: PEBS, and IBS and SPE as the kernel decodes them), by level name
    /// ([`crate::levels::MEMORY_LEVELS`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub memory_levels: std::collections::BTreeMap<String, crate::levels::LevelAccesses>,
    /// The same, by the tier the sampled page was in when the daemon last located it (index:
    /// `tiers`); samples of pages not located yet are only in `memory_levels`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_levels_by_tier:
        Vec<std::collections::BTreeMap<String, crate::levels::LevelAccesses>>,
    #[serde(default)]
    pub lifetime: Lifetime,
    #[serde(default)]
    pub series: Series,
}

impl Site {
    /// Its key across runs: kind and frames.
    pub fn key(&self) -> (SiteKind, &[String]) {
        (self.kind, &self.frames)
    }
}

/// How long a site's objects lived.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Lifetime {
    /// Objects freed while profiled (their lifetimes are the figures below).
    pub freed: u64,
    pub min_s: Option<f64>,
    /// From the histogram: exact to its bucket's width (a quarter of a power of two).
    pub median_s: Option<f64>,
    pub max_s: Option<f64>,
    /// Objects that lived longer than one interval (freed so, or still live at the end).
    pub past_one_interval: u64,
    /// Objects still live when their process exited (or the profile ended).
    pub live_at_exit: u64,
    /// `[upper bound in seconds, objects]` per bucket, increasing, empty buckets left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<(f64, u64)>,
}

/// The median of a lifetime histogram (`[upper bound s, objects]`, increasing): the upper bound
/// of the bucket holding the middle object.
pub fn median_of_histogram(buckets: &[(f64, u64)]) -> Option<f64> {
    let total: u64 = buckets.iter().map(|b| b.1).sum();
    if total == 0 {
        return None;
    }
    let mut seen = 0;
    for &(upper, count) in buckets {
        seen += count;
        if 2 * seen >= total {
            return Some(upper);
        }
    }
    buckets.last().map(|b| b.0)
}

/// Lifetimes counted in buckets a quarter of a power of two wide (19 % apart), from 1 ns to
/// centuries in 256 buckets: an exact enough median for any number of objects, in constant
/// memory per site.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LifetimeHistogram {
    counts: std::collections::BTreeMap<u32, u64>,
}

impl LifetimeHistogram {
    /// Counts one object that lived `ns` nanoseconds.
    pub fn add(&mut self, ns: u64) {
        *self.counts.entry(Self::bucket(ns)).or_insert(0) += 1;
    }

    fn bucket(ns: u64) -> u32 {
        // 4 * log2(ns), from the bit length and the two bits after the leading one.
        let ns = ns.max(1);
        let log = 63 - ns.leading_zeros();
        let fraction = if log >= 2 {
            (ns >> (log - 2)) & 3
        } else {
            (ns << (2 - log)) & 3
        };
        log * 4 + fraction as u32
    }

    /// Upper bound of bucket `b`, in seconds.
    fn upper_s(b: u32) -> f64 {
        let (log, fraction) = (b / 4, b % 4);
        ((1u128 << log) as f64 * (1.0 + (fraction + 1) as f64 / 4.0)) / 1e9
    }

    /// The buckets as a profile stores them.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        self.counts
            .iter()
            .map(|(&b, &count)| (Self::upper_s(b), count))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

/// A site per interval, for the intervals in which it had live objects, accesses or
/// allocations (others are all zero): columns of equal length.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Series {
    /// Indices into the profile's `intervals`, increasing.
    pub interval: Vec<usize>,
    /// Peak bytes of the site's live objects during the interval.
    pub live_bytes: Vec<u64>,
    pub accesses: Vec<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loads: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stores: Option<Vec<f64>>,
    pub allocations: Vec<u64>,
    /// Where the site's pages were at the interval's end, as the daemon located them: bytes
    /// per tier, fastest first (empty where they were not located). What tiering, objtier's or
    /// the kernel's, did with the site over time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier_bytes: Option<Vec<Vec<u64>>>,
    /// Pages of the site the daemon found in a faster tier than at its last look at them
    /// (promoted), in a slower one (demoted), and, of both, those that had already changed tier
    /// earlier in the run (moved more than once: ping-pong), whoever moved them: objtier's
    /// daemon, or the kernel (NUMA balancing, demotion in reclaim). Counted at the looks that
    /// close the interval (`measurement.page_moves` says the daemon followed pages; a column
    /// is absent where the site had none to count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_pages: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demoted_pages: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ping_pong_pages: Option<Vec<u64>>,
}

/// Pages that changed tier between two looks of the daemon (one row of a site's
/// `series.promoted_pages`, `demoted_pages` and `ping_pong_pages`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageMoves {
    pub promoted: u64,
    pub demoted: u64,
    /// Of the promoted and demoted pages, those that had changed tier before.
    pub ping_pong: u64,
}

impl PageMoves {
    pub fn is_zero(&self) -> bool {
        self.promoted + self.demoted + self.ping_pong == 0
    }

    pub fn add(&mut self, other: PageMoves) {
        self.promoted += other.promoted;
        self.demoted += other.demoted;
        self.ping_pong += other.ping_pong;
    }
}

impl Series {
    pub fn len(&self) -> usize {
        self.interval.len()
    }

    pub fn is_empty(&self) -> bool {
        self.interval.is_empty()
    }

    /// Appends a row for `interval`, which must come after the last.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        interval: usize,
        live_bytes: u64,
        accesses: f64,
        loads: Option<f64>,
        stores: Option<f64>,
        allocations: u64,
    ) {
        let row = self.len();
        self.interval.push(interval);
        self.live_bytes.push(live_bytes);
        self.accesses.push(accesses);
        push_optional(&mut self.loads, row, loads);
        push_optional(&mut self.stores, row, stores);
        self.allocations.push(allocations);
        if let Some(column) = &mut self.tier_bytes {
            column.push(Vec::new());
        }
        for column in [
            &mut self.promoted_pages,
            &mut self.demoted_pages,
            &mut self.ping_pong_pages,
        ]
        .into_iter()
        .flatten()
        {
            column.push(0);
        }
    }

    /// Adds `moves` to the last row's page moves (columns appear at their first value, with
    /// zeros for the rows before).
    pub fn add_to_last_page_moves(&mut self, moves: PageMoves) {
        let Some(last) = self.len().checked_sub(1) else {
            return;
        };
        for (column, value) in [
            (&mut self.promoted_pages, moves.promoted),
            (&mut self.demoted_pages, moves.demoted),
            (&mut self.ping_pong_pages, moves.ping_pong),
        ] {
            if value == 0 && column.is_none() {
                continue;
            }
            let column = column.get_or_insert_with(Vec::new);
            column.resize(last + 1, 0);
            column[last] += value;
        }
    }

    /// Row `row`'s page moves (zeros where the columns are absent).
    pub fn page_moves(&self, row: usize) -> PageMoves {
        let at = |c: &Option<Vec<u64>>| c.as_ref().and_then(|c| c.get(row)).copied().unwrap_or(0);
        PageMoves {
            promoted: at(&self.promoted_pages),
            demoted: at(&self.demoted_pages),
            ping_pong: at(&self.ping_pong_pages),
        }
    }

    /// Sets the last row's bytes per tier (rows before it without one get none).
    pub fn set_last_tier_bytes(&mut self, bytes_by_tier: Vec<u64>) {
        let Some(last) = self.len().checked_sub(1) else {
            return;
        };
        let column = self.tier_bytes.get_or_insert_with(Vec::new);
        column.resize(last + 1, Vec::new());
        column[last] = bytes_by_tier;
    }

    fn check(&self, intervals: usize) -> Result<(), String> {
        let n = self.interval.len();
        let lengths = [
            ("live_bytes", self.live_bytes.len()),
            ("accesses", self.accesses.len()),
            ("allocations", self.allocations.len()),
            ("loads", self.loads.as_ref().map_or(n, Vec::len)),
            ("stores", self.stores.as_ref().map_or(n, Vec::len)),
            ("tier_bytes", self.tier_bytes.as_ref().map_or(n, Vec::len)),
            (
                "promoted_pages",
                self.promoted_pages.as_ref().map_or(n, Vec::len),
            ),
            (
                "demoted_pages",
                self.demoted_pages.as_ref().map_or(n, Vec::len),
            ),
            (
                "ping_pong_pages",
                self.ping_pong_pages.as_ref().map_or(n, Vec::len),
            ),
        ];
        if let Some((name, len)) = lengths.iter().find(|(_, len)| *len != n) {
            return Err(format!(
                "series.{name} has {len} entries and series.interval {n}: the columns must be as long"
            ));
        }
        if let Some(row) = (0..n).find(|&r| {
            let m = self.page_moves(r);
            m.ping_pong > m.promoted + m.demoted
        }) {
            return Err(format!(
                "series.ping_pong_pages[{row}] counts more pages than were promoted and demoted"
            ));
        }
        if let Some(w) = self.interval.windows(2).find(|w| w[0] >= w[1]) {
            return Err(format!(
                "series.interval is not increasing ({} then {})",
                w[0], w[1]
            ));
        }
        if let Some(&last) = self.interval.last() {
            if last >= intervals {
                return Err(format!(
                    "series.interval names interval {last}, but the profile has {intervals}"
                ));
            }
        }
        Ok(())
    }
}

/// Keeps an optional column as long as the others: a column appears at its first value, with
/// zeros for the rows before.
fn push_optional(column: &mut Option<Vec<f64>>, row: usize, value: Option<f64>) {
    match (column.as_mut(), value) {
        (Some(c), v) => c.push(v.unwrap_or(0.0)),
        (None, Some(v)) => {
            let mut c = vec![0.0; row];
            c.push(v);
            *column = Some(c);
        }
        (None, None) => {}
    }
}

impl Profile {
    /// An empty profile of `program`, measured by `source`.
    pub fn new(source: Source, program: Program) -> Profile {
        Profile {
            format: PROFILE_FORMAT.to_string(),
            version: PROFILE_VERSION,
            source,
            program,
            command: Vec::new(),
            created_unix_s: 0.0,
            objtier_version: String::new(),
            measurement: Measurement::default(),
            duration_s: 0.0,
            peak_footprint_bytes: 0,
            tiers: Vec::new(),
            modules: Vec::new(),
            processes: Vec::new(),
            intervals: Vec::new(),
            sites: Vec::new(),
            pages: Vec::new(),
            merged_runs: 1,
            merged_by: None,
        }
    }

    /// Parses and checks a profile read from `file` (named in errors).
    pub fn from_json(file: &Path, text: &str) -> Result<Profile, FormatError> {
        crate::parse(file, text)
    }

    /// Reads and checks the profile in `file`.
    pub fn load(file: &Path) -> Result<Profile, FormatError> {
        crate::load(file)
    }

    /// The profile as JSON (one line per site keeps large profiles readable and diffable).
    pub fn to_json(&self) -> String {
        crate::to_json_lines(self, "sites")
    }

    /// Checks what the types cannot: columns of equal length, indices in range, frames named.
    pub fn check(&self, file: &Path) -> Result<(), FormatError> {
        crate::Versioned::check(self, file)
    }

    /// The site's module paths' build-ids, by path.
    pub fn build_id_of(&self, path: &str) -> Option<&str> {
        self.modules
            .iter()
            .find(|m| m.path == path)
            .and_then(|m| m.build_id.as_deref())
    }

    /// Sum of all sites' accesses.
    pub fn total_accesses(&self) -> f64 {
        self.sites.iter().map(|s| s.accesses).sum()
    }
}

impl crate::Versioned for Profile {
    const FORMAT: &'static str = PROFILE_FORMAT;
    const VERSION: u32 = PROFILE_VERSION;
    const WHAT: &'static str = "profile";
    const MADE_BY: &'static str = "objtier profile";

    fn check(&self, file: &Path) -> Result<(), FormatError> {
        let bad = |problem: String| {
            FormatError::new(file, problem).hint(
                "the profile was changed by hand or written by a broken tool: make it again with \
                 `objtier profile`",
            )
        };
        for (i, interval) in self.intervals.iter().enumerate() {
            if !(interval.start_s.is_finite() && interval.end_s >= interval.start_s) {
                return Err(bad(format!(
                    "intervals[{i}] ends before it starts ({} to {})",
                    interval.start_s, interval.end_s
                )));
            }
        }
        for (i, site) in self.sites.iter().enumerate() {
            site.series
                .check(self.intervals.len())
                .map_err(|p| bad(format!("sites[{i}]: {p}")))?;
            crate::check_frames(site.kind, &site.frames)
                .map_err(|p| bad(format!("sites[{i}]: {p}")))?;
            if !site.symbols.is_empty() && site.symbols.len() != site.frames.len() {
                return Err(bad(format!(
                    "sites[{i}] has {} symbols for {} frames",
                    site.symbols.len(),
                    site.frames.len()
                )));
            }
            for (name, value) in [
                ("accesses", Some(site.accesses)),
                ("loads", site.loads),
                ("stores", site.stores),
            ] {
                if value.is_some_and(|v| !v.is_finite() || v < 0.0) {
                    return Err(bad(format!(
                        "sites[{i}].{name} is negative or not a number"
                    )));
                }
            }
            for (name, counts) in &site.memory_levels {
                counts
                    .check()
                    .map_err(|p| bad(format!("sites[{i}].memory_levels.{name}: {p}")))?;
            }
            if !self.tiers.is_empty() && site.memory_levels_by_tier.len() > self.tiers.len() {
                return Err(bad(format!(
                    "sites[{i}].memory_levels_by_tier names {} tiers and the profile has {}",
                    site.memory_levels_by_tier.len(),
                    self.tiers.len()
                )));
            }
            for (t, levels) in site.memory_levels_by_tier.iter().enumerate() {
                for (name, counts) in levels {
                    counts.check().map_err(|p| {
                        bad(format!("sites[{i}].memory_levels_by_tier[{t}].{name}: {p}"))
                    })?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Profile {
        let mut p = Profile::new(
            Source::Damon,
            Program {
                exe: "/usr/bin/app".into(),
                name: "app".into(),
                build_id: Some("ab12".into()),
            },
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
        let mut site = Site {
            frames: vec![
                "/usr/bin/app+0x1234".into(),
                "/usr/lib/libc.so.6+0x29d90".into(),
            ],
            allocations: 3,
            bytes_allocated: 3 << 20,
            peak_live_bytes: 2 << 20,
            accesses: 100.0,
            ..Site::default()
        };
        site.series.push(0, 1 << 20, 40.0, None, None, 2);
        site.series.push(1, 2 << 20, 60.0, None, None, 1);
        p.sites.push(site);
        p.sites.push(Site {
            kind: SiteKind::SmallObjects,
            peak_live_bytes: 64 << 20,
            accesses: 5.0,
            ..Site::default()
        });
        p
    }

    #[test]
    fn round_trips() {
        let p = sample();
        let text = p.to_json();
        let back = Profile::from_json(Path::new("x.json"), &text).unwrap();
        assert_eq!(back, p);
        // The contract's fields, by name.
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["format"], "objtier-profile");
        assert_eq!(v["version"], 1);
        assert_eq!(v["source"], "damon");
        assert_eq!(v["sites"][0]["frames"][0], "/usr/bin/app+0x1234");
        for field in [
            "allocations",
            "bytes_allocated",
            "peak_live_bytes",
            "accesses",
        ] {
            assert!(v["sites"][0][field].is_number(), "{field}");
        }
        assert!(v["sites"][0]["loads"].is_null() && v["sites"][0]["stores"].is_null());
    }

    #[test]
    fn optional_columns_keep_their_rows() {
        let mut s = Series::default();
        s.push(0, 1, 1.0, None, None, 0);
        s.push(3, 1, 2.0, Some(1.5), None, 0);
        assert_eq!(s.loads, Some(vec![0.0, 1.5]));
        assert_eq!(s.stores, None);
        s.set_last_tier_bytes(vec![4096, 0]);
        assert_eq!(s.tier_bytes, Some(vec![vec![], vec![4096, 0]]));
        assert!(s.check(4).is_ok());
        assert!(s.check(3).unwrap_err().contains("interval 3"));
        // Page moves: a column appears at its first count, with zeros before.
        s.add_to_last_page_moves(PageMoves {
            promoted: 2,
            demoted: 0,
            ping_pong: 1,
        });
        assert_eq!(s.promoted_pages, Some(vec![0, 2]));
        assert_eq!(s.ping_pong_pages, Some(vec![0, 1]));
        assert_eq!(s.demoted_pages, None, "nothing demoted yet");
        s.push(4, 1, 0.0, None, None, 0);
        assert_eq!(s.promoted_pages, Some(vec![0, 2, 0]));
        assert!(s.check(5).is_ok());
        s.add_to_last_page_moves(PageMoves {
            promoted: 0,
            demoted: 0,
            ping_pong: 1,
        });
        assert!(s
            .check(5)
            .unwrap_err()
            .contains("more pages than were promoted"));
    }

    #[test]
    fn bad_profiles_say_where_and_what_to_do() {
        let file = Path::new("app.profile.json");
        let e = Profile::from_json(
            file,
            "{\"format\": \"objtier-profile\", \"version\": 1,\n \"source\": \"damon\"",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("app.profile.json:"), "{e}");
        let e = Profile::from_json(file, "{\"format\": \"objtier-placement\", \"version\": 1}")
            .unwrap_err();
        assert!(e.to_string().contains("a placement, not a profile"), "{e}");
        let e = Profile::from_json(file, "{\"format\": \"objtier-profile\", \"version\": 7}")
            .unwrap_err();
        assert!(e.to_string().contains("version 7"), "{e}");
        let e = Profile::from_json(file, "[1, 2]").unwrap_err();
        assert!(e.to_string().contains("not an objtier profile"), "{e}");
        let e = Profile::from_json(file, "not json").unwrap_err();
        assert!(e.to_string().contains("app.profile.json:1:"), "{e}");
        // A field of the wrong type: the line and column, and the field.
        let mut v: serde_json::Value = serde_json::from_str(&sample().to_json()).unwrap();
        v["sites"][0]["allocations"] = serde_json::json!("three");
        let text = serde_json::to_string_pretty(&v).unwrap();
        let e = Profile::from_json(file, &text).unwrap_err();
        assert!(e.at.is_some() && e.problem.contains("invalid type"), "{e}");
        // What the types allow but the format does not.
        let mut p = sample();
        p.sites[0].series.accesses.pop();
        let e = Profile::from_json(file, &p.to_json()).unwrap_err();
        assert!(
            e.to_string()
                .contains("sites[0]: series.accesses has 1 entries"),
            "{e}"
        );
        let mut p = sample();
        p.sites[0].frames[0] = "app@1234".into();
        let e = Profile::from_json(file, &p.to_json()).unwrap_err();
        assert!(e.to_string().contains("MODULE+0xOFFSET"), "{e}");
        let mut p = sample();
        p.sites[0].accesses = -1.0;
        assert!(Profile::from_json(file, &p.to_json()).is_err());
    }

    #[test]
    fn lifetime_buckets_bound_their_objects() {
        let mut h = LifetimeHistogram::default();
        for ns in [1, 3, 1000, 1_000_000, 1_500_000, 2_000_000_000, u64::MAX] {
            h.add(ns);
            let upper = *h
                .buckets()
                .iter()
                .map(|(u, _)| u)
                .find(|&&u| u * 1e9 >= ns as f64 * 0.999)
                .unwrap();
            assert!(
                upper * 1e9 <= ns as f64 * 1.26 + 1.0,
                "{ns} ns in a bucket up to {upper} s"
            );
        }
        let buckets = h.buckets();
        assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(buckets.iter().map(|b| b.1).sum::<u64>(), 7);
        let m = median_of_histogram(&buckets).unwrap();
        assert!((1e-3..2e-3).contains(&m), "median {m}");
        assert_eq!(median_of_histogram(&[]), None);
    }

    #[test]
    fn a_missing_file_says_which() {
        let e = Profile::load(Path::new("/nonexistent/p.json")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/p.json"), "{e}");
    }
}
