//! `objtier`: run a program under object tiering, run the daemon, or ask it what it is doing.
//!
//! The CLI is thin: `run` makes sure a daemon is listening and then `exec`s the program with
//! libobjtier.so preloaded (and a placement, `--placement`); `daemon` hands its flags to
//! `objtier-daemon`; `status` asks a daemon over its socket. The offline workflow has a file
//! each: `profile` (record a run per allocation site), `advise` (a placement from profiles),
//! and `placement` (what `run --placement` checks before it runs); `report` shows where a
//! program's memory went, from profiles or a live process, and `top` watches a daemon live.

use anyhow::bail;
use clap::{Args, Parser, Subcommand};
use objtier_daemon::config::{default_socket_path, DaemonConfig, SourceChoice};
use objtier_policy::{Prioritization, SitePlacement, TriggerSpec};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

mod advise_cmd;
mod config_file;
mod doctor;
mod launch;
mod placement;
mod profile_cmd;
mod program;
mod report;
mod report_cmd;
mod symbolize;
mod top;

#[derive(Parser)]
#[command(
    name = "objtier",
    version,
    about = "Object-level memory tiering for Linux"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a program with objtier: preload libobjtier.so, starting a daemon if none is running.
    Run(RunArgs),
    /// Run the daemon in the foreground (serves every attached process; root for DAMON).
    Daemon(Box<DaemonArgs>),
    /// Show the daemon's tiers and attached processes.
    Status(StatusArgs),
    /// Choose the tier new objects of an allocation site start in, for an attached process.
    Place(PlaceArgs),
    /// Check this machine: NUMA nodes and tiers, page migration, and which access sources work.
    Doctor(DoctorArgs),
    /// Run a program and record, per allocation site, what its objects did (or `profile merge`).
    Profile(Box<profile_cmd::ProfileArgs>),
    /// Advise a placement from profiles: which tier each allocation site's objects start in.
    Advise(Box<advise_cmd::AdviseArgs>),
    /// See where memory goes: a report (one HTML file, or JSON, or CSV) of profiles, or of a
    /// live process of a running daemon (--pid).
    #[command(after_long_help = report_cmd::HELP)]
    Report(Box<report_cmd::ReportArgs>),
    /// Watch a running daemon live: tiers, attached processes and their hottest sites,
    /// migrations per second, the access source's cost (`q` quits).
    #[command(after_long_help = top::HELP)]
    Top(top::TopArgs),
}

#[derive(Args)]
struct PlaceArgs {
    /// The attached process (see `objtier status`).
    #[arg(long)]
    pid: u32,
    /// The site id, as `objtier status --json` lists it (e.g. 0x1f3a...).
    #[arg(long)]
    site: String,
    /// Tier new objects of the site start in (0 = fastest).
    #[arg(long, conflicts_with = "clear", required_unless_present = "clear")]
    tier: Option<u32>,
    /// Forget the site's placement: new objects start wherever first touch puts them.
    #[arg(long)]
    clear: bool,
    /// Daemon socket (default: $OBJTIER_SOCKET, /run/objtier/objtier.sock as root, else per user).
    #[arg(long)]
    socket: Option<PathBuf>,
}

#[derive(Args)]
struct DoctorArgs {
    /// Print the findings as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RunArgs {
    /// Cap on how much of the fast tier objtier may fill for this program (e.g. 256M, 1G).
    #[arg(long, value_parser = parse_size)]
    fast_capacity: Option<u64>,
    /// Priority of this program among attached processes (higher wins the fast tier).
    #[arg(long, allow_hyphen_values = true)]
    priority: Option<i32>,
    #[command(flatten)]
    launch: launch::LaunchArgs,
    /// Do not start a daemon; attach only if one is already running.
    #[arg(long)]
    no_daemon: bool,
    /// A placement (`objtier advise`): each listed allocation site's objects are born in its
    /// tier (within its budget there, the rest one tier down); unlisted sites go to its
    /// fallback tier (none: where first touch puts them).
    #[arg(long, value_name = "FILE")]
    placement: Option<PathBuf>,
    /// Never move the program's pages: objects stay where they were born (static placement).
    #[arg(long)]
    no_migrate: bool,
    /// The program and its arguments (after `--`, or after the first non-option word).
    #[arg(required = true, trailing_var_arg = true)]
    command: Vec<String>,
}

