//! The objtier daemon: watches every attached process, samples accesses, and moves pages.
//!
//! One thread runs a `poll(2)` loop over the listening socket, handshaking clients, and attached
//! processes' sockets (a hang-up means the process exited or exec'd; a byte is a doorbell, rung
//! once every eighth of the process's ring). Every wake-up it drains the processes' event
//! rings, and it sleeps until a socket speaks or a deadline comes, not polling the rings; every
//! interval (2 s by default) it runs the tiering step ([`interval`]): aggregate sampled accesses
//! into per-record EMAs, rank, plan with `objtier-policy`, and migrate with `move_pages`, making
//! room before promoting. Keeping it to one thread makes every state change sequential; the
//! rings absorb allocation bursts while a migration runs.
//!
//! Layout: [`config`] (what the user can set), [`process`] (per-process state fed by the ring),
//! [`source`] (where access observations come from), [`interval`] (the interval, stage by stage), [`sitestore`]
//! (placements saved per program for its next run), [`guided`] (a placement file applied to a
//! process, `objtier run --placement`), [`recorder`] and [`sessions`] (profiles of the
//! processes of an `objtier profile` run; `profiling` wires them in), [`status`] (what
//! `objtier status` prints), and this file (sockets and the loop).

pub mod config;
pub mod guided;
pub mod interval;
pub mod pending;
mod phases;
pub mod process;
mod profiling;
pub mod record;
pub mod recorder;
pub mod records;
mod room;
pub mod sessions;
pub mod sitestore;
pub mod source;
pub mod status;

use anyhow::{bail, Context};
use config::DaemonConfig;
use objtier_sys::pages::{LinuxPageMover, PageMover, RecordingPageMover};
use objtier_sys::socket::{peer_cred, recv_with_fds};
use objtier_sys::topology::Topology;
use objtier_wire::{hello_flags, Hello, CONTROL_MAGIC, HELLO_BYTES, RING_MAGIC};
use process::{Process, RingMapping};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static SHUTDOWN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SHUTDOWN.store(true, Ordering::Relaxed);
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock the library stamps events with.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A connection that has not said who it is yet.
struct Handshake {
    stream: UnixStream,
    deadline: Instant,
}

/// Everything the daemon knows.
pub struct Daemon {
    pub config: DaemonConfig,
    pub topology: Topology,
    pub processes: BTreeMap<u64, Process>,
    pub source: source::AccessSource,
    pub mover: Box<dyn PageMover>,
    pub started: Instant,
    pub totals: interval::Totals,
    pub last_interval: Option<interval::IntervalReport>,
    /// Length of the interval under way: `config.interval`, or `config.startup_interval` while
    /// a process is young ([`Daemon::next_interval_length`]).
    pub interval_length: Duration,
    /// The tiering policy's routines (built from the config, or a custom one given to
    /// [`run_with_policy`]).
    pub policy: objtier_policy::Policy,
    /// What the triggers have seen since the last enforcement.
    pub since_enforcement: interval::SinceEnforcement,
    /// LLC-miss and instruction counters, when a trigger needs them.
    pub llc_counters: Option<objtier_sys::perf::LlcCounters>,
    /// Warm start's store; None when warm start is off (or has no directory).
    pub site_store: Option<sitestore::SiteStore>,
    /// Profile sessions (`objtier profile`).
    pub sessions: sessions::Sessions,
    /// Placement files processes brought, parsed.
    placement_cache: guided::PlacementCache,
    /// Pids of commands about to run a program here (`objtier run` asks, `hold`): a daemon that
    /// exits when idle waits for them, or it could exit between their check and their attach.
    held_pids: Vec<u32>,
    /// Pages of all records at the last enforcement: how many of them one interval locates.
    record_pages: u64,
    /// An enforcement's largest buffers, kept for the next one.
    buffers: interval::IntervalBuffers,
    /// Whether splitting a huge page has failed once already (said once, then only debug).
    huge_split_failed: bool,
    next_process_id: u64,
    euid: u32,
}

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

/// Runs the daemon with the built-in policy the config names, until SIGINT/SIGTERM (or, with
/// `exit_when_idle`, until no process is left).
pub fn run(config: DaemonConfig) -> anyhow::Result<()> {
    let policy = builtin_policy(&config);
    run_with_policy(config, policy)
}

