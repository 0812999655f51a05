//! The metrics themselves: a registry built from the daemon's state at each scrape, encoded in
//! Prometheus' text format (version 0.0.4, which `promtool check metrics` reads).
//!
//! Label values are bounded: tiers (a handful), migration directions (two), errno names (the
//! few `move_pages` returns), and processes, exported one by one only up to
//! `--metrics-processes` (the largest by tracked bytes; the rest count in
//! `objtier_processes_attached` and in the per-tier totals).

use super::endpoint::{Metrics, RingTotals};
use crate::daemon::Daemon;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

type Labels = Vec<(&'static str, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;
type FloatCounter = Counter<f64, AtomicU64>;

/// A family of integer gauges registered under `name`.
fn gauges(
    registry: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
) -> Family<Labels, Gauge> {
    let family = Family::<Labels, Gauge>::default();
    match unit {
        Some(unit) => registry.register_with_unit(name, help, unit, family.clone()),
        None => registry.register(name, help, family.clone()),
    }
    family
}

/// A family of counters registered under `name` (the encoder adds `_total`).
fn counters(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, Counter> {
    let family = Family::<Labels, Counter>::default();
    registry.register(name, help, family.clone());
    family
}

fn gauge_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The exposition of `daemon`'s state now, with what `metrics` kept between scrapes.
pub fn encode(daemon: &Daemon, metrics: &Metrics) -> String {
    let mut registry = Registry::with_prefix("objtier");
    let tiers = daemon.topology.tiers.len();

    let info = gauges(
        &mut registry,
        "build_info",
        "The daemon's version and wire version (always 1)",
        None,
    );
    info.get_or_create(&vec![
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        ("wire_version", objtier_wire::WIRE_VERSION.to_string()),
    ])
    .set(1);

    // Tiers.
    let capacity = gauges(
        &mut registry,
        "tier_capacity",
        "Memory of the tier's NUMA nodes",
        Some(Unit::Bytes),
    );
    let used = gauges(
        &mut registry,
        "tier_used",
        "Memory of the tier in use by anyone (capacity less free)",
        Some(Unit::Bytes),
    );
    let ours = gauges(
        &mut registry,
        "tier_objtier",
        "Bytes of attached processes' tracked objects on the tier, as last located",
        Some(Unit::Bytes),
    );
    let sampled = Family::<Labels, FloatGauge>::default();
    registry.register(
        "tier_sampled_accesses",
        "Sampled accesses of the last interval to tracked objects on the tier (by where their pages were last located)",
        sampled.clone(),
    );
    let mut ours_by_tier = vec![0u64; tiers];
    let mut accesses_by_tier = vec![0f64; tiers];
    for p in daemon.processes.values() {
        for (tier, bytes) in p.resident_bytes_by_tier.iter().enumerate().take(tiers) {
            ours_by_tier[tier] += bytes;
        }
        for record in p.records().values() {
            if record.recent_accesses <= 0.0 || !record.resident.known() {
                continue;
            }
            let pages: Vec<u64> = (0..tiers).map(|t| record.resident.pages(t)).collect();
            let total: u64 = pages.iter().sum();
            if total == 0 {
                continue;
            }
            for (tier, &n) in pages.iter().enumerate() {
                accesses_by_tier[tier] += record.recent_accesses as f64 * n as f64 / total as f64;
            }
        }
    }
    for tier in 0..tiers {
        let (tier_capacity, free) = daemon.topology.tier_bytes(tier);
        let label = vec![("tier", tier.to_string())];
        capacity.get_or_create(&label).set(gauge_i64(tier_capacity));
        used.get_or_create(&label)
            .set(gauge_i64(tier_capacity.saturating_sub(free)));
        ours.get_or_create(&label)
            .set(gauge_i64(ours_by_tier[tier]));
        sampled.get_or_create(&label).set(accesses_by_tier[tier]);
    }

    // Processes: the largest ones by tracked bytes, up to the cap.
    let attached = gauges(
        &mut registry,
        "processes_attached",
        "Processes attached to the daemon",
        None,
    );
    attached
        .get_or_create(&vec![])
        .set(daemon.processes.len() as i64);
    let process_bytes = gauges(
        &mut registry,
        "process",
        "Bytes of a process's tracked objects on each tier, as last located (the largest --metrics-processes processes)",
        Some(Unit::Bytes),
    );
    let mut largest: Vec<&crate::process::Process> = daemon.processes.values().collect();
    largest.sort_by_key(|p| std::cmp::Reverse(p.objects.tracked_bytes()));
    for p in largest.into_iter().take(metrics.max_processes) {
        let comm = std::fs::read_to_string(daemon.config.proc_root.join(format!("{}/comm", p.pid)))
            .map(|c| c.trim_end().to_string())
            .unwrap_or_default();
        for tier in 0..tiers {
            let bytes = p.resident_bytes_by_tier.get(tier).copied().unwrap_or(0);
            process_bytes
                .get_or_create(&vec![
                    ("pid", p.pid.to_string()),
                    ("comm", comm.clone()),
                    ("tier", tier.to_string()),
                ])
                .set(gauge_i64(bytes));
        }
    }

    // Migrations.
    let t = &daemon.totals;
    let migrated = counters(&mut registry, "migrated_pages", "Pages moved, by direction");
    migrated
        .get_or_create(&vec![("direction", "promote".into())])
        .inc_by(t.promoted_pages);
    migrated
        .get_or_create(&vec![("direction", "demote".into())])
        .inc_by(t.demoted_pages);
    let failures = counters(
        &mut registry,
        "migration_failures",
        "Page moves that failed, by errno",
    );
    for (errno, n) in &t.failures_by_errno {
        failures
            .get_or_create(&vec![("errno", errno.clone())])
            .inc_by(*n);
    }
    let splits = counters(
        &mut registry,
        "huge_page_splits",
        "Huge pages split to move part of them",
    );
    splits.get_or_create(&vec![]).inc_by(t.huge_page_splits);
    let intervals = counters(&mut registry, "intervals", "Intervals run");
    intervals.get_or_create(&vec![]).inc_by(t.intervals);
    let enforcements = counters(
        &mut registry,
        "enforcements",
        "Intervals in which a trigger fired and a plan was enforced",
    );
    enforcements.get_or_create(&vec![]).inc_by(t.enforcements);

    // The access source.
    let cost = daemon.source.cost();
    let source = vec![("source", daemon.source.name().to_string())];
    let samples = counters(
        &mut registry,
        "source_observations",
        "Observations the access source delivered (DAMON regions, perf samples, page references)",
    );
    samples.get_or_create(&source).inc_by(cost.observations);
    let lost = counters(
        &mut registry,
        "source_lost_samples",
        "Samples the kernel dropped (perf ring overflow)",
    );
    lost.get_or_create(&source).inc_by(cost.lost);
    let cpu = Family::<Labels, FloatCounter>::default();
    registry.register_with_unit(
        "source_cpu",
        "CPU time the access source cost (the daemon's, and DAMON's kdamond where measurable)",
        Unit::Seconds,
        cpu.clone(),
    );
    cpu.get_or_create(&source).inc_by(cost.cpu_seconds);
    let weight = Family::<Labels, FloatCounter>::default();
    registry.register(
        "source_sampled_weight",
        "Weight of sampled accesses (attributed: those inside tracked objects)",
        weight.clone(),
    );
    weight
        .get_or_create(&vec![("attributed", "false".into())])
        .inc_by((t.sampled_weight - t.attributed_weight).max(0.0));
    weight
        .get_or_create(&vec![("attributed", "true".into())])
        .inc_by(t.attributed_weight);
    if let Some(share) = daemon
        .last_interval
        .as_ref()
        .and_then(|r| r.attributed_share)
    {
        let gauge = FloatGauge::default();
        gauge.set(share);
        registry.register(
            "source_attributed_share",
            "Share of the last interval's sampled accesses that fell in tracked objects",
            gauge,
        );
    }

    // Rings: attached processes' and detached ones'.
    let mut rings = metrics.detached;
    for p in daemon.processes.values() {
        let r = RingTotals::of(p);
        rings.events += r.events;
        rings.dropped += r.dropped;
        rings.invalid += r.invalid;
    }
    let ring = counters(
        &mut registry,
        "ring_events",
        "Events read from processes' rings (and dropped: the ring was full; invalid: refused)",
    );
    ring.get_or_create(&vec![("outcome", "read".into())])
        .inc_by(rings.events);
    ring.get_or_create(&vec![("outcome", "dropped".into())])
        .inc_by(rings.dropped);
    ring.get_or_create(&vec![("outcome", "invalid".into())])
        .inc_by(rings.invalid);

    registry.register_with_unit(
        "interval_duration",
        "How long each interval's step took",
        Unit::Seconds,
        metrics.interval_seconds.clone(),
    );

    let mut text = String::new();
    prometheus_text::encode(&mut text, &registry).expect("encoding into a String cannot fail");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DaemonConfig;
    use crate::metrics::address::MetricsAddress;
    use objtier_sys::topology::Topology;
    use std::time::Duration;

    /// A daemon of two tiers and no process: a series per tier, the histogram of the
    /// intervals it ran, and the ring counters of processes gone.
    #[test]
    fn the_exposition_has_a_series_per_tier_and_the_interval_histogram() {
        let sys = tempfile::tempdir().unwrap();
        let mut config = DaemonConfig::new(sys.path().join("sock"));
        config.sys_root = sys.path().to_owned();
        let mut d = Daemon::on_fake_kernel(config, Topology::two_tiers(1 << 30, 1 << 30, 1 << 32));
        let address = MetricsAddress::Tcp("127.0.0.1:0".parse().unwrap());
        let mut metrics = Metrics::bind(&address, 8).unwrap();
        metrics.detached.events = 7;
        d.metrics = Some(metrics);
        d.interval_ended(Duration::from_millis(3));
        d.interval_ended(Duration::from_millis(300));
        let text = encode(&d, d.metrics.as_ref().unwrap());
        for line in [
            "objtier_tier_capacity_bytes{tier=\"0\"} ",
            "objtier_tier_capacity_bytes{tier=\"1\"} ",
            "objtier_processes_attached 0",
            "objtier_ring_events_total{outcome=\"read\"} 7",
            "objtier_interval_duration_seconds_bucket{le=\"0.005\"} 1",
            "objtier_interval_duration_seconds_bucket{le=\"0.5\"} 2",
            "objtier_interval_duration_seconds_count 2",
            "objtier_migrated_pages_total{direction=\"promote\"} 0",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
        assert!(
            !text.contains("objtier_process_bytes{"),
            "no process, no series"
        );
    }
}
