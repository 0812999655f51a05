//! DAMON virtual-address monitoring as an access source: the kernel samples page access bits
//! in the tracked ranges of every attached process, and each aggregated region becomes one
//! observation weighted by its access frequency times its pages.
//!
//! DAMON counts accesses per aggregation (100 ms) and starts again at 0 in the next one, and a
//! snapshot of its regions waits for the end of an aggregation (0.1-0.3 s at 100 ms, measured
//! on 6.12). One snapshot per 2 s interval sees 5 % of DAMON's samples: a program that sweeps
//! its arrays once a second then looks idle in most intervals (lammps did). So a sampler thread
//! of its own owns the kdamond and takes `--damon-snapshots` snapshots an interval, evenly
//! spaced, and an interval gets every region's mean over the snapshots taken since the last:
//! the same unit as one aggregation's count, from several times the samples. The daemon's loop
//! never waits on the kernel: [`Source::follow`] hands the targets over, and the sampler
//! applies them before its next snapshot.

use super::observation::{AccessKind, Observation, Source, Target};
use crate::config::DaemonConfig;
use objtier_sys::damon::{Damon, DamonError, RealFiles, RegionSample};
use objtier_wire::PAGE_SIZE;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct DamonSource {
    operations: &'static str,
    snapshots: u32,
    shared: Arc<Shared>,
    sampler: Option<JoinHandle<()>>,
}

/// What the daemon's loop and the sampler thread exchange.
struct Shared {
    state: Mutex<State>,
    /// Wakes an idle sampler (no targets) when targets arrive or it must stop.
    wake: Condvar,
    stop: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Targets handed over by `follow` and not yet applied.
    targets: Option<Vec<Target>>,
    taken: Accumulator,
    /// The first error since the last `observe`.
    error: Option<String>,
    /// CPU seconds of the sampler thread and of every kdamond it ran, since the start.
    cpu_seconds: f64,
}

/// Regions summed over snapshots until an interval takes their mean.
#[derive(Debug, Default)]
pub(crate) struct Accumulator {
    /// (pid, start, end) → (sum of accesses × pages, time of the latest snapshot that saw any).
    regions: BTreeMap<(u32, u64, u64), (f64, u64)>,
    snapshots: u32,
}

impl Accumulator {
    /// Adds one snapshot; `pids[r.target]` is each region's process.
    pub(crate) fn add(&mut self, regions: &[RegionSample], pids: &[u32], time_ns: u64) {
        self.snapshots += 1;
        for r in regions.iter().filter(|r| r.nr_accesses > 0) {
            let Some(&pid) = pids.get(r.target) else {
                continue;
            };
            let pages = (r.end - r.start) / PAGE_SIZE as u64;
            let sum = self.regions.entry((pid, r.start, r.end)).or_default();
            sum.0 += r.nr_accesses as f64 * pages as f64;
            sum.1 = time_ns;
        }
    }

    /// The mean per snapshot of every region seen accessed, and starts again.
    pub(crate) fn take(&mut self) -> Vec<Observation> {
        let snapshots = std::mem::take(&mut self.snapshots).max(1) as f64;
        std::mem::take(&mut self.regions)
            .into_iter()
            .map(|((pid, start, end), (sum, time_ns))| Observation {
                latency: None,
                data_source: None,
                pid,
                start,
                end,
                weight: sum / snapshots,
                kind: AccessKind::Any,
                time_ns,
            })
            .collect()
    }
}

/// Claims a kdamond of our own (never one another tool created) and starts the sampler.
pub fn open(config: &DaemonConfig) -> Result<DamonSource, DamonError> {
    let mut damon = Damon::new(RealFiles, &config.sys_root, config.damon.clone())
        .with_owner_file(config.damon_owner_file.clone());
    damon.claim()?;
    if damon.reclaimed_stale() {
        tracing::info!("reclaimed the stopped kdamond a previous objtier daemon left behind");
    }
    let shared = Arc::new(Shared {
        state: Mutex::default(),
        wake: Condvar::new(),
        stop: AtomicBool::new(false),
    });
    let operations = damon.operations();
    let pace = Pace {
        every: config.interval / config.damon_snapshots.max(1),
        idle: Duration::from_micros(config.damon.aggr_us.max(1_000)),
        proc_root: config.proc_root.clone(),
    };
    let for_sampler = Arc::clone(&shared);
    let sampler = std::thread::Builder::new()
        .name("objtier-damon".into())
        .spawn(move || sample(damon, &for_sampler, pace))
        .map_err(|e| DamonError::Io {
            path: "(the DAMON sampler thread)".into(),
            source: e,
        })?;
    Ok(DamonSource {
        operations,
        snapshots: config.damon_snapshots,
        shared,
        sampler: Some(sampler),
    })
}

