//! Reloading the configuration at `SIGHUP` (`systemctl reload objtier`), keeping every
//! attached process, its records and what was learnt of its sites.
//!
//! The daemon does not read files itself: whoever started it hands it a
//! [`Reloader`](crate::config::Reloader) that builds the configuration again (the `objtier`
//! command re-reads its `--config` file under the same command line). What the policy and the interval read is replaced at once and takes
//! effect from the next interval; what was opened at start-up (the socket, the access source
//! and its settings, the tiers, the site store, dry run, the metrics endpoint) stays as it was,
//! and the log names each such option that changed, so the operator knows a restart is needed.
//! A configuration that does not build (a typo in the file) changes nothing.

use crate::config::DaemonConfig;
use crate::daemon::Daemon;
use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sighup(_: libc::c_int) {
    REQUESTED.store(true, Ordering::Relaxed);
}

/// Makes `SIGHUP` ask for a reload (instead of ending the daemon, its default action).
pub(crate) fn install_handler() {
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGHUP,
            on_sighup as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

/// Whether a `SIGHUP` came since the last call.
pub(crate) fn requested() -> bool {
    REQUESTED.swap(false, Ordering::Relaxed)
}

impl Daemon {
    /// Reloads the configuration (see the module doc).
    pub(crate) fn reload_config(&mut self) {
        let Some(reload) = self.reload.as_mut() else {
            tracing::info!("SIGHUP: this daemon has no configuration to reload");
            return;
        };
        match reload() {
            Ok(config) => {
                let needs_restart = self.apply_config(config);
                tracing::info!(
                    processes = self.processes.len(),
                    policy = %self.policy.describe(),
                    interval_ms = self.config.interval.as_millis() as u64,
                    "configuration reloaded"
                );
                if !needs_restart.is_empty() {
                    tracing::warn!(
                        "changed options that take effect only when the daemon restarts: {}",
                        needs_restart.join(", ")
                    );
                }
            }
            Err(e) => tracing::error!(
                "SIGHUP: the configuration was not reloaded (the running one stays): {e:#}"
            ),
        }
    }

    /// Applies what can change while processes are attached, and returns the options that
    /// changed but need a restart.
    pub fn apply_config(&mut self, new: DaemonConfig) -> Vec<&'static str> {
        let old = &self.config;
        let mut needs_restart = Vec::new();
        let mut differs = |name: &'static str, a: String, b: String| {
            if a != b {
                needs_restart.push(name);
            }
        };
        differs(
            "socket",
            format!("{:?}", old.socket_path),
            format!("{:?}", new.socket_path),
        );
        differs(
            "source",
            format!("{:?}", old.source),
            format!("{:?}", new.source),
        );
        differs(
            "damon-sample, damon-aggregate, damon-regions",
            format!("{:?}", old.damon),
            format!("{:?}", new.damon),
        );
        differs(
            "damon-snapshots",
            old.damon_snapshots.to_string(),
            new.damon_snapshots.to_string(),
        );
        differs(
            "proc-budget",
            format!("{:?}", old.proc_budget),
            format!("{:?}", new.proc_budget),
        );
        differs(
            "event, sample-period, ldlat",
            format!("{:?}", (&old.perf_event, old.perf_period, old.perf_ldlat)),
            format!("{:?}", (&new.perf_event, new.perf_period, new.perf_ldlat)),
        );
        differs(
            "tiers",
            format!("{:?}", old.tiers),
            format!("{:?}", new.tiers),
        );
        differs(
            "warm-start, site-store",
            format!("{:?}", (old.warm_start, &old.site_store)),
            format!("{:?}", (new.warm_start, &new.site_store)),
        );
        differs(
            "metrics",
            format!("{:?}", old.metrics),
            format!("{:?}", new.metrics),
        );
        if let Some(metrics) = &mut self.metrics {
            metrics.max_processes = new.metrics_processes;
        }
        let policy_changed = format!(
            "{:?}",
            (
                old.alpha,
                old.prioritization,
                &old.triggers,
                old.fast_reserve_bytes,
                old.record_parts
            )
        ) != format!(
            "{:?}",
            (
                new.alpha,
                new.prioritization,
                &new.triggers,
                new.fast_reserve_bytes,
                new.record_parts
            )
        );
        let live = DaemonConfig {
            interval: new.interval,
            startup_interval: new.startup_interval,
            startup_window: new.startup_window,
            alpha: new.alpha,
            fill: new.fill,
            split_bytes: new.split_bytes,
            prioritization: new.prioritization,
            triggers: new.triggers,
            fast_capacity_bytes: new.fast_capacity_bytes,
            fast_reserve_bytes: new.fast_reserve_bytes,
            reclaim_cache: new.reclaim_cache,
            record_parts: new.record_parts,
            proactive: new.proactive,
            short_lived_sites: new.short_lived_sites,
            rate_limit_bytes_per_second: new.rate_limit_bytes_per_second,
            metrics_processes: new.metrics_processes,
            ..self.config.clone()
        };
        self.config = live;
        // The built-in policy is rebuilt only when its own options changed: its routines'
        // state (none today) is kept otherwise.
        if policy_changed {
            self.policy = crate::config::builtin_policy(&self.config);
        }
        needs_restart
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use objtier_sys::topology::Topology;
    use std::time::Duration;

    fn daemon(sys: &tempfile::TempDir) -> Daemon {
        let mut config = DaemonConfig::new(sys.path().join("sock"));
        config.sys_root = sys.path().to_owned();
        Daemon::on_fake_kernel(config, Topology::two_tiers(1 << 30, 1 << 30, 1 << 32))
    }

    /// Live options change; start-up ones stay and are named; a failing reload changes nothing.
    #[test]
    fn a_reload_applies_live_options_and_names_the_others() {
        let sys = tempfile::tempdir().unwrap();
        let mut d = daemon(&sys);
        let mut new = d.config.clone();
        new.interval = Duration::from_millis(500);
        new.fast_capacity_bytes = Some(1 << 28);
        new.prioritization = objtier_policy::Prioritization::Lru;
        new.socket_path = sys.path().join("elsewhere");
        new.source = crate::config::SourceChoice::Proc;
        let needs_restart = d.apply_config(new);
        assert_eq!(needs_restart, ["socket", "source"]);
        assert_eq!(d.config.interval, Duration::from_millis(500));
        assert_eq!(d.config.fast_capacity_bytes, Some(1 << 28));
        assert!(
            d.policy.describe().contains("lru"),
            "{}",
            d.policy.describe()
        );
        assert_eq!(d.config.socket_path, sys.path().join("sock"));
        assert_eq!(d.config.source, crate::config::SourceChoice::Auto);

        d.reload = Some(Box::new(|| anyhow::bail!("bad key")));
        d.reload_config();
        assert_eq!(d.config.interval, Duration::from_millis(500));
    }
}