#[derive(Args)]
struct DaemonArgs {
    /// Read options from this TOML file (keys are the long option names, e.g.
    /// `fast-capacity = "8G"`); options given here win over the file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Socket to listen on.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Profiling interval (e.g. 2s, 500ms) [default: 2s].
    #[arg(long, value_parser = parse_duration)]
    interval: Option<Duration>,
    /// Profiling interval while a process younger than --startup-window waits for its first
    /// plan informed by sampled accesses, so that a short program is planned for while it runs
    /// (e.g. 500ms); "off" keeps --interval throughout [default: off].
    #[arg(long, value_parser = parse_duration_or_off)]
    startup_interval: Option<DurationOrOff>,
    /// How long after it attaches a process may keep the daemon at --startup-interval
    /// [default: 10s].
    #[arg(long, value_parser = parse_duration)]
    startup_window: Option<Duration>,
    /// EMA smoothing factor for sampled accesses, in (0, 1] [default: 0.1].
    #[arg(long, value_parser = parse_unit_fraction)]
    alpha: Option<f64>,
    /// Share of each tier's capacity to fill, in (0, 1] [default: 0.9].
    #[arg(long, value_parser = parse_unit_fraction)]
    fill: Option<f64>,
    /// Objects larger than this are tracked as several records, rounded down to whole pages
    /// [default: 64M, or a 32nd of the fast tier when that is less (at least 2M)].
    #[arg(long, value_parser = parse_size)]
    split: Option<u64>,
    /// How objects are ranked for the fast tier: apb (accesses per byte), lru or fifo
    /// [default: apb].
    #[arg(long)]
    prioritization: Option<Prioritization>,
    /// Access source: auto (the best available: perf with a hardware PMU, else damon, else
    /// proc), perf, damon, proc (page references through /proc: coarse, for kernels without
    /// DAMON), or none [default: auto].
    #[arg(long)]
    source: Option<SourceChoice>,
    /// Explicit tiers, fastest first: node lists separated by ';' (e.g. "0;1" or "1;0;2").
    #[arg(long, value_parser = parse_tiers)]
    tiers: Option<Vec<Vec<u32>>>,
    /// Cap on the bytes objtier places in the fastest tier, across all processes.
    #[arg(long, value_parser = parse_size)]
    fast_capacity: Option<u64>,
    /// With processes of different priority attached: let lower-priority ones use the fastest
    /// tier except for SIZE kept for the highest priority (default: keep them out entirely).
    #[arg(long, value_parser = parse_size)]
    fast_reserve: Option<u64>,
    /// Count the tiers' clean cold file cache (Inactive(file) less Dirty and Writeback, from
    /// each node's meminfo) as room for objects: on (moving objects in makes the kernel reclaim
    /// that cache, or demote it with demotion_enabled, as its own tiering does) or off (only
    /// free memory is room) [default: on].
    #[arg(long, value_parser = ["on", "off"])]
    reclaim_cache: Option<String>,
    /// Move every record whole, as the paper's daemon does (default: when a record does not fit
    /// the fast tier's remaining budget whole, the part of it that fits is placed there).
    #[arg(long)]
    whole_records: bool,
    /// When to migrate; repeat or separate with commas to combine (any one fires):
    /// time:N every N intervals, alloc:SIZE after SIZE allocated (1G if no SIZE; alloc:10%
    /// for a share of the fastest tier's capacity),
    /// pressure:SHARE when the fastest tier's free memory falls below SHARE (5% if none),
    /// llc-mpi:T when LLC misses per instruction change by T times their recent average
    /// (2 if none; needs a hardware PMU) [default: time:1].
    #[arg(long, value_delimiter = ',')]
    trigger: Vec<TriggerSpec>,
    /// Proactive placement by allocation site: conservative (a site none of whose objects are
    /// kept in the fastest tier starts its new objects where they were planned; "on" is the
    /// same), threshold:SHARE (where at least SHARE of its bytes are planned; 0.8 if no SHARE),
    /// or off [default: conservative].
    #[arg(long)]
    proactive: Option<SitePlacement>,
    /// Warm start: save what each program learnt of its allocation sites (placements, and
    /// which are short-lived), keyed by its executable and its call paths as module+offset, and
    /// apply it from the start of its next run: on or off [default: on].
    #[arg(long, value_parser = ["on", "off"])]
    warm_start: Option<String>,
    /// Find allocation sites whose objects all die within half an interval (at least 10,000
    /// over two intervals, none older; a busy site sooner, once its objects all died within a
    /// quarter of the time it was watched, a quarter of a second at least), and have the
    /// library report only one in 64 of their new objects (and none of the others' frees): on
    /// or off [default: on].
    #[arg(long, value_parser = ["on", "off"])]
    short_lived_sites: Option<String>,
    /// Directory of the warm-start site store [default: /var/lib/objtier/sites for root, else
    /// $XDG_STATE_HOME/objtier/sites or ~/.local/state/objtier/sites].
    #[arg(long, value_name = "DIR")]
    site_store: Option<PathBuf>,
    /// Most bytes migrated per second, e.g. 512M (default: no limit; a step still migrates for
    /// at most two intervals).
    #[arg(long, value_parser = parse_size)]
    rate_limit: Option<u64>,
    /// With --source perf: the event to sample: page-faults (software, works without a
    /// PMU), mem-loads, mem-stores, ibs-op, spe (Arm SPE), or PMU/TERMS/ (e.g.
    /// cpu/event=0xd1,umask=0x20/) [default: the best hardware event found].
    #[arg(long)]
    event: Option<String>,
    /// With --source perf: one sample every N events [default: 4096; 1 for page-faults].
    #[arg(long)]
    sample_period: Option<u64>,
    /// With --source perf on Intel: sample only loads that took at least CYCLES (mem-loads'
    /// load-latency threshold; the kernel's alias says 3, nearly every load) [default: 30, as
    /// perf mem].
    #[arg(long, value_name = "CYCLES", value_parser = clap::value_parser!(u64).range(1..=65535))]
    ldlat: Option<u64>,
    /// DAMON sampling interval [default: 5ms].
    #[arg(long, value_parser = parse_duration)]
    damon_sample: Option<Duration>,
    /// DAMON aggregation interval [default: 100ms].
    #[arg(long, value_parser = parse_duration)]
    damon_aggregate: Option<Duration>,
    /// DAMON snapshots read per interval, evenly spaced, each one aggregation's counts (2 to
    /// 20) [default: 4]: more see more of DAMON's samples, at more CPU.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=20))]
    damon_snapshots: Option<u32>,
    /// How much of a program's time the proc source may cost it, e.g. 1% or 0.5%: clearing a
    /// page's reference bits makes the program set them again on its next touch, and a process
    /// for which that costs more is observed less often (at least every 16 intervals); "off"
    /// clears every interval, whatever it costs [default: 1%].
    #[arg(long, value_name = "PERCENT", value_parser = parse_percent_or_off)]
    proc_budget: Option<PercentOrOff>,
    /// DAMON's bounds on the number of regions it keeps over all attached processes, MIN-MAX
    /// [default: 10-1000]: more regions resolve smaller hot objects, at more CPU per sample.
    #[arg(long, value_parser = parse_regions)]
    damon_regions: Option<(u64, u64)>,
    /// Plan and report, but move no page.
    #[arg(long)]
    dry_run: bool,
    /// Exit when no process has been attached for a few seconds (used by `objtier run`).
    #[arg(long)]
    exit_when_idle: bool,
    /// With --exit-when-idle: also exit as soon as this pid is gone and nothing is attached
    /// (`objtier run` passes the pid its program runs as).
    #[arg(long, hide = true)]
    exit_with_pid: Option<u32>,
}

