//! DAMON virtual-address monitoring as an access source: the kernel samples page access bits
//! in the tracked ranges of every attached process, and each aggregated region becomes one
//! observation weighted by its access frequency times its pages.

use super::{AccessKind, Observation, Source, Target};
use crate::config::DaemonConfig;
use objtier_sys::damon::{Damon, DamonError, RealFiles};
use objtier_wire::PAGE_SIZE;

pub struct DamonSource {
    damon: Damon<RealFiles>,
    /// CPU seconds of kdamond threads that have exited (each restart starts a new one), and
    /// the current one's pid and seconds.
    kdamond_cpu_done: f64,
    kdamond: Option<(u32, f64)>,
}

impl DamonSource {
    /// Follows the kdamond thread's CPU time across restarts.
    fn account_kdamond(&mut self) {
        let pid = self.damon.kdamond_pid();
        let proc_root = std::path::Path::new("/proc");
        match (self.kdamond, pid) {
            (Some((old, seconds)), Some(new)) if old == new => {
                let now = objtier_sys::damon::thread_cpu_seconds(proc_root, new).unwrap_or(seconds);
                self.kdamond = Some((new, now));
            }
            (previous, now) => {
                self.kdamond_cpu_done += previous.map_or(0.0, |(_, s)| s);
                self.kdamond = now.map(|p| {
                    (
                        p,
                        objtier_sys::damon::thread_cpu_seconds(proc_root, p).unwrap_or(0.0),
                    )
                });
            }
        }
    }
}

/// Claims a kdamond of our own (never one another tool created).
pub fn open(config: &DaemonConfig) -> Result<DamonSource, DamonError> {
    let mut damon = Damon::new(RealFiles, &config.sys_root, config.damon.clone())
        .with_owner_file(config.damon_owner_file.clone());
    damon.claim()?;
    if damon.reclaimed_stale() {
        tracing::info!("reclaimed the stopped kdamond a previous objtier daemon left behind");
    }
    Ok(DamonSource {
        damon,
        kdamond_cpu_done: 0.0,
        kdamond: None,
    })
}

impl Source for DamonSource {
    fn name(&self) -> &'static str {
        "damon"
    }

    fn describe(&self) -> String {
        format!("damon ({})", self.damon.operations())
    }

    fn follow(&mut self, targets: &[Target]) -> anyhow::Result<()> {
        // A restart replaces the kdamond thread: count the old one's time first.
        self.account_kdamond();
        self.damon.set_targets(targets)?;
        self.account_kdamond();
        Ok(())
    }

    fn observe(&mut self) -> anyhow::Result<Vec<Observation>> {
        self.account_kdamond();
        let regions = self.damon.snapshot()?;
        let pids: Vec<u32> = self.damon.targets().iter().map(|t| t.pid).collect();
        let time_ns = crate::monotonic_ns();
        Ok(regions
            .into_iter()
            .filter_map(|r| {
                let pid = *pids.get(r.target)?;
                let pages = (r.end - r.start) / PAGE_SIZE as u64;
                Some(Observation {
                    pid,
                    start: r.start,
                    end: r.end,
                    weight: r.nr_accesses as f64 * pages as f64,
                    kind: AccessKind::Any,
                    time_ns,
                })
            })
            .collect())
    }

    fn external_cpu_seconds(&self) -> f64 {
        self.kdamond_cpu_done + self.kdamond.map_or(0.0, |(_, s)| s)
    }

    fn release(&mut self) {
        self.damon.release();
    }
}
