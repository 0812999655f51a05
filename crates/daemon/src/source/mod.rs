//! Where access observations come from.
//!
//! A [`Source`] follows the attached processes (the daemon tells it which, and which address
//! ranges hold their tracked objects) and, once per interval, delivers weighted
//! [`Observation`]s: this process touched this address range this much. The daemon attributes
//! every observation to the object records it overlaps, the same way for every source (a
//! sorted range index per process, `Process::attribute`); what falls outside every record is
//! counted as unattributed, and the attributed share is reported per interval.
//!
//! Sources: [`perf`] (PMU address sampling: PEBS, IBS, Arm SPE; or the software page-fault event),
//! [`damon`] (DAMON virtual-address monitoring: page access bits sampled by the kernel),
//! [`proc`] (page references through `/proc`, for kernels without DAMON: coarse) and none.
//! `auto` takes them in that order, perf only with a hardware PMU. [`AccessSource`] wraps the
//! chosen one and measures what it costs.

pub mod damon;
pub mod observation;
pub mod perf;
pub mod proc;

use crate::config::{DaemonConfig, SourceChoice};
use std::time::Duration;

use observation::thread_cpu_seconds;
pub use observation::{AccessKind, NoSource, Observation, Source, SourceCost, Target};

/// The daemon's access source, with its cost measured.
pub struct AccessSource {
    source: Box<dyn Source>,
    own_cpu_seconds: f64,
    observations: u64,
}

impl AccessSource {
    pub fn new(source: Box<dyn Source>) -> AccessSource {
        AccessSource {
            source,
            own_cpu_seconds: 0.0,
            observations: 0,
        }
    }

    /// No sampling, for this reason.
    pub fn none(reason: impl Into<String>) -> AccessSource {
        AccessSource::new(Box::new(NoSource {
            reason: reason.into(),
        }))
    }

    /// Opens the configured source. `auto` takes the best available and logs why it could not
    /// take the better ones; an explicit choice that cannot work is an error that says why.
    pub fn open(config: &DaemonConfig) -> anyhow::Result<AccessSource> {
        match config.source {
            SourceChoice::None => Ok(AccessSource::none("disabled (--source none)")),
            SourceChoice::Damon => damon::open(config)
                .map(|s| AccessSource::new(Box::new(s)))
                .map_err(|e| anyhow::anyhow!("--source damon: {e}")),
            SourceChoice::Perf => perf::open(config)
                .map(|s| AccessSource::new(Box::new(s)))
                .map_err(|e| anyhow::anyhow!("--source perf: {e:#}")),
            SourceChoice::Proc => proc::open(config)
                .map(|s| AccessSource::new(Box::new(s)))
                .map_err(|e| anyhow::anyhow!("--source proc: {e}")),
            SourceChoice::Auto => {
                let perf = match perf::open(config) {
                    Ok(s) => return Ok(AccessSource::new(Box::new(s))),
                    Err(e) => e,
                };
                tracing::info!("not using perf address sampling: {perf:#}");
                let damon = match damon::open(config) {
                    Ok(s) => return Ok(AccessSource::new(Box::new(s))),
                    Err(e) => e,
                };
                match proc::open(config) {
                    Ok(s) => {
                        tracing::warn!("access source proc (coarse) because damon: {damon}");
                        Ok(AccessSource::new(Box::new(s)))
                    }
                    Err(e) => {
                        tracing::warn!(
                            "no access source: {damon}; proc: {e}. Objects are tracked and \
                             capacity caps enforced, but nothing is promoted"
                        );
                        Ok(AccessSource::none(format!(
                            "{damon}; proc: {e}; and perf: {perf:#}"
                        )))
                    }
                }
            }
        }
    }