#[derive(Args)]
struct StatusArgs {
    /// Print the daemon's JSON reply as is.
    #[arg(long)]
    json: bool,
    /// Daemon socket.
    #[arg(long)]
    socket: Option<PathBuf>,
}

fn parse_size(text: &str) -> Result<u64, String> {
    objtier_policy::units::parse_size(text)
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(format!(
            "{text:?} is not a duration: use e.g. 2s, 500ms or 5000us"
        ));
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: use e.g. 2s, 500ms"))?;
    if !(value > 0.0 && value.is_finite()) {
        return Err(format!("{text:?}: a duration must be positive"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}

/// A duration, or "off" (None).
#[derive(Clone, Copy, Debug)]
struct DurationOrOff(Option<Duration>);

fn parse_duration_or_off(text: &str) -> Result<DurationOrOff, String> {
    if text.trim() == "off" {
        return Ok(DurationOrOff(None));
    }
    parse_duration(text)
        .map(|d| DurationOrOff(Some(d)))
        .map_err(|e| format!("{e}, or off"))
}

/// A share written as a percentage ("1%", "0.5%", or "1" alone), or "off" (None).
#[derive(Clone, Copy, Debug)]
struct PercentOrOff(Option<f64>);

fn parse_percent_or_off(text: &str) -> Result<PercentOrOff, String> {
    let text = text.trim();
    if text == "off" {
        return Ok(PercentOrOff(None));
    }
    match text.strip_suffix('%').unwrap_or(text).trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 100.0 => Ok(PercentOrOff(Some(v / 100.0))),
        _ => Err(format!(
            "{text:?}: give a percentage above 0 and at most 100 (e.g. 1% or 0.5%), or off"
        )),
    }
}

fn parse_unit_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("{text:?} must be a number in (0, 1]")),
    }
}