/// CPU seconds of the kdamond threads the sampler ran: each restart starts a new one.
#[derive(Debug, Default)]
struct KdamondTime {
    /// Seconds of those that exited.
    exited: f64,
    /// The running one's pid and seconds when last read.
    current: Option<(u32, f64)>,
}

impl KdamondTime {
    /// Takes the running kdamond's pid (None: none runs) and returns the seconds of all of
    /// them; `seconds_of` reads a thread's CPU time (None when it cannot).
    fn update(&mut self, pid: Option<u32>, seconds_of: impl Fn(u32) -> Option<f64>) -> f64 {
        let last = match self.current {
            Some((old, last)) if Some(old) == pid => last,
            Some((_, last)) => {
                self.exited += last;
                0.0
            }
            None => 0.0,
        };
        self.current = pid.map(|p| (p, seconds_of(p).unwrap_or(last)));
        self.exited + self.current.map_or(0.0, |(_, s)| s)
    }
}

/// How often the sampler looks.
#[derive(Clone)]
struct Pace {
    /// From the start of one snapshot to the start of the next (interval / snapshots).
    every: Duration,
    /// How long to wait for targets while there are none, or after an error.
    idle: Duration,
    /// Where the kdamond's CPU time is read (`<proc_root>/PID/stat`).
    proc_root: std::path::PathBuf,
}

/// The sampler thread: applies new targets, takes a snapshot, adds it up, waits for the next
/// one's time; until told to stop. Dropping `damon` at the end stops and removes the kdamond.
fn sample(mut damon: Damon<RealFiles>, shared: &Shared, pace: Pace) {
    let own_start = super::observation::thread_cpu_seconds();
    let mut kdamonds = KdamondTime::default();
    let mut account = |damon: &mut Damon<RealFiles>, shared: &Shared| {
        let kdamond = kdamonds.update(damon.kdamond_pid(), |pid| {
            objtier_sys::damon::thread_cpu_seconds(&pace.proc_root, pid)
        });
        shared.state.lock().unwrap().cpu_seconds =
            super::observation::thread_cpu_seconds() - own_start + kdamond;
    };
    while !shared.stop.load(Ordering::Relaxed) {
        let targets = shared.state.lock().unwrap().targets.take();
        if let Some(targets) = targets {
            // A restart replaces the kdamond thread: count the old one's time first.
            account(&mut damon, shared);
            if let Err(e) = damon.set_targets(&targets) {
                tracing::warn!("cannot update DAMON's targets: {e}");
                shared
                    .state
                    .lock()
                    .unwrap()
                    .error
                    .get_or_insert(e.to_string());
            }
        }
        // Blocks until the end of the kdamond's next aggregation.
        let started = Instant::now();
        let snapshot = damon.snapshot();
        let time_ns = crate::clock::monotonic_ns();
        account(&mut damon, shared);
        let mut state = shared.state.lock().unwrap();
        match snapshot {
            Ok(regions) if !regions.is_empty() => {
                let pids: Vec<u32> = damon.targets().iter().map(|t| t.pid).collect();
                state.taken.add(&regions, &pids, time_ns);
                // The next snapshot's time; new targets wait for it too (a restart would only
                // lose the regions' history sooner), stopping does not.
                let next = started + pace.every;
                while !shared.stop.load(Ordering::Relaxed) {
                    let Some(left) = next.checked_duration_since(Instant::now()) else {
                        break;
                    };
                    state = shared.wake.wait_timeout(state, left).unwrap().0;
                }
            }
            // Nothing to monitor (or the kdamond stopped itself): wait for targets.
            Ok(_) => {
                if state.targets.is_none() && !shared.stop.load(Ordering::Relaxed) {
                    let _ = shared.wake.wait_timeout(state, pace.idle);
                }
            }
            Err(e) => {
                state.error.get_or_insert(e.to_string());
                drop(state);
                std::thread::sleep(pace.idle);
            }
        }
    }
}

impl DamonSource {
    fn stop(&mut self) {
        let Some(sampler) = self.sampler.take() else {
            return;
        };
        // Under the lock, so that the sampler cannot miss the wake-up between its check of
        // `stop` and its wait.
        let state = self.shared.state.lock().unwrap();
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.wake.notify_all();
        drop(state);
        if sampler.join().is_err() {
            tracing::warn!("the DAMON sampler thread panicked; its kdamond may be left running");
        }
    }
}