/// Runs the daemon with any policy: the built-in routines or a program's own (see
/// `examples/custom-policy`).
pub fn run_with_policy(config: DaemonConfig, policy: objtier_policy::Policy) -> anyhow::Result<()> {
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
            objtier_sys::perf::LlcCounters::open(&config.sys_root, Path::new("/proc"))
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
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
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
        "objtier daemon ready"
    );
    daemon.llc_counters = llc_counters;
    daemon.site_store = site_store;
    let result = daemon.serve(&listener);
    // What the attached processes learnt outlives the daemon.
    let ids: Vec<u64> = daemon.processes.keys().copied().collect();
    for id in ids {
        daemon.save_sites(id, true);
    }
    daemon.source.release();
    let _ = std::fs::remove_file(&daemon.config.socket_path);
    tracing::info!("objtier daemon stopped");
    result
}

impl Daemon {
    /// A daemon with no process attached yet. `run` builds one from the machine; tests and
    /// benches build one from a synthetic topology and a recording page mover, insert
    /// `Process::synthetic` processes into `processes`, and call [`Daemon::interval`]
    /// themselves.
    pub fn new(
        config: DaemonConfig,
        topology: Topology,
        source: source::AccessSource,
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
            totals: interval::Totals::default(),
            last_interval: None,
            record_pages: 0,
            buffers: Default::default(),
            huge_split_failed: false,
            policy,
            since_enforcement: interval::SinceEnforcement::default(),
            llc_counters: None,
            site_store: None,
            sessions: sessions::Sessions::default(),
            placement_cache: guided::PlacementCache::default(),
            held_pids: Vec::new(),
            next_process_id: 1,
            // SAFETY: geteuid has no failure mode.
            euid: unsafe { libc::geteuid() },
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

    fn serve(&mut self, listener: &UnixListener) -> anyhow::Result<()> {
        let mut handshakes: Vec<Handshake> = Vec::new();
        self.interval_length = self.next_interval_length();
        let mut next_interval = Instant::now() + self.interval_length;
        // Halfway through each interval, objects allocated in its first half become records
        // (`follow_new_objects`), so they are sampled before it ends.
        let mut follow_at = Some(Instant::now() + self.interval_length / 2);
        let mut idle_since = Some(Instant::now());
        let mut ever_attached = false;
        while !SHUTDOWN.load(Ordering::Relaxed) {
            let mut fds = vec![libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            fds.extend(handshakes.iter().map(|h| libc::pollfd {
                fd: h.stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }));
            let ids: Vec<u64> = self.processes.keys().copied().collect();
            fds.extend(self.processes.values().map(|p| libc::pollfd {
                fd: p.socket.as_raw_fd(),
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            }));
            // A process may exit without its socket hanging up (a child that inherited the
            // socket without exec keeps it open): its pidfd says so.
            fds.extend(self.processes.values().map(|p| libc::pollfd {
                fd: p.pidfd.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            }));
            // Sleep until there is something to do: a connection, a process's doorbell or
            // hang-up (all in `fds`), or the next deadline. Rings are not polled: a process
            // rings its doorbell once every eighth of its ring, and everything that reads what
            // the rings hold (intervals, following new objects, control requests, a detach)
            // drains them first.
            let mut wake_at = next_interval;
            wake_at = wake_at.min(follow_at.unwrap_or(wake_at));
            if let Some(h) = handshakes.iter().map(|h| h.deadline).min() {
                wake_at = wake_at.min(h);
            }
            if let Some(every) = self.source.poll_every() {
                wake_at = wake_at.min(Instant::now() + every);
            }
            if self.processes.is_empty() && self.config.exit_when_idle {
                // Idle-exit checks (and a watched pid's `kill(pid, 0)`) once a second.
                wake_at = wake_at.min(Instant::now() + Duration::from_secs(1));
            }
            let timeout = wake_at.saturating_duration_since(Instant::now());
            // Rounded up, so that a wake-up never comes just before its deadline and spins.
            let timeout_ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            // SAFETY: polling fds we own for the duration of the call.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };

            // Attached processes that hung up: drain what they left, then forget them.
            let offset = 1 + handshakes.len();
            for (i, id) in ids.iter().enumerate() {
                let revents = fds[offset + i].revents;
                let exited = fds[offset + ids.len() + i].revents != 0;
                if exited
                    || revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL)
                        != 0
                    || (revents & libc::POLLIN != 0 && peer_closed(&self.processes[id].socket))
                {
                    self.detach(*id);
                }
            }
            // Handshakes that spoke, or timed out.
            let mut still_waiting = Vec::new();
            for (i, h) in handshakes.drain(..).enumerate() {
                if fds[1 + i].revents != 0 {
                    self.handshake(h.stream);
                } else if Instant::now() < h.deadline {
                    still_waiting.push(h);
                }
            }
            handshakes = still_waiting;
            // New connections.
            loop {
                match listener.accept() {
                    Ok((stream, _)) => handshakes.push(Handshake {
                        stream,
                        deadline: Instant::now() + Duration::from_secs(5),
                    }),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        break;
                    }
                }
            }
            for p in self.processes.values_mut() {
                p.drain();
            }
            self.judge_early();
            self.source.poll();
            if follow_at.is_some_and(|at| Instant::now() >= at) && Instant::now() < next_interval {
                follow_at = None;
                // Errors are logged; the interval's own call reports them.
                let _ = self.follow_new_objects();
            }
            if Instant::now() >= next_interval {
                self.interval();
                self.interval_length = self.next_interval_length();
                next_interval += self.interval_length;
                let deferred = self
                    .last_interval
                    .as_ref()
                    .is_some_and(|r| r.deferred_pages > 0);
                if deferred {
                    // Migration work is left: plan it again right away (after this loop's
                    // housekeeping), not an interval later.
                    next_interval = Instant::now();
                } else if next_interval < Instant::now() {
                    // The step overran: skip missed ticks.
                    next_interval = Instant::now() + self.interval_length;
                }
                follow_at = next_interval.checked_sub(self.interval_length / 2);
            }
            // An open profile session waits for its processes, or its client's finish; a
            // command that said it will run a program here, for it.
            // SAFETY: kill(pid, 0) only checks for existence.
            self.held_pids
                .retain(|&pid| unsafe { libc::kill(pid as libc::pid_t, 0) } == 0);
            if self.processes.is_empty() && !self.sessions.any_open() && self.held_pids.is_empty() {
                let since = *idle_since.get_or_insert_with(Instant::now);
                let linger = if ever_attached {
                    self.config.idle_linger
                } else {
                    self.config.idle_first_wait
                };
                // SAFETY: kill(pid, 0) only checks for existence.
                let watched_gone = self
                    .config
                    .exit_with_pid
                    .is_some_and(|pid| unsafe { libc::kill(pid as libc::pid_t, 0) } != 0);
                let linger = if watched_gone {
                    linger.min(Duration::from_secs(1))
                } else {
                    linger
                };
                if self.config.exit_when_idle && since.elapsed() >= linger {
                    tracing::info!("no attached processes left; exiting (--exit-when-idle)");
                    break;
                }
            } else {
                idle_since = None;
                ever_attached = true;
            }
        }
        Ok(())
    }

