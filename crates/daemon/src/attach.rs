//! Processes coming and going: the handshake of a process's library (its credentials, its
//! ring, its placement file), warm start at attach, and what is kept when it detaches.

use crate::clock::monotonic_ns;
use crate::daemon::Daemon;
use crate::process::{Process, RingMapping};
use crate::sitestore;
use anyhow::{bail, Context};
use objtier_sys::socket::PeerCred;
use objtier_wire::{hello_flags, Hello, HELLO_BYTES};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;

/// A process closed its socket between its hello and the daemon's answer: it exited, or exec'd
/// (the socket is close-on-exec).
#[derive(Debug, thiserror::Error)]
#[error("pid {pid} hung up during its handshake (it exited or exec'd)")]
pub(crate) struct HungUpDuringHandshake {
    pid: u32,
}

impl Daemon {
    /// Attaches the process on `stream` (whose credentials are `cred`) that sent `hello`
    /// with descriptors `fds`: its ring, and its placement file if the hello says so.
    pub(crate) fn attach(
        &mut self,
        stream: UnixStream,
        cred: PeerCred,
        hello: &[u8; HELLO_BYTES],
        mut fds: Vec<OwnedFd>,
    ) -> anyhow::Result<()> {
        if self.euid != 0 && cred.uid != self.euid {
            bail!(
                "pid {} belongs to uid {}, this daemon runs as uid {}: a daemon only serves its \
                 own user unless it runs as root",
                cred.pid,
                cred.uid,
                self.euid
            );
        }
        let hello =
            Hello::from_bytes(hello).map_err(|e| anyhow::anyhow!("pid {}: {e}", cred.pid))?;
        if hello.flags & !hello_flags::ALL != 0 {
            bail!(
                "pid {} sent hello flags {:#x} this daemon does not know: use libobjtier.so and \
                 objtier from the same build",
                cred.pid,
                hello.flags
            );
        }
        self.check_claimed_pid(cred, hello.pid)?;
        let placement_fd = (hello.flags & hello_flags::PLACEMENT != 0 && fds.len() == 2)
            .then(|| fds.pop())
            .flatten();
        let fd = fds
            .into_iter()
            .next()
            .ok_or_else(|| anyhow::anyhow!("pid {} sent no ring", cred.pid))?;
        let ring = RingMapping::map(&fd, hello.shared_bytes)
            .with_context(|| format!("pid {}: bad ring", cred.pid))?;
        self.check_ring_is_its_own(cred, &ring)?;
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
        let proc_root = self.config.proc_root.clone();
        let program = match sitestore::Program::of_process(&proc_root, p.pid, p.uid) {
            Ok(program) => program,
            Err(e) => {
                tracing::info!(pid = p.pid, "no warm start: cannot tell its program: {e}");
                return;
            }
        };
        self.warm_start(id, program, |pid| {
            objtier_sys::maps::Maps::read(&proc_root, pid)
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
        p.warm = Some(crate::process::WarmStart::new(
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
            if let Some(metrics) = &mut self.metrics {
                metrics.process_detached(&p);
            }
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
}

/// True if the peer has closed the socket already (non-blocking check).
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
