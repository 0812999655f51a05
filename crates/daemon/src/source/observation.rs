//! What every access source delivers, and the trait it implements (see [`super`]).

use serde::Serialize;
use std::time::Duration;

pub use objtier_sys::damon::Target;
pub use objtier_sys::perf::datasrc::{DataSource, MemLevel};

/// What an observation says about the kind of access, where the source knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum AccessKind {
    Load,
    Store,
    /// Loads and stores alike (page access bits cannot tell them apart).
    Any,
}

/// One weighted observation of accesses by one process to `[start, end)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub pid: u32,
    pub start: u64,
    pub end: u64,
    /// How many accesses this stands for, in the source's unit (DAMON: sampled accesses per
    /// aggregation times pages; perf: samples). Records are ranked by relative weight, so a
    /// source's unit only needs to be consistent with itself.
    pub weight: f64,
    pub kind: AccessKind,
    /// The source's weight of these accesses summed (PEBS load latency, in core cycles), where
    /// it has one: profiles keep it per site.
    pub latency: Option<f64>,
    /// The memory level that served them, and whether they missed the TLB, where the source
    /// says (perf's data source): profiles keep the samples per site and level.
    pub data_source: Option<DataSource>,
    /// When (`CLOCK_MONOTONIC` ns) the accesses were seen: the latest sample's own time where
    /// the source samples one by one (perf), else when the source looked (DAMON's snapshot,
    /// the proc source's scan). A record's last access is the latest of these.
    pub time_ns: u64,
}

/// What a source cost since the daemon started.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SourceCost {
    /// CPU time the daemon spent collecting observations, plus the kernel's own where it is
    /// measurable (DAMON's kdamond thread).
    pub cpu_seconds: f64,
    pub observations: u64,
    /// Samples the kernel dropped (perf ring overflow); 0 where nothing can be lost.
    pub lost: u64,
}

/// An access source. See the module doc.
pub trait Source: Send {
    /// Short name: `damon`, `perf`, `none`, ...
    fn name(&self) -> &'static str;
    /// One line for logs and `objtier status`: the name and how it samples.
    fn describe(&self) -> String;
    /// Whether it observes anything at all (`none` does not).
    fn samples(&self) -> bool {
        true
    }
    /// Monitors these processes (and, where the source can, only these ranges) from now on.
    fn follow(&mut self, targets: &[Target]) -> anyhow::Result<()>;
    /// How often the daemon must call [`poll`](Self::poll) at least: a source with buffers the
    /// kernel fills (perf rings) says how often they need emptying. None (the default): never,
    /// and the daemon may sleep until its next deadline.
    fn poll_every(&self) -> Option<Duration> {
        None
    }
    /// Called at every wake-up of the daemon's loop when [`poll_every`](Self::poll_every) is
    /// Some: empties the kernel's buffers.
    fn poll(&mut self) {}
    /// The observations since the last call.
    fn observe(&mut self) -> anyhow::Result<Vec<Observation>>;
    /// CPU seconds spent outside the daemon's thread (a kernel thread), since the start; the
    /// daemon measures its own time around `observe`.
    fn external_cpu_seconds(&self) -> f64 {
        0.0
    }
    /// Samples lost since the start.
    fn lost(&self) -> u64 {
        0
    }
    /// Stops monitoring and leaves the kernel as found.
    fn release(&mut self) {}
}

/// No sampling: objects are tracked and caps enforced, nothing is promoted.
pub struct NoSource {
    pub reason: String,
}

impl Source for NoSource {
    fn name(&self) -> &'static str {
        "none"
    }
    fn describe(&self) -> String {
        format!("none: {}", self.reason)
    }
    fn samples(&self) -> bool {
        false
    }
    fn follow(&mut self, _targets: &[Target]) -> anyhow::Result<()> {
        Ok(())
    }
    fn observe(&mut self) -> anyhow::Result<Vec<Observation>> {
        Ok(Vec::new())
    }
}

/// CPU time of the calling thread, in seconds.
pub(crate) fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