    fn handshake(&mut self, stream: UnixStream) {
        let mut magic = [0u8; 8];
        // SAFETY: peeks into a stack buffer of the given size.
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                magic.as_mut_ptr() as *mut libc::c_void,
                magic.len(),
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n < 8 {
            return; // closed, or too short to say anything: drop it
        }
        match u64::from_le_bytes(magic) {
            RING_MAGIC => {
                match self.attach(stream) {
                    Ok(()) => {}
                    // Nothing to tell the user: the process exited or exec'd (the new program
                    // attaches on its own), as short commands under `objtier run` do.
                    Err(e) if e.is::<HungUpDuringHandshake>() => tracing::debug!("{e}"),
                    Err(e) => tracing::warn!("refused a process: {e:#}"),
                }
            }
            CONTROL_MAGIC => {
                if let Err(e) = self.control(stream) {
                    tracing::warn!("control request failed: {e:#}");
                }
            }
            _ => tracing::warn!(
                "refused a connection that is neither a process nor a control client"
            ),
        }
    }

    fn attach(&mut self, stream: UnixStream) -> anyhow::Result<()> {
        let cred = peer_cred(&stream).context("SO_PEERCRED")?;
        if self.euid != 0 && cred.uid != self.euid {
            bail!(
                "pid {} belongs to uid {}, this daemon runs as uid {}: a daemon only serves its \
                 own user unless it runs as root",
                cred.pid,
                cred.uid,
                self.euid
            );
        }
        let mut buf = [0u8; HELLO_BYTES];
        let (n, mut fds) = recv_with_fds(&stream, &mut buf, 2).context("receiving the hello")?;
        if n != HELLO_BYTES {
            bail!("short hello from pid {} ({n} bytes)", cred.pid);
        }
        let hello =
            Hello::from_bytes(&buf).map_err(|e| anyhow::anyhow!("pid {}: {e}", cred.pid))?;
        if hello.flags & !hello_flags::ALL != 0 {
            bail!(
                "pid {} sent hello flags {:#x} this daemon does not know: use libobjtier.so and \
                 objtier from the same build",
                cred.pid,
                hello.flags
            );
        }
        let placement_fd = (hello.flags & hello_flags::PLACEMENT != 0 && fds.len() == 2)
            .then(|| fds.pop())
            .flatten();
        let fd = fds
            .into_iter()
            .next()
            .ok_or_else(|| anyhow::anyhow!("pid {} sent no ring", cred.pid))?;
        let ring = RingMapping::map(&fd, hello.shared_bytes)
            .with_context(|| format!("pid {}: bad ring", cred.pid))?;
        // Where each tier's memory is, for the library to place new objects: told after the
        // sites remembered for the program are placed (below), so a library that knows the
        // tiers knows those placements too.
        let tier_masks: Vec<u64> = self
            .topology
            .tiers
            .iter()
            .map(|t| {
                t.nodes
                    .iter()
                    .filter(|&&n| n < 64)
                    .fold(0, |m, &n| m | 1 << n)
            })
            .collect();
        // Bind to the process itself, not its pid. It is connected, so it has not exited and
        // its pid cannot have been reused; the pidfd keeps that true for as long as we hold it.
        let pidfd = match objtier_sys::socket::pidfd_open(cred.pid) {
            Ok(fd) if !peer_closed_now(&stream) => Some(fd),
            Ok(_) => return Err(HungUpDuringHandshake { pid: cred.pid }.into()),
            Err(e) => {
                tracing::debug!(
                    pid = cred.pid,
                    "no pidfd ({e}); relying on the socket alone"
                );
                None
            }
        };
        ring.header()
            .consumer_generation
            .fetch_add(1, Ordering::Relaxed);
        stream.set_nonblocking(true)?;
        let id = self.next_process_id;
        self.next_process_id += 1;
        let tiers = self.topology.tiers.len();
        tracing::info!(
            pid = cred.pid,
            uid = cred.uid,
            priority = hello.priority,
            fast_capacity_bytes = hello.fast_capacity_bytes,
            "process attached"
        );
        let mut process = Process::new(id, cred.pid, cred.uid, stream, ring, self.split_bytes());
        process.priority = hello.priority;
        process.fast_capacity_bytes =
            (hello.fast_capacity_bytes > 0).then_some(hello.fast_capacity_bytes);
        process.attached_ns = monotonic_ns();
        process.lifetimes = crate::process::SiteLifetimes::new(
            self.config.interval.as_nanos() as u64,
            self.config.short_lived_sites,
        );
        process.resident_bytes_by_tier = vec![0; tiers];
        process.pidfd = pidfd;
        process.no_migrate = hello.flags & hello_flags::NO_MIGRATE != 0;
        process.profile_token = hello.profile_token;
        self.processes.insert(id, process);
        if hello.profile_token != 0 {
            self.join_profile(id);
        }
        match placement_fd {
            // A placement is the program's word on where its sites go: warm start's guesses
            // would only second-guess it.
            Some(fd) => {
                self.apply_placement(id, fd);
                self.make_room_for_placement(id);
            }
            None => self.warm_start_at_attach(id),
        }
        self.processes[&id].ring.control().set_tiers(&tier_masks);
        Ok(())
    }

