//! The daemon's loop: one thread `poll(2)`s the listening socket, connections that have not
//! said who they are yet, and the attached processes' sockets and pidfds (a hang-up means the
//! process exited or exec'd; a byte is a doorbell, rung once every eighth of the process's
//! ring), and sleeps until one speaks or a deadline comes (the interval, following new objects
//! halfway through it, an access source that polls, idle exit). Every wake-up drains the rings.
//! Keeping it to one thread makes every state change sequential; the rings absorb allocation
//! bursts while a migration runs.

use crate::clients::Clients;
use crate::daemon::Daemon;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static SHUTDOWN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SHUTDOWN.store(true, Ordering::Relaxed);
}

/// Stops the loop at SIGINT or SIGTERM (and ignores SIGPIPE: a control client that hangs up
/// before its answer is not the daemon's end).
pub(crate) fn install_signal_handlers() {
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
}

impl Daemon {
    pub(crate) fn serve(&mut self, listener: &UnixListener) -> anyhow::Result<()> {
        let mut clients = Clients::default();
        self.interval_length = self.next_interval_length();
        let mut next_interval = Instant::now() + self.interval_length;
        // Halfway through each interval, objects allocated in its first half become records
        // (`follow_new_objects`), so they are sampled before it ends.
        let mut follow_at = Some(Instant::now() + self.interval_length / 2);
        let mut idle_since = Some(Instant::now());
        let mut ever_attached = false;
        while !SHUTDOWN.load(Ordering::Relaxed) {
            let mut fds = Vec::new();
            clients.poll_fds(listener, &mut fds);
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
            if let Some(metrics) = &self.metrics {
                fds.extend(metrics.pollfds());
            }
            // Sleep until there is something to do: a connection, a process's doorbell or
            // hang-up (all in `fds`), or the next deadline. Rings are not polled: a process
            // rings its doorbell once every eighth of its ring, and everything that reads what
            // the rings hold (intervals, following new objects, control requests, a detach)
            // drains them first.
            let mut wake_at = next_interval;
            wake_at = wake_at.min(follow_at.unwrap_or(wake_at));
            if let Some(deadline) = clients.next_deadline() {
                wake_at = wake_at.min(deadline);
            }
            if let Some(scrape) = self.metrics.as_ref().and_then(|m| m.deadline()) {
                wake_at = wake_at.min(scrape);
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
            if crate::reload::requested() {
                self.reload_config();
            }

            // Attached processes that hung up: drain what they left, then forget them.
            let offset = clients.poll_len();
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
            // Connections that spoke, or timed out, and new ones.
            let served = offset;
            self.serve_clients(&mut clients, listener, &fds[..served]);
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
            self.serve_metrics();
            if Instant::now() >= next_interval {
                let step = Instant::now();
                self.interval();
                self.interval_ended(step.elapsed());
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