fn parse_tiers(text: &str) -> Result<Vec<Vec<u32>>, String> {
    text.split(';')
        .map(|tier| {
            objtier_sys::topology::parse_list(tier)
                .filter(|l| !l.is_empty())
                .ok_or_else(|| {
                    format!("bad tier {tier:?} in {text:?}: use e.g. \"0;1\" or \"0-1;2\"")
                })
        })
        .collect()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run(args) => run(args),
        Cmd::Daemon(args) => daemon(*args),
        Cmd::Status(args) => status(args),
        Cmd::Place(args) => place(args),
        Cmd::Doctor(args) => doctor::run(args.json),
        Cmd::Profile(args) => profile_cmd::run(*args),
        Cmd::Advise(args) => advise_cmd::run(*args),
        Cmd::Report(args) => report_cmd::run(*args),
        Cmd::Top(args) => top::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("objtier: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("OBJTIER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn daemon(args: DaemonArgs) -> anyhow::Result<ExitCode> {
    init_logging();
    let config = daemon_config(args)?;
    objtier_daemon::run(config)?;
    Ok(ExitCode::SUCCESS)
}

/// The daemon's configuration: command line, else `--config` file, else built-in defaults.
fn daemon_config(args: DaemonArgs) -> anyhow::Result<DaemonConfig> {
    let file = match &args.config {
        Some(path) => config_file::DaemonFile::read(path)?,
        None => config_file::DaemonFile::default(),
    };
    fn text<T>(
        key: &str,
        value: &Option<String>,
        parse: fn(&str) -> Result<T, String>,
    ) -> anyhow::Result<Option<T>> {
        value
            .as_deref()
            .map(|v| parse(v).map_err(|e| anyhow::anyhow!("{key}: {e}")))
            .transpose()
    }
    let size = |key: &str, value: &Option<config_file::SizeValue>| {
        value.as_ref().map(|v| v.bytes(key)).transpose()
    };
    let fraction = |key: &str, value: Option<f64>| {
        value
            .map(|v| parse_unit_fraction(&v.to_string()).map_err(|e| anyhow::anyhow!("{key}: {e}")))
            .transpose()
    };
    let socket = args
        .socket
        .or(file.socket)
        .unwrap_or_else(default_socket_path);
    // Defaults are DaemonConfig's; each option comes from the command line, else the file.
    let mut config = DaemonConfig::new(socket);
    if let Some(v) = args
        .interval
        .or(text("interval", &file.interval, parse_duration)?)
    {
        config.interval = v;
    }
    if let Some(v) = args.startup_interval.or(text(
        "startup-interval",
        &file.startup_interval,
        parse_duration_or_off,
    )?) {
        config.startup_interval = v.0;
    }
    if let Some(v) = args.startup_window.or(text(
        "startup-window",
        &file.startup_window,
        parse_duration,
    )?) {
        config.startup_window = v;
    }
    if let Some(v) = args.alpha.or(fraction("alpha", file.alpha)?) {
        config.alpha = v;
    }
    if let Some(v) = args.fill.or(fraction("fill", file.fill)?) {
        config.fill = v;
    }
    if let Some(v) = args.split.or(size("split", &file.split)?) {
        // Records are whole pages: the split is rounded down to a page (at least one).
        let page = objtier_wire::PAGE_SIZE as u64;
        config.split_bytes = Some((v / page).max(1) * page);
    }
    let prioritization = |t: &str| {
        t.parse()
            .map_err(|_| format!("{t:?} is not apb, lru or fifo"))
    };
    if let Some(v) = args.prioritization.or(text(
        "prioritization",
        &file.prioritization,
        prioritization,
    )?) {
        config.prioritization = v;
    }
    let source = |t: &str| {
        t.parse()
            .map_err(|_| format!("{t:?} is not auto, perf, damon, proc or none"))
    };
    if let Some(v) = args.source.or(text("source", &file.source, source)?) {
        config.source = v;
    }
    let proactive = file
        .proactive
        .as_ref()
        .map(|v| {
            v.text()
                .parse()
                .map_err(|e| anyhow::anyhow!("proactive: {e}"))
        })
        .transpose()?;
    if let Some(v) = args.proactive.or(proactive) {
        config.proactive = v;
    }
    let triggers = file
        .trigger
        .as_ref()
        .map(|v| {
            v.items()
                .iter()
                .map(|t| t.parse().map_err(|e| anyhow::anyhow!("trigger: {e}")))
                .collect::<anyhow::Result<Vec<TriggerSpec>>>()
        })
        .transpose()?;
    if !args.trigger.is_empty() {
        config.triggers = args.trigger;
    } else if let Some(v) = triggers.filter(|t| !t.is_empty()) {
        config.triggers = v;
    }
    config.perf_event = args.event.or(file.event);
    config.perf_period = args.sample_period.or(file.sample_period).filter(|&p| p > 0);
    if let Some(v) = args.ldlat.or(file.ldlat) {
        if !(1..=65535).contains(&v) {
            bail!("ldlat = {v}: the load latency threshold is 1 to 65535 cycles");
        }
        config.perf_ldlat = v;
    }
    // An on|off option: the command line's word, else the file's boolean, else the default.
    let switch = |arg: Option<&str>, file: Option<bool>, default: bool| {
        arg.map(|v| v == "on").or(file).unwrap_or(default)
    };
    config.warm_start = switch(
        args.warm_start.as_deref(),
        file.warm_start,
        config.warm_start,
    );
    config.short_lived_sites = switch(
        args.short_lived_sites.as_deref(),
        file.short_lived_sites,
        config.short_lived_sites,
    );
    config.site_store = args.site_store.or(file.site_store);
    let damon_sample = text("damon-sample", &file.damon_sample, parse_duration)?;
    if let Some(v) = args.damon_sample.or(damon_sample) {
        config.damon.sample_us = v.as_micros() as u64;
    }
    let damon_aggregate = text("damon-aggregate", &file.damon_aggregate, parse_duration)?;
    if let Some(v) = args.damon_aggregate.or(damon_aggregate) {
        config.damon.aggr_us = v.as_micros() as u64;
    }
    let proc_budget = file
        .proc_budget
        .as_ref()
        .map(|v| parse_percent_or_off(&v.text()).map_err(|e| anyhow::anyhow!("proc-budget: {e}")))
        .transpose()?;
    if let Some(v) = args.proc_budget.or(proc_budget) {
        config.proc_budget = v.0;
    }
    if let Some(v) = args.damon_snapshots.or(file.damon_snapshots) {
        if !(2..=20).contains(&v) {
            bail!("damon-snapshots = {v}: read 2 to 20 DAMON snapshots an interval");
        }
        config.damon_snapshots = v;
    }
    config.tiers = args.tiers.or(text("tiers", &file.tiers, parse_tiers)?);
    config.fast_capacity_bytes = args
        .fast_capacity
        .or(size("fast-capacity", &file.fast_capacity)?);
    config.fast_reserve_bytes = args
        .fast_reserve
        .or(size("fast-reserve", &file.fast_reserve)?);
    config.reclaim_cache = switch(
        args.reclaim_cache.as_deref(),
        file.reclaim_cache,
        config.reclaim_cache,
    );
    config.record_parts = !(args.whole_records || file.whole_records.unwrap_or(false));
    config.rate_limit_bytes_per_second = args.rate_limit.or(size("rate-limit", &file.rate_limit)?);
    config.dry_run = args.dry_run;
    config.exit_when_idle = args.exit_when_idle;
    config.exit_with_pid = args.exit_with_pid;
    if let Some((min, max)) =
        args.damon_regions
            .or(text("damon-regions", &file.damon_regions, parse_regions)?)
    {
        config.damon.min_regions = min;
        config.damon.max_regions = max;
    }
    if config.damon.aggr_us < config.damon.sample_us {
        bail!("--damon-aggregate must be at least --damon-sample");
    }
    Ok(config)
}

/// DAMON's region bounds, "MIN-MAX": DAMON itself refuses fewer than 3, or a minimum above the
/// maximum.
fn parse_regions(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("{s:?}: expected MIN-MAX region counts, e.g. 10-1000");
    let (min, max) = s.trim().split_once('-').ok_or_else(bad)?;
    let (min, max): (u64, u64) = (
        min.trim().parse().map_err(|_| bad())?,
        max.trim().parse().map_err(|_| bad())?,
    );
    if min < 3 {
        return Err(format!("{s:?}: DAMON needs at least 3 regions (MIN >= 3)"));
    }
    if max < min {
        return Err(format!("{s:?}: MAX must be at least MIN"));
    }
    Ok((min, max))
}

fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let socket = args.launch.socket();
    let lib = launch::find_library(args.launch.lib.clone())?;
    // A program the preload cannot reach still runs, as the user asked, but they hear why
    // nothing tiers it.
    if let Some(file) = program::resolve(&args.command[0], std::env::var_os("PATH").as_deref()) {
        // SAFETY: getuid and getgid have no failure mode.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        if let Some(why) = program::unreachable(&file, uid, gid) {
            eprintln!("objtier: warning: {}", why.warning(&file));
        }
    }
    // The program runs either way: without a daemon it simply is not tiered. (A daemon too old
    // to know the hold request is no reason to fail.)
    if args.no_daemon {
        let _ = launch::ask_daemon(Some(socket.clone()), &launch::hold_request());
    } else if let Err(e) = args
        .launch
        .ask_for_a_run(&socket, &[], &launch::hold_request())
    {
        if e.downcast_ref::<launch::Unanswered>().is_some() || !launch::daemon_is_listening(&socket)
        {
            eprintln!("objtier: warning: running without tiering: {e:#}");
        }
    }
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    launch::preload(&mut cmd, lib, &socket);
    if let Some(file) = &args.placement {
        let (path, fallback) = placement::check(file, &args.command)?;
        cmd.env("OBJTIER_PLACEMENT", path);
        if let Some(tier) = fallback {
            placement::prefer_fallback(tier);
        }
    }
    if args.no_migrate {
        cmd.env("OBJTIER_NO_MIGRATE", "1");
    }
    if let Some(cap) = args.fast_capacity {
        cmd.env("OBJTIER_FAST_CAPACITY", cap.to_string());
    }
    if let Some(priority) = args.priority {
        cmd.env("OBJTIER_PRIORITY", priority.to_string());
    }
    let err = cmd.exec();
    eprintln!("objtier: cannot run {:?}: {err}", args.command[0]);
    Ok(ExitCode::from(
        if err.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
    ))
}