    /// Looks up the program of a newly attached process in the site store, and places the
    /// remembered sites it can already (`Process::predict_sites`).
    fn warm_start_at_attach(&mut self, id: u64) {
        let Some(p) = self.processes.get(&id) else {
            return;
        };
        if self.site_store.is_none() {
            return;
        }
        let proc_root = Path::new("/proc");
        let program = match sitestore::Program::of_process(proc_root, p.pid, p.uid) {
            Ok(program) => program,
            Err(e) => {
                tracing::info!(pid = p.pid, "no warm start: cannot tell its program: {e}");
                return;
            }
        };
        self.warm_start(id, program, |pid| {
            objtier_sys::maps::Maps::read(proc_root, pid)
                .map_err(|e| tracing::debug!(pid, "cannot read its memory map: {e}"))
                .ok()
        });
    }

    /// Gives process `id` the store's knowledge of `program`, and places (or marks short-lived)
    /// the remembered sites whose modules its memory map shows. The map is kept for naming the
    /// sites of a run that ends before an interval does.
    pub fn warm_start(
        &mut self,
        id: u64,
        program: sitestore::Program,
        read_maps: impl FnOnce(u32) -> Option<objtier_sys::maps::Maps>,
    ) {
        let (Some(store), Some(p)) = (&self.site_store, self.processes.get_mut(&id)) else {
            return;
        };
        let sites = store.load(&program);
        let remembered = sites.len();
        let file = store.file_of(&program);
        let exe = program.exe.clone();
        p.warm = Some(process::WarmStart::new(
            program,
            file,
            sites,
            self.topology.tiers.len(),
        ));
        let maps = read_maps(p.pid);
        let (placed, short_lived) = match &maps {
            Some(maps) if remembered > 0 => p.predict_sites(maps),
            _ => (0, 0),
        };
        p.last_maps = maps;
        if remembered > 0 {
            tracing::info!(
                pid = p.pid,
                exe,
                remembered,
                placed,
                short_lived,
                "warm start: sites remembered from an earlier run; placed (or marked short-lived) now those whose modules are mapped"
            );
        }
    }

