//! The daemon's state: everything it knows, what it may fill of each tier, and how long the
//! next interval lasts. What it does with it lives beside: [`crate::serve`] (the loop),
//! [`crate::attach`] (processes coming and going), [`crate::control`] (requests),
//! [`crate::interval`] (the tiering step).

use crate::clock::monotonic_ns;
use crate::config::DaemonConfig;
use crate::interval::buffers::IntervalBuffers;
use crate::interval::report::{IntervalReport, SinceEnforcement, Totals};
use crate::process::Process;
use objtier_sys::pages::PageMover;
use objtier_sys::topology::Topology;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Everything the daemon knows.
pub struct Daemon {
    pub config: DaemonConfig,
    pub topology: Topology,
    pub processes: BTreeMap<u64, Process>,
    pub source: crate::source::AccessSource,
    pub mover: Box<dyn PageMover>,
    pub started: Instant,
    pub totals: Totals,
    pub last_interval: Option<IntervalReport>,
    /// Length of the interval under way: `config.interval`, or `config.startup_interval` while
    /// a process is young ([`Daemon::next_interval_length`]).
    pub interval_length: Duration,
    /// The tiering policy's routines (built from the config, or a custom one given to
    /// [`crate::run_with_policy`]).
    pub policy: objtier_policy::Policy,
    /// What the triggers have seen since the last enforcement.
    pub since_enforcement: SinceEnforcement,
    /// LLC-miss and instruction counters, when a trigger needs them.
    pub llc_counters: Option<objtier_sys::perf::LlcCounters>,
    /// Warm start's store; None when warm start is off (or has no directory).
    pub site_store: Option<crate::sitestore::SiteStore>,
    /// Profile sessions (`objtier profile`).
    pub sessions: crate::sessions::Sessions,
    /// Placement files processes brought, parsed.
    pub(crate) placement_cache: crate::guided::PlacementCache,
    /// Pids of commands about to run a program here (`objtier run` asks, `hold`): a daemon that
    /// exits when idle waits for them, or it could exit between their check and their attach.
    pub(crate) held_pids: Vec<u32>,
    /// Pages of all records at the last enforcement: how many of them one interval locates.
    pub(crate) record_pages: u64,
    /// An enforcement's largest buffers, kept for the next one.
    pub(crate) buffers: IntervalBuffers,
    /// Whether splitting a huge page has failed once already (said once, then only debug).
    pub(crate) huge_split_failed: bool,
    pub(crate) next_process_id: u64,
    pub(crate) euid: u32,
    /// The Prometheus endpoint (`--metrics`), and what it keeps between scrapes.
    pub metrics: Option<crate::metrics::endpoint::Metrics>,
    /// Rebuilds the configuration at `SIGHUP` (see `reload.rs`); None: nothing to reload.
    pub reload: Option<crate::config::Reloader>,
}

impl Daemon {
    /// A daemon on a recording fake kernel: `config`'s built-in policy, no access source, each
    /// page move recorded instead of made. For tests and the fuzz targets.
    #[doc(hidden)]
    pub fn on_fake_kernel(config: DaemonConfig, topology: Topology) -> Daemon {
        let policy = crate::config::builtin_policy(&config);
        Daemon::new(
            config,
            topology,
            crate::source::AccessSource::none("a fake kernel"),
            Box::<objtier_sys::pages::RecordingPageMover>::default(),
            policy,
        )
    }

    /// A daemon with no process attached yet. `run` builds one from the machine; tests and
    /// benches build one from a synthetic topology and a recording page mover, insert
    /// `Process::synthetic` processes into `processes`, and call [`Daemon::interval`]
    /// themselves.
    pub fn new(
        config: DaemonConfig,
        topology: Topology,
        source: crate::source::AccessSource,
        mover: Box<dyn PageMover>,
        policy: objtier_policy::Policy,
    ) -> Daemon {
        Daemon {
            interval_length: config.interval,
            config,
            topology,
            processes: BTreeMap::new(),
            source,
            mover,
            started: Instant::now(),
            totals: Totals::default(),
            last_interval: None,
            record_pages: 0,
            buffers: Default::default(),
            huge_split_failed: false,
            policy,
            since_enforcement: SinceEnforcement::default(),
            llc_counters: None,
            site_store: None,
            sessions: crate::sessions::Sessions::default(),
            placement_cache: crate::guided::PlacementCache::default(),
            held_pids: Vec::new(),
            next_process_id: 1,
            // SAFETY: geteuid has no failure mode.
            euid: unsafe { libc::geteuid() },
            metrics: None,
            reload: None,
        }
    }

    /// The size above which objects are tracked as several records: `--split` when given, or
    /// else 64 MiB but at most a 32nd of the smallest tier that objects compete for
    /// ([`objtier_policy::auto_split_bytes`]; a `--fast-capacity` cap counts as the fast
    /// tier's size).
    pub fn split_bytes(&self) -> u64 {
        if let Some(bytes) = self.config.split_bytes {
            return bytes;
        }
        let contested = self.topology.tiers.len().saturating_sub(1);
        objtier_policy::auto_split_bytes((0..contested).map(|tier| self.tier_capacity(tier)))
    }

    /// How long the next interval lasts: shorter while an attached process is young and has
    /// not had its first plan informed by samples ([`objtier_policy::next_interval`]).
    pub fn next_interval_length(&self) -> Duration {
        let now = monotonic_ns();
        let youngest_age = self
            .processes
            .values()
            .filter(|p| !p.planned)
            .map(|p| Duration::from_nanos(now.saturating_sub(p.attached_ns)))
            .min();
        objtier_policy::next_interval(
            self.config.interval,
            self.config.startup_interval,
            self.config.startup_window,
            youngest_age,
        )
    }

    /// What objtier may fill of a tier: its memory, the fastest capped by `--fast-capacity`.
    pub(crate) fn tier_capacity(&self, tier: usize) -> u64 {
        let capacity = self.topology.tier_bytes(tier).0;
        match self.config.fast_capacity_bytes {
            Some(cap) if tier == 0 => capacity.min(cap),
            _ => capacity,
        }
    }
}
