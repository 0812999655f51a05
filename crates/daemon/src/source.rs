//! Where access observations come from. Today: DAMON virtual-address monitoring, or nothing
//! (or, for tests and benches, regions they hand in).

use crate::config::{DaemonConfig, SourceChoice};
use objtier_sys::damon::{Damon, DamonError, RealFiles, RegionSample, Target};

pub enum AccessSource {
    Damon(Box<Damon<RealFiles>>),
    /// No sampling, with the reason (shown by `objtier status`).
    None {
        reason: String,
    },
    /// The same regions (pid, region) every interval, handed in by a test or bench.
    Synthetic(Vec<(u32, RegionSample)>),
}

impl AccessSource {
    /// Opens the configured source. `auto` falls back to none with a logged reason; an explicit
    /// `damon` that cannot work is an error that says why.
    pub fn open(config: &DaemonConfig) -> anyhow::Result<AccessSource> {
        match config.source {
            SourceChoice::None => Ok(AccessSource::None {
                reason: "disabled (--source none)".into(),
            }),
            SourceChoice::Damon | SourceChoice::Auto => {
                let mut damon = Damon::new(RealFiles, &config.sys_root, config.damon.clone())
                    .with_owner_file(config.damon_owner_file.clone());
                match damon.claim() {
                    Ok(()) => {
                        if damon.reclaimed_stale() {
                            tracing::info!(
                                "reclaimed the stopped kdamond a previous objtier daemon left \
                                 behind"
                            );
                        }
                        Ok(AccessSource::Damon(Box::new(damon)))
                    }
                    Err(e) if config.source == SourceChoice::Auto => {
                        tracing::warn!(
                            "no access source: {e}. Objects are tracked and capacity caps \
                             enforced, but nothing is promoted"
                        );
                        Ok(AccessSource::None {
                            reason: e.to_string(),
                        })
                    }
                    Err(e) => Err(anyhow::anyhow!("--source damon: {e}")),
                }
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            AccessSource::Damon(d) => format!("damon ({})", d.operations()),
            AccessSource::None { reason } => format!("none: {reason}"),
            AccessSource::Synthetic(regions) => format!("synthetic ({} regions)", regions.len()),
        }
    }

    /// Whether this source samples accesses at all.
    pub fn samples(&self) -> bool {
        !matches!(self, AccessSource::None { .. })
    }

    pub fn name(&self) -> &'static str {
        match self {
            AccessSource::Damon(_) => "damon",
            AccessSource::None { .. } => "none",
            AccessSource::Synthetic(_) => "synthetic",
        }
    }

    /// The regions seen since the targets were last set, each with the pid it belongs to.
    pub fn observe(&mut self) -> Result<Vec<(u32, RegionSample)>, DamonError> {
        match self {
            AccessSource::Damon(damon) => {
                let regions = damon.snapshot()?;
                let pids: Vec<u32> = damon.targets().iter().map(|t| t.pid).collect();
                Ok(regions
                    .into_iter()
                    .filter_map(|r| pids.get(r.target).map(|&pid| (pid, r)))
                    .collect())
            }
            AccessSource::None { .. } => Ok(Vec::new()),
            AccessSource::Synthetic(regions) => Ok(regions.clone()),
        }
    }

    /// Monitors these processes (and, where the kernel allows, exactly these ranges) from now on.
    pub fn follow(&mut self, targets: &[Target]) -> Result<(), DamonError> {
        match self {
            AccessSource::Damon(damon) => damon.set_targets(targets),
            AccessSource::None { .. } | AccessSource::Synthetic(_) => Ok(()),
        }
    }

    pub fn release(&mut self) {
        if let AccessSource::Damon(damon) = self {
            damon.release();
        }
    }
}