    /// Forgets a process that hung up, after draining what it left and saving what it learnt.
    pub fn detach(&mut self, id: u64) {
        if let Some(mut p) = self.processes.remove(&id) {
            p.drain();
            if let Some(store) = &self.site_store {
                p.save_sites(store, monotonic_ns(), true);
            }
            if p.recorder.is_some() {
                self.leave_profile(&mut p);
            }
            tracing::info!(
                pid = p.pid,
                objects = p.objects.objects().len(),
                "process detached"
            );
        }
    }

    /// Saves what process `id` learnt, if anything changed since its last save (`finally`:
    /// the daemon stops; see `Process::save_sites`).
    pub fn save_sites(&mut self, id: u64, finally: bool) {
        if let (Some(store), Some(p)) = (&self.site_store, self.processes.get_mut(&id)) {
            p.save_sites(store, monotonic_ns(), finally);
        }
    }

    fn control(&mut self, stream: UnixStream) -> anyhow::Result<()> {
        // Answer from everything the processes have said (their rings are drained on doorbells
        // and deadlines, not continuously): a site just described can be placed, a status
        // counts the objects just allocated.
        for p in self.processes.values_mut() {
            p.drain();
        }
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.set_write_timeout(Some(Duration::from_secs(2)))?;
        let mut reader = BufReader::new(&stream);
        let mut magic = [0u8; 8];
        std::io::Read::read_exact(&mut reader, &mut magic)?;
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let reply = match serde_json::from_str::<serde_json::Value>(&line) {
            Ok(request) => match request.get("cmd").and_then(|c| c.as_str()) {
                Some("status") => status::status_json(self),
                Some("place") => {
                    let peer_uid = peer_cred(&stream).map(|c| c.uid).ok();
                    self.place(&request, peer_uid)
                        .unwrap_or_else(|e| serde_json::json!({ "error": e }))
                }
                // The asking process runs a program here soon: an idle daemon waits for it.
                Some("hold") => match peer_cred(&stream) {
                    Ok(cred) if self.held_pids.len() < 4096 => {
                        self.held_pids.push(cred.pid);
                        serde_json::json!({ "held": cred.pid })
                    }
                    Ok(_) => serde_json::json!({ "error": "too many commands held" }),
                    Err(e) => serde_json::json!({ "error": format!("SO_PEERCRED: {e}") }),
                },
                Some("profile-start") => {
                    let peer_uid = peer_cred(&stream).map(|c| c.uid).ok();
                    self.profile_start(&request, peer_uid)
                        .unwrap_or_else(|e| serde_json::json!({ "error": e }))
                }
                Some("profile-snapshot") => {
                    let peer_uid = peer_cred(&stream).map(|c| c.uid).ok();
                    self.profile_snapshot(&request, peer_uid)
                        .unwrap_or_else(|e| serde_json::json!({ "error": e }))
                }
                Some("profile-finish") => {
                    let peer_uid = peer_cred(&stream).map(|c| c.uid).ok();
                    self.profile_finish(&request, peer_uid)
                        .unwrap_or_else(|e| serde_json::json!({ "error": e }))
                }
                Some(other) => serde_json::json!({
                    "error": format!(
                        "unknown command {other:?}; this daemon knows: status, place, hold, \
                         profile-start, profile-finish, profile-snapshot"
                    )
                }),
                None => serde_json::json!({"error": "request has no \"cmd\""}),
            },
            Err(e) => serde_json::json!({"error": format!("malformed request: {e}")}),
        };
        let mut out = &stream;
        serde_json::to_writer(&mut out, &reply)?;
        out.write_all(b"\n")?;
        Ok(())
    }
}