impl Source for DamonSource {
    fn name(&self) -> &'static str {
        "damon"
    }

    fn describe(&self) -> String {
        format!(
            "damon ({}, {} snapshots an interval)",
            self.operations, self.snapshots
        )
    }

    fn follow(&mut self, targets: &[Target]) -> anyhow::Result<()> {
        self.shared.state.lock().unwrap().targets = Some(targets.to_vec());
        self.shared.wake.notify_all();
        Ok(())
    }

    fn observe(&mut self) -> anyhow::Result<Vec<Observation>> {
        if self.sampler.as_ref().is_some_and(|s| s.is_finished()) {
            anyhow::bail!(
                "the DAMON sampler thread stopped unexpectedly (a bug); restart the daemon"
            );
        }
        let mut state = self.shared.state.lock().unwrap();
        let error = state.error.take();
        let snapshots = state.taken.snapshots;
        let observations = state.taken.take();
        drop(state);
        tracing::debug!(
            snapshots,
            regions = observations.len(),
            "DAMON this interval"
        );
        match error {
            // Nothing came of the interval but the error: report it.
            Some(e) if snapshots == 0 => Err(anyhow::anyhow!(e)),
            Some(e) => {
                tracing::debug!("a DAMON snapshot failed ({snapshots} others did not): {e}");
                Ok(observations)
            }
            None => Ok(observations),
        }
    }

    fn external_cpu_seconds(&self) -> f64 {
        self.shared.state.lock().unwrap().cpu_seconds
    }

    fn release(&mut self) {
        self.stop();
    }
}

impl Drop for DamonSource {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(target: usize, start: u64, end: u64, nr_accesses: u32) -> RegionSample {
        RegionSample {
            target,
            start,
            end,
            nr_accesses,
        }
    }

    /// A region swept once per second shows up in one snapshot of four: the interval sees a
    /// quarter of its count, not all of it or nothing, whichever snapshot it happened to read.
    #[test]
    fn an_interval_gets_each_regions_mean_over_the_snapshots() {
        let mut acc = Accumulator::default();
        let page = PAGE_SIZE as u64;
        let (hot, swept) = (
            (0x1000_0000, 0x1000_0000 + 4 * page),
            (0x2000_0000, 0x2000_0000 + 2 * page),
        );
        for (i, sweep) in [0, 0, 8, 0].into_iter().enumerate() {
            let regions = [
                region(0, hot.0, hot.1, 20),
                region(0, swept.0, swept.1, sweep),
                region(1, hot.0, hot.1, 1),
            ];
            acc.add(&regions, &[10, 20], 100 + i as u64);
        }
        let mut got = acc.take();
        got.sort_by_key(|o| (o.pid, o.start));
        let summary: Vec<_> = got
            .iter()
            .map(|o| (o.pid, o.start, o.weight, o.time_ns))
            .collect();
        assert_eq!(
            summary,
            [
                (10, hot.0, 80.0, 103),
                (10, swept.0, 4.0, 102),
                (20, hot.0, 4.0, 103),
            ],
            "the means, each timed by the latest snapshot that saw it accessed"
        );
        assert!(
            acc.take().is_empty(),
            "and the next interval starts from nothing"
        );
    }

    /// A restart's new kdamond starts from 0, the old one's seconds kept; a failed read keeps
    /// the last seconds read.
    #[test]
    fn kdamond_time_adds_up_across_restarts() {
        let mut t = KdamondTime::default();
        assert_eq!(t.update(None, |_| Some(9.0)), 0.0);
        assert_eq!(t.update(Some(100), |_| Some(1.5)), 1.5);
        assert_eq!(t.update(Some(100), |_| None), 1.5, "a read that failed");
        assert_eq!(t.update(Some(100), |_| Some(2.0)), 2.0);
        assert_eq!(t.update(Some(200), |_| Some(0.25)), 2.25, "restarted");
        assert_eq!(t.update(None, |_| Some(5.0)), 2.25, "stopped");
        assert_eq!(t.update(Some(300), |_| None), 2.25);
    }

    /// Regions of a target the pid list does not name (the kdamond's targets changed) and
    /// regions never accessed are left out; a snapshot with neither still counts.
    #[test]
    fn unknown_targets_and_idle_regions_are_not_observations() {
        let mut acc = Accumulator::default();
        acc.add(
            &[region(0, 0, 0x4000, 0), region(1, 0, 0x4000, 6)],
            &[10],
            1,
        );
        acc.add(&[region(0, 0, 0x4000, 4)], &[10], 2);
        let got = acc.take();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].pid, got[0].weight), (10, 8.0));
    }
}
