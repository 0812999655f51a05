//! The objtier daemon: watches every attached process, samples accesses, and moves pages.
//!
//! One thread runs a `poll(2)` loop ([`serve`]) over the listening socket and the attached
//! processes; every wake-up drains the processes' event rings, and every interval (2 s by
//! default) it runs the tiering step ([`interval`]): observe the access source's samples,
//! decide whether to enforce, snapshot where the records' pages are, plan with
//! `objtier-policy`, and migrate with `move_pages`.
//!
//! Layout, in dependency order (no file imports one that imports it back):
//!
//! - state: [`config`] (what the user can set), [`record`], [`records`] and [`pending`] (object
//!   records and their stores), [`process`] (one attached process, composed of parts),
//!   [`source`] (where access observations come from), [`sitestore`] (what warm start keeps per
//!   program), [`guided`] (a placement file, `objtier run --placement`), [`recorder`] and
//!   [`sessions`] (profiles of an `objtier profile` run, with [`page_history`] for its pages' moves), and [`daemon`] (all of it together);
//! - behaviour, each an `impl Daemon` on that state: [`serve`] (the loop), [`attach`]
//!   (processes coming and going), [`control`] (the control socket's requests), [`interval`]
//!   (the tiering step, stage by stage), `room`, `phases` and `profiling` (placements,
//!   per-phase guidance and profiles, wired into the interval), [`status`] (what `objtier
//!   status` prints);
//! - this file: starting and stopping the daemon ([`run`], [`run_with_policy`]).

pub mod attach;
mod clients;
pub mod clock;
pub mod config;
pub mod control;
mod credentials;
pub mod daemon;
#[doc(hidden)]
pub mod fuzzing;
pub mod guided;
pub mod interval;
pub mod metrics;
pub mod page_history;
pub mod pending;
mod phases;
pub mod process;
mod profiling;
pub mod record;
pub mod recorder;
pub mod records;
pub mod reload;
mod room;
pub mod serve;
pub mod sessions;
pub mod sitestore;
pub mod source;
pub mod status;

pub use clock::monotonic_ns;
pub use config::builtin_policy;
pub use daemon::Daemon;

use anyhow::{bail, Context};
use config::DaemonConfig;
use objtier_sys::pages::{LinuxPageMover, PageMover, RecordingPageMover};
use objtier_sys::topology::Topology;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// Binds the daemon's socket, refusing to steal one a live daemon is using.
fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the socket directory {}", dir.display()))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!(
                "another objtier daemon is already listening on {}; stop it first, or give this \
                 one another --socket",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .with_context(|| format!("cannot remove the stale socket {}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot listen on {}", path.display()))?;
    // A root daemon serves every user: anyone may connect; SO_PEERCRED says who they are, and
    // move_pages is only ever applied to the connecting process itself.
    // SAFETY: geteuid has no failure mode.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666));
        if let Some(dir) = path.parent() {
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
        }
    }
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// The site store warm start uses. A directory given with `--site-store` is created now, and
/// one that cannot be is an error; the default one is created by the first save (and a failure
/// then is a warning).
fn open_site_store(config: &DaemonConfig) -> anyhow::Result<Option<sitestore::SiteStore>> {
    if !config.warm_start {
        return Ok(None);
    }
    if let Some(dir) = &config.site_store {
        return sitestore::SiteStore::create(dir.clone())
            .map(Some)
            .with_context(|| format!("cannot create the site store {}", dir.display()));
    }
    match config::default_site_store() {
        Some(dir) => Ok(Some(sitestore::SiteStore::new(dir))),
        None => {
            tracing::warn!(
                "warm start is off: no directory for the site store (no HOME); give one with \
                 --site-store"
            );
            Ok(None)
        }
    }
}

/// Runs the daemon with the built-in policy the config names, until SIGINT/SIGTERM (or, with
/// `exit_when_idle`, until no process is left).
pub fn run(config: DaemonConfig) -> anyhow::Result<()> {
    run_reloadable(config, None)
}

