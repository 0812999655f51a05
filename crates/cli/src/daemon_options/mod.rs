//! The daemon's options, each declared once: its long name (the command line's `--name` and
//! the TOML file's `name` key), its help, and the kind of value it takes ([`values`]), on one
//! type that clap and serde both read. An option given on the command line wins over the file
//! (`--config FILE`), and the file over the default ([`DaemonOptions::or`]); [`DaemonOptions::config`]
//! turns the result into the daemon's [`DaemonConfig`]. Unknown keys in the file are errors that
//! name the key, so a typo never silently leaves a default in place. docs/daemon.md lists every
//! option; a test checks that it lists exactly these.

pub mod values;

use anyhow::{bail, Context};
use clap::Args;
use objtier_daemon::config::{default_socket_path, DaemonConfig};
use objtier_policy::TriggerSpec;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use values::{
    Cycles, Fraction, MetricsAt, PercentOrOff, Proactive, Ranking, Regions, Size, Snapshots,
    Source, Switch, Tiers, Time, TimeOrOff,
};

/// How an option given on the command line and in the file come together: the command line's
/// when it has one.
trait Layer {
    fn or(self, file: Self) -> Self;
}

impl<T> Layer for Option<T> {
    fn or(self, file: Self) -> Self {
        Option::or(self, file)
    }
}

/// A flag: set by either.
impl Layer for bool {
    fn or(self, file: Self) -> Self {
        self || file
    }
}

/// A list (the triggers): the command line's replaces the file's.
impl<T> Layer for Vec<T> {
    fn or(self, file: Self) -> Self {
        if self.is_empty() {
            file
        } else {
            self
        }
    }
}

/// Declares the options struct, and its layering, from one list of fields.
macro_rules! options {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $name {
            /// Each option from `self` (the command line), else from `file`.
            pub fn or(self, file: $name) -> $name {
                $name { $($field: Layer::or(self.$field, file.$field),)* }
            }
        }
    };
}

