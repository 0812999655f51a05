//! What the daemon can be told. Defaults are the paper's (section 4.5.1).

use objtier_policy::{Prioritization, SitePlacement, TriggerSpec, DEFAULT_ALPHA, DEFAULT_FILL};
use objtier_sys::damon::DamonAttrs;
use std::path::PathBuf;
use std::time::Duration;

/// Where access observations come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceChoice {
    /// The best available; without one, objects are tracked but never promoted.
    Auto,
    /// DAMON virtual-address monitoring; an error if unavailable.
    Damon,
    /// perf address sampling (PEBS, IBS, or `--event`); an error if unavailable.
    Perf,
    /// Page references through /proc (clear_refs, smaps, pagemap; idle page tracking where
    /// the kernel has it): coarse, for kernels without DAMON.
    Proc,
    /// No sampling (capacity caps are still enforced).
    None,
}

impl std::str::FromStr for SourceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "damon" => Ok(Self::Damon),
            "perf" => Ok(Self::Perf),
            "proc" => Ok(Self::Proc),
            "none" => Ok(Self::None),
            _ => Err(format!(
                "unknown access source {s:?}: use auto, perf, damon, proc or none"
            )),
        }
    }
}

/// DAMON snapshots per interval: a fifth of DAMON's samples at its 100 ms aggregation and 2 s
/// intervals (one snapshot saw a twentieth, and programs that sweep their arrays once a second
/// looked idle in most intervals). Measured in the tiered VM: the source's CPU (the daemon's
/// and kdamond's) 8.8-9.3 % of a CPU against 6.8-7.5 % with one (bench/eval/results/LOG.md, "Four DAMON snapshots an interval").
pub const DEFAULT_DAMON_SNAPSHOTS: u32 = 4;

/// The share of a program's time the `proc` source may cost it by clearing its reference bits
/// (`--proc-budget`): 1 %, under the 2.8 % the paper measured for its whole daemon.
pub const DEFAULT_PROC_BUDGET: f64 = 0.01;

/// Builds the daemon's configuration again, at `SIGHUP` (`reload.rs`): the `objtier` command
/// reads its command line and `--config` file anew.
pub type Reloader = Box<dyn FnMut() -> anyhow::Result<DaemonConfig>>;

#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub socket_path: PathBuf,
    /// Length of a profiling interval (2 s).
    pub interval: Duration,
    /// The interval while some attached process is younger than `startup_window` (500 ms, 10 s;
    /// see [`objtier_policy::next_interval`]); None keeps `interval` throughout.
    pub startup_interval: Option<Duration>,
    pub startup_window: Duration,
    /// EMA smoothing factor (0.1).
    pub alpha: f64,
    /// Share of each tier's capacity objtier fills (0.9).
    pub fill: f64,
    /// Objects larger than this are tracked as several records (`--split`). None, the default:
    /// [`objtier_policy::auto_split_bytes`] of the tiers (64 MiB beside fast tiers of 2 GiB or
    /// more), see [`crate::daemon::Daemon::split_bytes`].
    pub split_bytes: Option<u64>,
    pub prioritization: Prioritization,
    /// When to enforce a new assignment; any one firing is enough (time:1, every interval).
    pub triggers: Vec<TriggerSpec>,
    pub source: SourceChoice,
    pub damon: DamonAttrs,
    /// DAMON snapshots read per interval (`--damon-snapshots`, 4), evenly spaced: each holds
    /// one aggregation's counts, so more see more of DAMON's samples, at more CPU.
    pub damon_snapshots: u32,
    /// The share of a program's time the `proc` source's clearing of its reference bits may
    /// cost it (`--proc-budget`, 1 %); None: clear every interval, whatever it costs. See
    /// `source::proc`.
    pub proc_budget: Option<f64>,
    /// The perf event to sample (`--event`); None: the best hardware one found.
    pub perf_event: Option<String>,
    /// Sample period of the perf event (`--sample-period`); None: the event's default (4096;
    /// every fault for `page-faults`).
    pub perf_period: Option<u64>,
    /// Load-latency threshold of Intel's `mem-loads`, in cycles (`--ldlat`; 30, as `perf mem`):
    /// only loads at least this slow are sampled.
    pub perf_ldlat: u64,
    /// Explicit tiers (node lists, fastest first) instead of the kernel's ranking.
    pub tiers: Option<Vec<Vec<u32>>>,
    /// Cap on the bytes objtier places in the fastest tier, across all processes.
    pub fast_capacity_bytes: Option<u64>,
    /// While processes of different priority are attached, lower-priority ones may use the
    /// fastest tier except for this many bytes kept for the highest priority. None: they are
    /// kept out of it entirely (the paper's policy).
    pub fast_reserve_bytes: Option<u64>,
    /// Count a tier's clean cold file cache (`Inactive(file)` less `Dirty` and `Writeback`, of
    /// its nodes) as room for objects (true; `--reclaim-cache off`): moving pages in makes the
    /// kernel reclaim that cache, or demote it with `demotion_enabled`, as its own tiering does
    /// to make room for promotions. False budgets only free memory, and cold cache can then keep
    /// objects out of the tier.
    pub reclaim_cache: bool,
    /// Place the part of a record that fits a tier when the whole does not (true); false moves
    /// records whole, as the paper's daemon does (`--whole-records`).
    pub record_parts: bool,
    /// Proactive placement by allocation site (paper §3.5): how sites whose objects are planned
    /// below the fastest tier start their new objects there (needs an access source).
    pub proactive: SitePlacement,
    /// Warm start (`crate::sitestore`): save what each program learnt of its sites (placements,
    /// short-lived sites), and apply it from the start of its next run.
    pub warm_start: bool,
    /// Find allocation sites whose objects all die young, and have the library report only a
    /// sample of their new objects (true; `--short-lived-sites off`): see
    /// `objtier_policy::lifetimes`.
    pub short_lived_sites: bool,
    /// Where the site store lives; None: [`default_site_store`].
    pub site_store: Option<PathBuf>,
    /// Most bytes migrated per second (`--rate-limit`); None: no limit beyond the step time.
    pub rate_limit_bytes_per_second: Option<u64>,
    /// Plan and log, but move nothing.
    pub dry_run: bool,
    /// Exit once no process has been attached for `idle_linger` (used by `objtier run`).
    pub exit_when_idle: bool,
    pub idle_linger: Duration,
    /// With `exit_when_idle`: how long to wait for the first process.
    pub idle_first_wait: Duration,
    /// With `exit_when_idle`: exit once nothing is attached and this process is gone.
    pub exit_with_pid: Option<u32>,
    /// Root of sysfs (tests point it at captured trees).
    pub sys_root: PathBuf,
    /// Root of procfs, where the daemon reads the attached processes' maps, executables and
    /// threads (tests point it at captured trees, as `sys_root`).
    pub proc_root: PathBuf,
    /// Where the daemon records that it owns the kdamond (DAMON is system-wide, so this is too).
    pub damon_owner_file: PathBuf,
    /// Where Prometheus metrics are served (`--metrics`); None: nowhere.
    pub metrics: Option<crate::metrics::address::MetricsAddress>,
    /// Most processes the metrics export one by one (`--metrics-processes`).
    pub metrics_processes: usize,
}