impl Daemon {
    /// `{"cmd":"place","pid":P,"site":"0x..."|N,"tier":T|null}`: new objects of the site start in
    /// tier T (null: wherever first touch puts them). Only root or the process's owner may.
    fn place(
        &mut self,
        request: &serde_json::Value,
        peer_uid: Option<u32>,
    ) -> Result<serde_json::Value, String> {
        let pid = request
            .get("pid")
            .and_then(|v| v.as_u64())
            .ok_or("\"pid\" (a number) is required")? as u32;
        let site = match request.get("site") {
            Some(serde_json::Value::Number(n)) => n.as_u64(),
            Some(serde_json::Value::String(s)) => {
                let hex = s.trim_start_matches("0x").trim_start_matches("0X");
                u64::from_str_radix(hex, 16).ok()
            }
            _ => None,
        }
        .filter(|&s| s != 0)
        .ok_or("\"site\" is required: a site id as `objtier status --json` lists it (hex string or number)")?;
        let tiers = self.topology.tiers.len();
        let tier = match request.get("tier") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|&t| (t as usize) < tiers).ok_or(format!(
                "\"tier\" must be a tier number below {tiers}, or null"
            ))? as u32),
        };
        let process = self
            .processes
            .values_mut()
            .filter(|p| p.pid == pid)
            .max_by_key(|p| p.id)
            .ok_or(format!("pid {pid} is not attached to this daemon"))?;
        if peer_uid != Some(0) && peer_uid != Some(process.uid) {
            return Err(format!(
                "pid {pid} belongs to uid {}: only it or root may place its objects",
                process.uid
            ));
        }
        if !process.place_site(site, tier) {
            return Err(format!(
                "the placement table of pid {pid} is full around this site; clear another first"
            ));
        }
        tracing::info!(pid, site = format_args!("{site:#x}"), ?tier, "site placed");
        Ok(
            serde_json::json!({ "ok": true, "pid": pid, "site": format!("{site:#018x}"), "tier": tier }),
        )
    }
}

/// True if the peer has closed the socket already (non-blocking check).
/// A process closed its socket between its hello and the daemon's answer: it exited, or exec'd
/// (the socket is close-on-exec).
#[derive(Debug, thiserror::Error)]
#[error("pid {pid} hung up during its handshake (it exited or exec'd)")]
struct HungUpDuringHandshake {
    pid: u32,
}

fn peer_closed_now(stream: &UnixStream) -> bool {
    let mut fds = [libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    }];
    // SAFETY: polls one fd we own, without waiting.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
    n > 0 && fds[0].revents & (libc::POLLRDHUP | libc::POLLHUP) != 0
}

/// True if a readable socket is readable only because the peer closed it.
fn peer_closed(stream: &UnixStream) -> bool {
    let mut buf = [0u8; 256];
    // SAFETY: reads into a stack buffer; non-blocking.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    n == 0
}