options! {
    /// `objtier daemon`'s options: the command line's, or a TOML file's.
    #[derive(Args, Clone, Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    pub struct DaemonOptions {
        /// Read options from this TOML file (keys are the long option names, e.g.
        /// `fast-capacity = "8G"`); options given here win over the file.
        #[arg(long)]
        #[serde(skip)]
        pub config: Option<PathBuf>,
        /// Socket to listen on.
        #[arg(long)]
        pub socket: Option<PathBuf>,
        /// Profiling interval (e.g. 2s, 500ms) [default: 2s].
        #[arg(long)]
        pub interval: Option<Time>,
        /// Profiling interval while a process younger than --startup-window waits for its first
        /// plan informed by sampled accesses, so that a short program is planned for while it runs
        /// (e.g. 500ms); "off" keeps --interval throughout [default: off].
        #[arg(long)]
        pub startup_interval: Option<TimeOrOff>,
        /// How long after it attaches a process may keep the daemon at --startup-interval
        /// [default: 10s].
        #[arg(long)]
        pub startup_window: Option<Time>,
        /// EMA smoothing factor for sampled accesses, in (0, 1] [default: 0.1].
        #[arg(long)]
        pub alpha: Option<Fraction>,
        /// Share of each tier's capacity to fill, in (0, 1] [default: 0.9].
        #[arg(long)]
        pub fill: Option<Fraction>,
        /// Objects larger than this are tracked as several records, rounded down to whole pages
        /// [default: 64M, or a 32nd of the fast tier when that is less (at least 2M)].
        #[arg(long)]
        pub split: Option<Size>,
        /// How objects are ranked for the fast tier: apb (accesses per byte), lru or fifo
        /// [default: apb].
        #[arg(long)]
        pub prioritization: Option<Ranking>,
        /// Access source: auto (the best available: perf with a hardware PMU, else damon, else
        /// proc), perf, damon, proc (page references through /proc: coarse, for kernels without
        /// DAMON), or none [default: auto].
        #[arg(long)]
        pub source: Option<Source>,
        /// Explicit tiers, fastest first: node lists separated by ';' (e.g. "0;1" or "1;0;2").
        #[arg(long)]
        pub tiers: Option<Tiers>,
        /// Cap on the bytes objtier places in the fastest tier, across all processes.
        #[arg(long)]
        pub fast_capacity: Option<Size>,
        /// With processes of different priority attached: let lower-priority ones use the fastest
        /// tier except for SIZE kept for the highest priority (default: keep them out entirely).
        #[arg(long)]
        pub fast_reserve: Option<Size>,
        /// Count the tiers' clean cold file cache (Inactive(file) less Dirty and Writeback, from
        /// each node's meminfo) as room for objects: on (moving objects in makes the kernel reclaim
        /// that cache, or demote it with demotion_enabled, as its own tiering does) or off (only
        /// free memory is room) [default: on].
        #[arg(long)]
        pub reclaim_cache: Option<Switch>,
        /// Move every record whole, as the paper's daemon does (default: when a record does not fit
        /// the fast tier's remaining budget whole, the part of it that fits is placed there).
        #[arg(long)]
        #[serde(default)]
        pub whole_records: bool,
        /// When to migrate; repeat or separate with commas to combine (any one fires):
        /// time:N every N intervals, alloc:SIZE after SIZE allocated (1G if no SIZE; alloc:10%
        /// for a share of the fastest tier's capacity),
        /// pressure:SHARE when the fastest tier's free memory falls below SHARE (5% if none),
        /// llc-mpi:T when LLC misses per instruction change by T times their recent average
        /// (2 if none; needs a hardware PMU) [default: time:1].
        #[arg(long, value_delimiter = ',')]
        #[serde(default, deserialize_with = "values::triggers")]
        pub trigger: Vec<TriggerSpec>,
        /// Proactive placement by allocation site: conservative (a site none of whose objects are
        /// kept in the fastest tier starts its new objects where they were planned; "on" is the
        /// same), threshold:SHARE (where at least SHARE of its bytes are planned; 0.8 if no SHARE),
        /// or off [default: conservative].
        #[arg(long)]
        pub proactive: Option<Proactive>,
        /// Warm start: save what each program learnt of its allocation sites (placements, and
        /// which are short-lived), keyed by its executable and its call paths as module+offset, and
        /// apply it from the start of its next run: on or off [default: on].
        #[arg(long)]
        pub warm_start: Option<Switch>,
        /// Find allocation sites whose objects all die within half an interval (at least 10,000
        /// over two intervals, none older; a busy site sooner, once its objects all died within a
        /// quarter of the time it was watched, a quarter of a second at least), and have the
        /// library report only one in 64 of their new objects (and none of the others' frees): on
        /// or off [default: on].
        #[arg(long)]
        pub short_lived_sites: Option<Switch>,
        /// Directory of the warm-start site store [default: /var/lib/objtier/sites for root, else
        /// $XDG_STATE_HOME/objtier/sites or ~/.local/state/objtier/sites].
        #[arg(long, value_name = "DIR")]
        pub site_store: Option<PathBuf>,
        /// Most bytes migrated per second, e.g. 512M (default: no limit; a step still migrates for
        /// at most two intervals).
        #[arg(long)]
        pub rate_limit: Option<Size>,
        /// With --source perf: the event to sample: page-faults (software, works without a
        /// PMU), mem-loads, mem-stores, ibs-op, spe (Arm SPE), or PMU/TERMS/ (e.g.
        /// cpu/event=0xd1,umask=0x20/) [default: the best hardware event found].
        #[arg(long)]
        pub event: Option<String>,
        /// With --source perf: one sample every N events [default: 4096; 1 for page-faults].
        #[arg(long)]
        pub sample_period: Option<u64>,
        /// With --source perf on Intel: sample only loads that took at least CYCLES (mem-loads'
        /// load-latency threshold; the kernel's alias says 3, nearly every load) [default: 30, as
        /// perf mem].
        #[arg(long, value_name = "CYCLES")]
        pub ldlat: Option<Cycles>,
        /// DAMON sampling interval [default: 5ms].
        #[arg(long)]
        pub damon_sample: Option<Time>,
        /// DAMON aggregation interval [default: 100ms].
        #[arg(long)]
        pub damon_aggregate: Option<Time>,
        /// DAMON snapshots read per interval, evenly spaced, each one aggregation's counts (2 to
        /// 20) [default: 4]: more see more of DAMON's samples, at more CPU.
        #[arg(long, value_name = "N")]
        pub damon_snapshots: Option<Snapshots>,
        /// How much of a program's time the proc source may cost it, e.g. 1% or 0.5%: clearing a
        /// page's reference bits makes the program set them again on its next touch, and a process
        /// for which that costs more is observed less often (at least every 16 intervals); "off"
        /// clears every interval, whatever it costs [default: 1%].
        #[arg(long, value_name = "PERCENT")]
        pub proc_budget: Option<PercentOrOff>,
        /// DAMON's bounds on the number of regions it keeps over all attached processes, MIN-MAX
        /// [default: 10-1000]: more regions resolve smaller hot objects, at more CPU per sample.
        #[arg(long)]
        pub damon_regions: Option<Regions>,
        /// Serve Prometheus metrics (text exposition format, `GET /metrics`) on a local TCP address
        /// (e.g. 127.0.0.1:9477) or a Unix socket path (e.g. /run/objtier/metrics.sock)
        /// [default: none].
        #[arg(long, value_name = "ADDR")]
        pub metrics: Option<MetricsAt>,
        /// Most attached processes the metrics export one by one (the largest by tracked bytes;
        /// all count in the totals) [default: 64].
        #[arg(long, value_name = "N")]
        pub metrics_processes: Option<usize>,
        /// The log's form: auto (journald when stderr is the journal, else text), text (colour
        /// only on a terminal), json (one object a line) or journald [default: auto].
        #[arg(long, value_enum, value_name = "FORMAT")]
        pub log_format: Option<crate::logging::LogFormat>,
        /// Plan and report, but move no page.
        #[arg(long)]
        #[serde(skip)]
        pub dry_run: bool,
        /// Exit when no process has been attached for a few seconds (used by `objtier run`).
        #[arg(long)]
        #[serde(skip)]
        pub exit_when_idle: bool,
        /// With --exit-when-idle: also exit as soon as this pid is gone and nothing is attached
        /// (`objtier run` passes the pid its program runs as).
        #[arg(long, hide = true)]
        #[serde(skip)]
        pub exit_with_pid: Option<u32>,
    }
}