    pub fn name(&self) -> &'static str {
        self.source.name()
    }
    pub fn describe(&self) -> String {
        self.source.describe()
    }
    pub fn samples(&self) -> bool {
        self.source.samples()
    }
    pub fn follow(&mut self, targets: &[Target]) -> anyhow::Result<()> {
        let started = thread_cpu_seconds();
        let result = self.source.follow(targets);
        self.own_cpu_seconds += thread_cpu_seconds() - started;
        result
    }
    pub fn poll_every(&self) -> Option<Duration> {
        self.source.poll_every()
    }
    pub fn poll(&mut self) {
        if self.source.poll_every().is_none() {
            return;
        }
        let started = thread_cpu_seconds();
        self.source.poll();
        self.own_cpu_seconds += thread_cpu_seconds() - started;
    }
    pub fn observe(&mut self) -> anyhow::Result<Vec<Observation>> {
        let started = thread_cpu_seconds();
        let result = self.source.observe();
        self.own_cpu_seconds += thread_cpu_seconds() - started;
        if let Ok(observations) = &result {
            self.observations += observations.len() as u64;
        }
        result
    }
    pub fn cost(&self) -> SourceCost {
        SourceCost {
            cpu_seconds: self.own_cpu_seconds + self.source.external_cpu_seconds(),
            observations: self.observations,
            lost: self.source.lost(),
        }
    }
    pub fn release(&mut self) {
        self.source.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The DAMON sysfs files `claim` writes, as a kernel lays them out once `nr_kdamonds`,
    /// `nr_contexts` and `nr_schemes` are 1; with `tried_regions`, as 6.2+ does.
    fn damon_tree(sys: &Path, tried_regions: bool) {
        let k = sys.join("kernel/mm/damon/admin/kdamonds");
        let ctx = k.join("0/contexts/0");
        let mut files = vec![
            (k.join("nr_kdamonds"), "0"),
            (k.join("0/state"), "off"),
            (k.join("0/pid"), "-1"),
            (k.join("0/contexts/nr_contexts"), "0"),
            (ctx.join("avail_operations"), "vaddr fvaddr paddr"),
            (ctx.join("operations"), "vaddr"),
            (ctx.join("schemes/nr_schemes"), "0"),
            (ctx.join("schemes/0/action"), "pageout"),
        ];
        for name in ["sample_us", "aggr_us", "update_us"] {
            files.push((ctx.join("monitoring_attrs/intervals").join(name), "0"));
        }
        for name in ["min", "max"] {
            files.push((ctx.join("monitoring_attrs/nr_regions").join(name), "0"));
            for range in ["sz", "nr_accesses", "age"] {
                let pattern = ctx.join("schemes/0/access_pattern").join(range);
                files.push((pattern.join(name), "0"));
            }
        }
        for (path, text) in files {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        if tried_regions {
            std::fs::create_dir_all(ctx.join("schemes/0/tried_regions")).unwrap();
        }
    }

    fn config_for(sys: &Path) -> DaemonConfig {
        let mut config = DaemonConfig::new(sys.join("sock"));
        config.sys_root = sys.to_owned();
        config.damon_owner_file = sys.join("damon-owner");
        config
    }

    /// On 5.18-6.1 DAMON's sysfs exists but cannot report regions: `auto` must not take it
    /// (it would claim a kdamond and then fail every interval). The fake sysfs has no PMU, so
    /// `auto` skips perf either way.
    #[test]
    fn auto_passes_over_damon_that_cannot_report_regions() {
        let sys = tempfile::tempdir().unwrap();
        damon_tree(sys.path(), false);
        let config = config_for(sys.path());
        let err = damon::open(&config).err().expect("a 6.1 DAMON is refused");
        assert!(err.to_string().contains("6.2+"), "{err}");
        let source = AccessSource::open(&config).unwrap();
        assert_ne!(source.name(), "damon", "{}", source.describe());

        let sys = tempfile::tempdir().unwrap();
        damon_tree(sys.path(), true);
        let mut source = AccessSource::open(&config_for(sys.path())).unwrap();
        assert_eq!(source.name(), "damon", "the same tree with tried_regions");
        source.release();
    }
}
