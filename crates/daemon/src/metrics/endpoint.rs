//! The endpoint's state: its listener, the scrapes under way, and what it keeps between
//! scrapes (the interval-duration histogram, the ring counters of processes gone).

use super::address::MetricsAddress;
use super::http;
use crate::process::Process;
use prometheus_client::metrics::histogram::Histogram;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a scraper has to send its request.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// Scrapes served at once; more wait in the listener's backlog.
const MAX_CONNECTIONS: usize = 16;

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }

    /// Writes the whole answer, waiting at most a second for a slow reader.
    fn answer(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let timeout = Some(Duration::from_secs(1));
        match self {
            Stream::Tcp(s) => {
                s.set_nonblocking(false)?;
                s.set_write_timeout(timeout)?;
                s.write_all(bytes)
            }
            Stream::Unix(s) => {
                s.set_nonblocking(false)?;
                s.set_write_timeout(timeout)?;
                s.write_all(bytes)
            }
        }
    }
}

/// A scrape whose request has not all arrived yet.
struct Scrape {
    stream: Stream,
    request: Vec<u8>,
    deadline: Instant,
}

/// The metrics endpoint and what it keeps between scrapes.
pub struct Metrics {
    listener: Listener,
    scrapes: Vec<Scrape>,
    /// Most processes exported one by one (the largest by tracked bytes).
    pub max_processes: usize,
    /// How long each interval's step took.
    pub(crate) interval_seconds: Histogram,
    /// Ring counters of processes that have detached.
    pub(crate) detached: RingTotals,
}

/// Events read from processes' rings, and events they dropped because the ring was full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingTotals {
    pub events: u64,
    pub dropped: u64,
    pub invalid: u64,
}

impl RingTotals {
    /// What one process's ring has carried so far.
    pub fn of(p: &Process) -> RingTotals {
        RingTotals {
            events: p.stats.events,
            dropped: p
                .ring
                .header()
                .dropped
                .load(std::sync::atomic::Ordering::Relaxed),
            invalid: p.stats.invalid_events,
        }
    }

    fn add(&mut self, other: RingTotals) {
        self.events += other.events;
        self.dropped += other.dropped;
        self.invalid += other.invalid;
    }
}

/// The interval histogram's buckets, in seconds: a step takes milliseconds with few records
/// and up to its two-interval bound with a million (docs/performance.md).
const INTERVAL_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

impl Metrics {
    /// Listens on `address`. A Unix socket path left by a daemon that is gone is replaced; one
    /// a live process answers on is not.
    pub fn bind(address: &MetricsAddress, max_processes: usize) -> anyhow::Result<Metrics> {
        use anyhow::Context;
        let listener = match address {
            MetricsAddress::Tcp(addr) => {
                Listener::Tcp(TcpListener::bind(addr).with_context(|| {
                    format!("--metrics: cannot listen on {addr}; is another exporter there?")
                })?)
            }
            MetricsAddress::Unix(path) => {
                if path.exists() {
                    if UnixStream::connect(path).is_ok() {
                        anyhow::bail!(
                            "--metrics: something already listens on {}; give another path",
                            path.display()
                        );
                    }
                    std::fs::remove_file(path).with_context(|| {
                        format!(
                            "--metrics: cannot remove the stale socket {}",
                            path.display()
                        )
                    })?;
                }
                let listener = UnixListener::bind(path)
                    .with_context(|| format!("--metrics: cannot listen on {}", path.display()))?;
                Listener::Unix(listener, path.clone())
            }
        };
        match &listener {
            Listener::Tcp(l) => l.set_nonblocking(true)?,
            Listener::Unix(l, _) => l.set_nonblocking(true)?,
        }
        Ok(Metrics {
            listener,
            scrapes: Vec::new(),
            max_processes,
            interval_seconds: Histogram::new(INTERVAL_BUCKETS),
            detached: RingTotals::default(),
        })
    }

    /// The descriptors the daemon's loop polls for this endpoint: the listener, then each
    /// scrape under way.
    pub fn pollfds(&self) -> Vec<libc::pollfd> {
        let listener = match &self.listener {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l, _) => l.as_raw_fd(),
        };
        std::iter::once(listener)
            .chain(self.scrapes.iter().map(|s| s.stream.fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect()
    }

    /// The earliest deadline of a scrape under way.
    pub fn deadline(&self) -> Option<Instant> {
        self.scrapes.iter().map(|s| s.deadline).min()
    }

    /// Counts a detaching process's ring.
    pub fn process_detached(&mut self, p: &Process) {
        self.detached.add(RingTotals::of(p));
    }

    /// Accepts new scrapes and answers those whose request has arrived with the exposition
    /// `body` makes (of the daemon's state, with what this endpoint keeps).
    pub(crate) fn serve(&mut self, body: impl Fn(&Metrics) -> String) {
        loop {
            let accepted = match &self.listener {
                Listener::Tcp(l) => l.accept().map(|(s, _)| {
                    let _ = s.set_nonblocking(true);
                    Stream::Tcp(s)
                }),
                Listener::Unix(l, _) => l.accept().map(|(s, _)| {
                    let _ = s.set_nonblocking(true);
                    Stream::Unix(s)
                }),
            };
            match accepted {
                Ok(stream) if self.scrapes.len() < MAX_CONNECTIONS => self.scrapes.push(Scrape {
                    stream,
                    request: Vec::new(),
                    deadline: Instant::now() + REQUEST_DEADLINE,
                }),
                Ok(_) => {} // dropped: closed at once, the scraper retries
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!("metrics: accept failed: {e}");
                    break;
                }
            }
        }
        let now = Instant::now();
        let mut waiting = Vec::new();
        for mut scrape in std::mem::take(&mut self.scrapes) {
            let mut buf = [0u8; 4096];
            let closed = loop {
                match scrape.stream.read(&mut buf) {
                    Ok(0) => break true,
                    Ok(n) => scrape.request.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                    Err(_) => break true,
                }
            };
            match http::respond(&scrape.request, || body(self)) {
                Some(answer) => {
                    if let Err(e) = scrape.stream.answer(&answer) {
                        tracing::debug!("metrics: a scraper left before its answer: {e}");
                    }
                }
                None if !closed && now < scrape.deadline => waiting.push(scrape),
                None => {}
            }
        }
        self.scrapes = waiting;
    }
}

impl Drop for Metrics {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = &self.listener {
            let _ = std::fs::remove_file(path);
        }
    }
}