impl DaemonOptions {
    /// The options of a TOML file.
    pub fn read(path: &Path) -> anyhow::Result<DaemonOptions> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the config file {}", path.display()))?;
        DaemonOptions::parse(&text)
            .with_context(|| format!("in the config file {}", path.display()))
    }

    /// The options of a TOML file's `text`.
    pub fn parse(text: &str) -> anyhow::Result<DaemonOptions> {
        toml::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "{}; the keys are the daemon's long options: {}",
                e.to_string().trim_end(),
                file_keys().join(", ")
            )
        })
    }

    /// These options (the command line's), else the `--config` file's.
    pub fn layered(self) -> anyhow::Result<DaemonOptions> {
        let file = match &self.config {
            Some(path) => DaemonOptions::read(path)?,
            None => DaemonOptions::default(),
        };
        Ok(self.or(file))
    }

    /// The daemon's configuration: these options (the command line's), else the `--config`
    /// file's, else the built-in defaults.
    pub fn config(self) -> anyhow::Result<DaemonConfig> {
        let o = self.layered()?;
        let mut config = DaemonConfig::new(o.socket.unwrap_or_else(default_socket_path));
        if let Some(v) = o.interval {
            config.interval = v.0;
        }
        if let Some(v) = o.startup_interval {
            config.startup_interval = v.0;
        }
        if let Some(v) = o.startup_window {
            config.startup_window = v.0;
        }
        if let Some(v) = o.alpha {
            config.alpha = v.0;
        }
        if let Some(v) = o.fill {
            config.fill = v.0;
        }
        if let Some(v) = o.split {
            // Records are whole pages: the split is rounded down to a page (at least one).
            let page = objtier_wire::PAGE_SIZE as u64;
            config.split_bytes = Some((v.0 / page).max(1) * page);
        }
        if let Some(v) = o.prioritization {
            config.prioritization = v.0;
        }
        if let Some(v) = o.source {
            config.source = v.0;
        }
        if let Some(v) = o.proactive {
            config.proactive = v.0;
        }
        if !o.trigger.is_empty() {
            config.triggers = o.trigger;
        }
        config.perf_event = o.event;
        config.perf_period = o.sample_period.filter(|&p| p > 0);
        if let Some(v) = o.ldlat {
            config.perf_ldlat = v.0;
        }
        let switch = |v: Option<Switch>, default: bool| v.map_or(default, Switch::on);
        config.warm_start = switch(o.warm_start, config.warm_start);
        config.short_lived_sites = switch(o.short_lived_sites, config.short_lived_sites);
        config.reclaim_cache = switch(o.reclaim_cache, config.reclaim_cache);
        config.site_store = o.site_store;
        if let Some(v) = o.damon_sample {
            config.damon.sample_us = v.0.as_micros() as u64;
        }
        if let Some(v) = o.damon_aggregate {
            config.damon.aggr_us = v.0.as_micros() as u64;
        }
        if let Some(v) = o.proc_budget {
            config.proc_budget = v.0;
        }
        if let Some(v) = o.damon_snapshots {
            config.damon_snapshots = v.0;
        }
        config.tiers = o.tiers.map(|t| t.0);
        config.fast_capacity_bytes = o.fast_capacity.map(|s| s.0);
        config.fast_reserve_bytes = o.fast_reserve.map(|s| s.0);
        config.record_parts = !o.whole_records;
        config.rate_limit_bytes_per_second = o.rate_limit.map(|s| s.0);
        config.dry_run = o.dry_run;
        config.exit_when_idle = o.exit_when_idle;
        config.exit_with_pid = o.exit_with_pid;
        config.metrics = o.metrics.map(|m| m.0);
        if let Some(n) = o.metrics_processes {
            config.metrics_processes = n;
        }
        if let Some(Regions(min, max)) = o.damon_regions {
            config.damon.min_regions = min;
            config.damon.max_regions = max;
        }
        if config.damon.aggr_us < config.damon.sample_us {
            bail!("--damon-aggregate must be at least --damon-sample");
        }
        Ok(config)
    }
}

/// The long names of the options a file may give (all but the command line's own).
pub fn file_keys() -> Vec<String> {
    const COMMAND_LINE_ONLY: &[&str] = &["config", "dry-run", "exit-when-idle", "exit-with-pid"];
    option_names()
        .into_iter()
        .filter(|name| !COMMAND_LINE_ONLY.contains(&name.as_str()))
        .collect()
}

/// The long names of every option, in declaration order.
pub fn option_names() -> Vec<String> {
    use clap::CommandFactory;
    #[derive(clap::Parser)]
    struct Only {
        #[command(flatten)]
        options: DaemonOptions,
    }
    Only::command()
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests;