fn place(args: PlaceArgs) -> anyhow::Result<ExitCode> {
    let request = serde_json::json!({
        "cmd": "place",
        "pid": args.pid,
        "site": args.site,
        "tier": if args.clear { None } else { args.tier },
    });
    let reply = launch::ask_daemon(args.socket, &request)?;
    match reply["tier"].as_u64() {
        Some(t) => println!(
            "pid {}: new objects of site {} start in tier {t}",
            args.pid,
            reply["site"].as_str().unwrap_or("?")
        ),
        None => println!(
            "pid {}: site {} has no placement",
            args.pid,
            reply["site"].as_str().unwrap_or("?")
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let reply = launch::ask_daemon(args.socket, &serde_json::json!({"cmd": "status"}))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reply)?);
    } else {
        print_status(&reply);
    }
    Ok(ExitCode::SUCCESS)
}

fn mib(v: &serde_json::Value) -> String {
    v.as_u64().map_or("-".into(), |b| {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    })
}

/// What the access source has cost since the daemon started (`daemon.source_cost`), so that
/// its overhead is seen next to what it buys; `None` from a daemon that does not report it.
fn source_cost_line(d: &serde_json::Value) -> Option<String> {
    let cost = &d["source_cost"];
    let cpu = cost["cpu_seconds"].as_f64()?;
    let uptime = d["uptime_seconds"].as_f64().unwrap_or(0.0);
    let share = if uptime > 0.0 {
        format!(" ({:.2} % of one CPU)", 100.0 * cpu / uptime)
    } else {
        String::new()
    };
    let lost = match cost["lost"].as_u64() {
        Some(n) if n > 0 => format!(", {n} samples lost"),
        _ => String::new(),
    };
    Some(format!(
        "source cost: {cpu:.2} s CPU since start{share}, {} observations{lost}",
        cost["observations"]
    ))
}

/// The share of the last interval's sampled accesses that fell in tracked objects
/// (`attributed_share`): a low one means the source mostly sees memory objtier does not
/// track. `None` before the first interval, or when nothing was sampled.
fn attributed_share_line(last: &serde_json::Value) -> Option<String> {
    let share = last["attributed_share"].as_f64()?;
    Some(format!(
        "sampled accesses attributed to objects at the last interval: {:.1} %",
        100.0 * share
    ))
}