impl DaemonConfig {
    pub fn new(socket_path: PathBuf) -> Self {
        Self {
            socket_path,
            interval: Duration::from_secs(2),
            // Off: the start-up interval made the first full plan late and variable when a
            // program was still allocating (see objtier_policy::next_interval).
            startup_interval: None,
            startup_window: Duration::from_millis(objtier_policy::DEFAULT_STARTUP_WINDOW_MS),
            alpha: DEFAULT_ALPHA,
            fill: DEFAULT_FILL,
            split_bytes: None,
            prioritization: Prioritization::Apb,
            triggers: vec![TriggerSpec::Time(1)],
            source: SourceChoice::Auto,
            damon: DamonAttrs::default(),
            damon_snapshots: DEFAULT_DAMON_SNAPSHOTS,
            proc_budget: Some(DEFAULT_PROC_BUDGET),
            perf_event: None,
            perf_period: None,
            perf_ldlat: objtier_sys::perf::event::DEFAULT_LDLAT,
            tiers: None,
            fast_capacity_bytes: None,
            fast_reserve_bytes: None,
            reclaim_cache: true,
            record_parts: true,
            proactive: SitePlacement::Conservative,
            warm_start: true,
            short_lived_sites: true,
            site_store: None,
            rate_limit_bytes_per_second: None,
            dry_run: false,
            exit_when_idle: false,
            idle_linger: Duration::from_secs(3),
            idle_first_wait: Duration::from_secs(30),
            exit_with_pid: None,
            sys_root: PathBuf::from("/sys"),
            proc_root: PathBuf::from("/proc"),
            damon_owner_file: PathBuf::from("/run/objtier/damon-owner"),
            metrics: None,
            metrics_processes: crate::metrics::address::DEFAULT_METRICS_PROCESSES,
        }
    }
}

/// The built-in policy the config names (`--prioritization`, `--trigger`, `--alpha`,
/// `--fast-reserve`, `--whole-records`).
pub fn builtin_policy(config: &DaemonConfig) -> objtier_policy::Policy {
    objtier_policy::Policy::builtin(
        config.alpha,
        config.prioritization,
        &config.triggers,
        objtier_policy::FillFastestFirst {
            fast_reserve_bytes: config.fast_reserve_bytes,
            record_parts: config.record_parts,
        },
    )
}

/// The socket a daemon listens on by default: `/run/objtier/objtier.sock` for root, else
/// `$XDG_RUNTIME_DIR/objtier/objtier.sock`, else `/tmp/objtier-UID/objtier.sock`.
/// `OBJTIER_SOCKET` overrides it (the library resolves the same way).
pub fn default_socket_path() -> PathBuf {
    if let Some(path) = std::env::var_os(objtier_wire::SOCKET_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    // SAFETY: geteuid has no failure mode.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from(objtier_wire::SYSTEM_SOCKET_PATH);
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|p| !p.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("objtier/objtier.sock"),
        None => PathBuf::from(format!("/tmp/objtier-{uid}/objtier.sock")),
    }
}

/// Where a daemon keeps its site store (warm start) by default: `/var/lib/objtier/sites` for
/// root, else `$XDG_STATE_HOME/objtier/sites`, else `$HOME/.local/state/objtier/sites`; None
/// for a user without a home.
pub fn default_site_store() -> Option<PathBuf> {
    // SAFETY: geteuid has no failure mode.
    if unsafe { libc::geteuid() } == 0 {
        return Some(PathBuf::from("/var/lib/objtier/sites"));
    }
    let nonempty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    nonempty("XDG_STATE_HOME")
        .map(|dir| PathBuf::from(dir).join("objtier/sites"))
        .or_else(|| {
            nonempty("HOME").map(|home| PathBuf::from(home).join(".local/state/objtier/sites"))
        })
}