/// Runs the daemon with the built-in policy, and at `SIGHUP` applies the configuration
/// `reload` builds then ([`reload`]).
pub fn run_reloadable(
    config: DaemonConfig,
    reload: Option<config::Reloader>,
) -> anyhow::Result<()> {
    let policy = builtin_policy(&config);
    serve_until_stopped(config, policy, reload)
}

/// Runs the daemon with any policy: the built-in routines or a program's own (see
/// `examples/custom-policy`).
pub fn run_with_policy(config: DaemonConfig, policy: objtier_policy::Policy) -> anyhow::Result<()> {
    serve_until_stopped(config, policy, None)
}

fn serve_until_stopped(
    config: DaemonConfig,
    policy: objtier_policy::Policy,
    reload: Option<config::Reloader>,
) -> anyhow::Result<()> {
    let mut topology =
        Topology::discover(&config.sys_root).context("cannot read the NUMA topology")?;
    if let Some(tiers) = &config.tiers {
        topology = topology
            .with_explicit_tiers(tiers)
            .map_err(|e| anyhow::anyhow!("--tiers: {e}"))?;
    }
    // The daemon's own memory (and its threads', started below) takes no fast memory from the
    // programs it tiers.
    if let Some(slowest) = topology.tiers.last().filter(|_| topology.tiers.len() > 1) {
        if let Err(e) = objtier_sys::mempolicy::prefer_nodes(&slowest.nodes) {
            tracing::debug!("cannot prefer the slowest tier for the daemon's memory: {e}");
        }
    }
    let source = source::AccessSource::open(&config)?;
    let llc_counters = if policy.needs_llc_counters() {
        Some(
            objtier_sys::perf::LlcCounters::open(&config.sys_root, &config.proc_root)
                .context("the llc-mpi trigger needs LLC-miss and instruction counters")?,
        )
    } else {
        None
    };
    let (mover, locate): (Box<dyn PageMover>, &str) = if config.dry_run {
        (Box::<RecordingPageMover>::default(), "dry run")
    } else {
        let mover = LinuxPageMover::new();
        let how = mover.locates_with();
        if let Some(zero) = mover.zero_frames() {
            tracing::debug!(
                ?zero,
                "pages mapping these zero-page frames are not resident"
            );
        }
        (Box::new(mover), how)
    };
    let site_store = open_site_store(&config)?;
    let listener = bind(&config.socket_path)?;
    let metrics = match &config.metrics {
        Some(address) => Some(metrics::Metrics::bind(address, config.metrics_processes)?),
        None => None,
    };
    serve::install_signal_handlers();
    reload::install_handler();
    clients::raise_fd_limit();
    let mut daemon = Daemon::new(config, topology, source, mover, policy);
    tracing::info!(
        socket = %daemon.config.socket_path.display(),
        tiers = ?daemon.topology.tiers.iter().map(|t| t.nodes.clone()).collect::<Vec<_>>(),
        tier_source = ?daemon.topology.tier_source,
        source = %daemon.source.describe(),
        interval_ms = daemon.config.interval.as_millis() as u64,
        startup = %daemon.config.startup_interval.map_or("off".into(), |s| format!(
            "{} ms for {} s",
            s.as_millis(),
            daemon.config.startup_window.as_secs_f64()
        )),
        policy = %daemon.policy.describe(),
        proactive = %daemon.config.proactive,
        site_store = %site_store.as_ref().map_or("off".into(), |s| s.dir().display().to_string()),
        locate = %locate,
        split = %objtier_policy::units::format_size(daemon.split_bytes()),
        metrics = %daemon.config.metrics.as_ref().map_or("off".into(), |m| m.to_string()),
        "objtier daemon ready"
    );
    daemon.metrics = metrics;
    daemon.reload = reload;
    daemon.llc_counters = llc_counters;
    daemon.site_store = site_store;
    let result = daemon.serve(&listener);
    // What the attached processes learnt outlives the daemon.
    let ids: Vec<u64> = daemon.processes.keys().copied().collect();
    for id in ids {
        daemon.save_sites(id, true);
    }
    daemon.source.release();
    daemon.metrics = None; // its Unix socket, if any, is removed
    let _ = std::fs::remove_file(&daemon.config.socket_path);
    tracing::info!("objtier daemon stopped");
    result
}