fn print_status(reply: &serde_json::Value) {
    let d = &reply["daemon"];
    let startup = match d["startup_interval_ms"].as_u64() {
        Some(ms) => format!(
            " ({ms} ms for a process's first {} s)",
            d["startup_window_seconds"].as_f64().unwrap_or(0.0)
        ),
        None => String::new(),
    };
    println!(
        "daemon pid {} up {:.0}s, source {}, interval {} ms{startup}, {} prioritization",
        d["pid"],
        d["uptime_seconds"].as_f64().unwrap_or(0.0),
        d["source_detail"],
        d["interval_ms"],
        d["prioritization"].as_str().unwrap_or("?")
    );
    println!(
        "policy: {}; proactive placement {}",
        d["policy"].as_str().unwrap_or("?"),
        d["proactive"].as_str().unwrap_or("?")
    );
    for line in [
        source_cost_line(d),
        attributed_share_line(&d["last_interval"]),
    ]
    .into_iter()
    .flatten()
    {
        println!("{line}");
    }
    let t = &d["totals"];
    println!(
        "migrated: {} pages promoted, {} demoted, {} failed, in {} of {} intervals",
        t["promoted_pages"],
        t["demoted_pages"],
        t["failed_pages"],
        t["enforcements"],
        t["intervals"]
    );
    if t["huge_page_splits"].as_u64().is_some_and(|n| n > 0) {
        println!(
            "huge pages split to move part of them: {}",
            t["huge_page_splits"]
        );
    }
    let last = &d["last_interval"];
    if let Some(reasons) = last["trigger_reasons"].as_array().filter(|r| !r.is_empty()) {
        let reasons: Vec<&str> = reasons.iter().filter_map(|r| r.as_str()).collect();
        println!("last migration because: {}", reasons.join("; "));
    }
    if last["record_parts"].as_u64().is_some_and(|n| n > 0) {
        println!(
            "last plan: {} record(s) placed in part, {} in the faster tier",
            last["record_parts"],
            mib(&last["record_part_bytes"])
        );
    }
    println!("tiers (fastest first):");
    let cache_is_room = reply["daemon"]["reclaim_cache"].as_bool().unwrap_or(false);
    for tier in reply["tiers"].as_array().into_iter().flatten() {
        println!(
            "  tier {} nodes {}: capacity {}, free {}, cold file cache {}{}, objtier budget {}",
            tier["tier"],
            tier["nodes"],
            mib(&tier["capacity_bytes"]),
            mib(&tier["free_bytes"]),
            mib(&tier["cold_cache_bytes"]),
            if cache_is_room { " (room)" } else { "" },
            mib(&tier["budget_bytes"])
        );
    }
    let processes = reply["processes"].as_array().cloned().unwrap_or_default();
    println!("{} attached process(es):", processes.len());
    for p in processes {
        let per_tier: Vec<String> = p["bytes_per_tier"]
            .as_array()
            .into_iter()
            .flatten()
            .map(mib)
            .collect();
        println!(
            "  pid {}: {} objects, {} tracked; resident per tier at the last interval [{}]",
            p["pid"],
            p["objects"],
            mib(&p["tracked_bytes"]),
            per_tier.join(", ")
        );
        for site in p["sites"].as_array().into_iter().flatten().take(5) {
            let innermost = site["frames"][0].as_str().unwrap_or(
                if site["site"].as_str() == Some("0x0000000000000000") {
                    "(small objects: the allocator's blocks)"
                } else {
                    "(frames not yet known)"
                },
            );
            let tier = site["start_tier"].as_u64().map_or(String::new(), |t| {
                format!(
                    ", starts in tier {t} ({})",
                    site["placed_by"].as_str().unwrap_or("?")
                )
            });
            println!(
                "    site {}: {} objects, {}{tier}; at {innermost}",
                site["site"].as_str().unwrap_or("?"),
                site["objects"],
                mib(&site["bytes"]),
            );
        }
        for site in p["short_lived_sites"].as_array().into_iter().flatten() {
            println!(
                "    site {}: short-lived{} (one object in {} reported); at {}",
                site["site"].as_str().unwrap_or("?"),
                if site["remembered"] == true {
                    ", remembered from an earlier run"
                } else {
                    ""
                },
                objtier_wire::SHORT_LIVED_SAMPLE,
                site["frames"][0]
                    .as_str()
                    .unwrap_or("(frames not yet known)")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_durations_tiers() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3Q").is_err());
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("2").is_err());
        assert!(parse_duration("-1s").is_err());
        assert_eq!(parse_tiers("0;1-2"), Ok(vec![vec![0], vec![1, 2]]));
        assert!(parse_tiers("0;;1").is_err());
        assert!(parse_unit_fraction("1.5").is_err());
        assert_eq!(parse_regions("20-2000"), Ok((20, 2000)));
        assert!(parse_regions("2-100").unwrap_err().contains("at least 3"));
        assert!(parse_regions("50-10").unwrap_err().contains("at least MIN"));
        assert!(parse_regions("many").is_err());
    }

    /// The lines read the status JSON as `objtier_daemon::status` writes it.
    #[test]
    fn status_shows_the_attributed_share_and_the_source_cost() {
        use objtier_daemon::interval::IntervalReport;
        use objtier_daemon::source::SourceCost;
        let cost = SourceCost {
            cpu_seconds: 1.5,
            observations: 4200,
            lost: 0,
        };
        let last = IntervalReport {
            attributed_share: Some(0.875),
            ..Default::default()
        };
        let d = serde_json::json!({
            "uptime_seconds": 300.0,
            "source_cost": cost,
            "last_interval": last,
        });
        assert_eq!(
            source_cost_line(&d).unwrap(),
            "source cost: 1.50 s CPU since start (0.50 % of one CPU), 4200 observations"
        );
        assert_eq!(
            attributed_share_line(&d["last_interval"]).unwrap(),
            "sampled accesses attributed to objects at the last interval: 87.5 %"
        );
        let lossy = serde_json::json!({"source_cost": SourceCost { lost: 7, ..cost }});
        assert!(source_cost_line(&lossy)
            .unwrap()
            .ends_with("observations, 7 samples lost"));
        // Nothing sampled yet, or no interval yet: no line.
        let unsampled = serde_json::json!(IntervalReport::default());
        assert_eq!(attributed_share_line(&unsampled), None);
        assert_eq!(attributed_share_line(&serde_json::Value::Null), None);
        assert_eq!(source_cost_line(&serde_json::json!({})), None);
    }

    #[test]
    fn the_load_latency_threshold_comes_from_ldlat() {
        let c = config_from(&["objtier", "daemon", "--ldlat", "64"]).unwrap();
        assert_eq!(c.perf_ldlat, 64);
        assert!(config_from(&["objtier", "daemon", "--ldlat", "0"]).is_err());
        assert!(config_from(&["objtier", "daemon", "--ldlat", "70000"]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("objtier.toml");
        std::fs::write(&file, "ldlat = 50\n").unwrap();
        let path = file.to_str().unwrap();
        let c = config_from(&["objtier", "daemon", "--config", path]).unwrap();
        assert_eq!(c.perf_ldlat, 50);
        std::fs::write(&file, "ldlat = 0\n").unwrap();
        let err = config_from(&["objtier", "daemon", "--config", path]).unwrap_err();
        assert!(format!("{err:#}").contains("1 to 65535"), "{err:#}");
    }

    #[test]
    fn the_proc_budget_is_a_percentage_or_off() {
        let c = config_from(&["objtier", "daemon"]).unwrap();
        assert_eq!(c.proc_budget, Some(0.01), "1 % by default");
        let c = config_from(&["objtier", "daemon", "--proc-budget", "0.5%"]).unwrap();
        assert_eq!(c.proc_budget, Some(0.005));
        let c = config_from(&["objtier", "daemon", "--proc-budget", "2"]).unwrap();
        assert_eq!(c.proc_budget, Some(0.02));
        let c = config_from(&["objtier", "daemon", "--proc-budget", "off"]).unwrap();
        assert_eq!(c.proc_budget, None);
        for bad in ["0", "101%", "lots", "1%%"] {
            let err = config_from(&["objtier", "daemon", "--proc-budget", bad]).unwrap_err();
            assert!(err.to_string().contains("or off"), "{bad}: {err}");
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("objtier.toml");
        let path = file.to_str().unwrap();
        std::fs::write(&file, "proc-budget = \"3%\"\n").unwrap();
        let c = config_from(&["objtier", "daemon", "--config", path]).unwrap();
        assert_eq!(c.proc_budget, Some(0.03));
        std::fs::write(&file, "proc-budget = 0.5\n").unwrap();
        let c = config_from(&["objtier", "daemon", "--config", path]).unwrap();
        assert_eq!(c.proc_budget, Some(0.005));
        std::fs::write(&file, "proc-budget = \"off\"\n").unwrap();
        let c = config_from(&["objtier", "daemon", "--config", path]).unwrap();
        assert_eq!(c.proc_budget, None);
        std::fs::write(&file, "proc-budget = \"much\"\n").unwrap();
        let err = config_from(&["objtier", "daemon", "--config", path]).unwrap_err();
        assert!(format!("{err:#}").contains("proc-budget"), "{err:#}");
        // The command line wins over the file.
        std::fs::write(&file, "proc-budget = \"3%\"\n").unwrap();
        let c = config_from(&[
            "objtier",
            "daemon",
            "--config",
            path,
            "--proc-budget",
            "off",
        ])
        .unwrap();
        assert_eq!(c.proc_budget, None);
    }

    #[test]
    fn the_startup_interval_can_be_set_or_turned_off() {
        let c = config_from(&["objtier", "daemon"]).unwrap();
        assert_eq!(c.startup_interval, None, "off by default");
        assert_eq!(c.startup_window, Duration::from_secs(10));
        let c = config_from(&["objtier", "daemon", "--startup-interval", "500ms"]).unwrap();
        assert_eq!(c.startup_interval, Some(Duration::from_millis(500)));
        let c = config_from(&["objtier", "daemon", "--startup-interval", "off"]).unwrap();
        assert_eq!(c.startup_interval, None);
        let c = config_from(&[
            "objtier",
            "daemon",
            "--startup-interval",
            "250ms",
            "--startup-window",
            "30s",
        ])
        .unwrap();
        assert_eq!(c.startup_interval, Some(Duration::from_millis(250)));
        assert_eq!(c.startup_window, Duration::from_secs(30));
        let err = config_from(&["objtier", "daemon", "--startup-interval", "soon"]).unwrap_err();
        assert!(err.to_string().contains("or off"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("objtier.toml");
        std::fs::write(
            &file,
            "startup-interval = \"off\"\nstartup-window = \"5s\"\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let c = config_from(&["objtier", "daemon", "--config", path]).unwrap();
        assert_eq!(c.startup_interval, None);
        assert_eq!(c.startup_window, Duration::from_secs(5));
    }

    fn config_from(args: &[&str]) -> anyhow::Result<DaemonConfig> {
        let cli = Cli::try_parse_from(args).map_err(|e| anyhow::anyhow!("{e}"))?;
        match cli.command {
            Cmd::Daemon(args) => daemon_config(*args),
            _ => unreachable!("a daemon command line"),
        }
    }

    #[test]
    fn daemon_options_come_from_the_command_line_then_the_file_then_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("objtier.toml");
        std::fs::write(
            &file,
            "fill = 0.8\ninterval = \"1s\"\nprioritization = \"lru\"\nsource = \"none\"\n\
             rate-limit = \"256M\"\nproactive = false\ntrigger = [\"time:2\", \"alloc:512M\"]\n\
             warm-start = false\nsite-store = \"/srv/sites\"\ndamon-regions = \"20-2000\"\n\
             reclaim-cache = false\ndamon-snapshots = 8\nshort-lived-sites = false\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let c = config_from(&["objtier", "daemon", "--config", path, "--fill", "0.5"]).unwrap();
        assert_eq!(c.fill, 0.5, "the command line wins");
        assert_eq!(c.interval, Duration::from_secs(1), "then the file");
        assert_eq!(c.prioritization, Prioritization::Lru);
        assert_eq!(c.source, SourceChoice::None);
        assert_eq!(c.rate_limit_bytes_per_second, Some(256 << 20));
        assert_eq!(c.proactive, SitePlacement::Off);
        assert_eq!(
            c.triggers,
            vec![TriggerSpec::Time(2), TriggerSpec::Allocation(512 << 20)]
        );
        assert!(!c.warm_start);
        assert!(!c.reclaim_cache);
        assert!(!c.short_lived_sites);
        assert_eq!(
            c.site_store.as_deref(),
            Some(std::path::Path::new("/srv/sites"))
        );
        assert_eq!((c.damon.min_regions, c.damon.max_regions), (20, 2000));
        assert_eq!(c.damon_snapshots, 8);
        assert_eq!(
            c.perf_ldlat, 30,
            "perf mem's load latency threshold by default"
        );
        let c = config_from(&[
            "objtier",
            "daemon",
            "--config",
            path,
            "--warm-start",
            "on",
            "--site-store",
            "/elsewhere",
            "--reclaim-cache",
            "on",
            "--short-lived-sites",
            "on",
        ])
        .unwrap();
        assert!(c.short_lived_sites);
        assert!(c.warm_start);
        assert!(c.reclaim_cache, "the command line wins");
        assert_eq!(
            c.site_store.as_deref(),
            Some(std::path::Path::new("/elsewhere"))
        );
        assert_eq!(c.alpha, objtier_policy::DEFAULT_ALPHA, "then the default");
        assert_eq!(c.split_bytes, None, "automatic unless given");
        let c = config_from(&["objtier", "daemon", "--split", "8M"]).unwrap();
        assert_eq!(c.split_bytes, Some(8 << 20));
        let c = config_from(&["objtier", "daemon", "--split", "10000"]).unwrap();
        assert_eq!(c.split_bytes, Some(8192), "whole pages");
        let defaults = config_from(&["objtier", "daemon"]).unwrap();
        assert_eq!(defaults.interval, Duration::from_secs(2));
        assert_eq!(defaults.damon_snapshots, 4);
        let c = config_from(&["objtier", "daemon", "--damon-snapshots", "12"]).unwrap();
        assert_eq!(c.damon_snapshots, 12);
        for (args, error) in [
            (
                &["objtier", "daemon", "--damon-snapshots", "1"][..],
                "not in 2..=20",
            ),
            (
                &["objtier", "daemon", "--damon-snapshots", "many"][..],
                "invalid digit",
            ),
        ] {
            let e = config_from(args).unwrap_err().to_string();
            assert!(e.contains(error), "{e}");
        }
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "damon-snapshots = 50\n").unwrap();
        let e = config_from(&["objtier", "daemon", "--config", bad.to_str().unwrap()]).unwrap_err();
        assert!(format!("{e:#}").contains("2 to 20"), "{e:#}");
        assert_eq!(defaults.proactive, SitePlacement::Conservative);
        assert_eq!(defaults.triggers, vec![TriggerSpec::Time(1)]);
        assert!(defaults.warm_start);
        assert!(defaults.reclaim_cache);
        assert!(defaults.short_lived_sites);
        assert_eq!(
            defaults.site_store, None,
            "the default directory is chosen at start-up"
        );
        let c = config_from(&[
            "objtier",
            "daemon",
            "--config",
            path,
            "--trigger",
            "alloc:1G,pressure",
            "--proactive",
            "threshold:0.9",
        ])
        .unwrap();
        assert_eq!(
            c.triggers,
            vec![
                TriggerSpec::Allocation(1 << 30),
                TriggerSpec::Pressure(0.05)
            ],
            "the command line's triggers replace the file's"
        );
        assert_eq!(c.proactive, SitePlacement::Threshold(0.9));
        assert!(config_from(&["objtier", "daemon", "--trigger", "sometimes"]).is_err());
        std::fs::write(&file, "prioritization = \"random\"\n").unwrap();
        let err = config_from(&["objtier", "daemon", "--config", path]).unwrap_err();
        assert!(
            format!("{err:#}").contains("not apb, lru or fifo"),
            "{err:#}"
        );
        let err = config_from(&["objtier", "daemon", "--config", "/nonexistent.toml"]).unwrap_err();
        assert!(
            format!("{err:#}").contains("cannot read the config file"),
            "{err:#}"
        );
    }
}
