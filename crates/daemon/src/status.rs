//! What `objtier status --json` prints: the daemon, its tiers, and each attached process.

use crate::daemon::Daemon;
use serde_json::{json, Value};

/// The status as `viewer` may see it: every process for None (root), else only that uid's.
pub fn status_json(d: &Daemon, viewer: Option<u32>) -> Value {
    let tiers: Vec<Value> = d
        .topology
        .tiers
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let (capacity, free) = d.topology.tier_bytes(i);
            json!({
                "tier": i,
                "kernel_tier": t.kernel_id,
                "nodes": t.nodes,
                "capacity_bytes": capacity,
                "free_bytes": free,
                // Cold file cache: room too, unless the daemon runs with --reclaim-cache off.
                "cold_cache_bytes": d.topology.tier_cold_cache_bytes(i),
                // The slowest tier takes whatever the faster ones do not: no budget (null).
                "budget_bytes": d
                    .last_interval
                    .as_ref()
                    .and_then(|r| r.budget_bytes_by_tier.get(i))
                    .filter(|b| **b != u64::MAX),
            })
        })
        .collect();
    let processes: Vec<Value> = d
        .processes
        .values()
        .filter(|p| viewer.is_none_or(|uid| p.uid == uid))
        .map(|p| {
            let header = p.ring.header();
            json!({
                "pid": p.pid,
                "uid": p.uid,
                "priority": p.priority,
                "fast_capacity_bytes": p.fast_capacity_bytes,
                "objects": p.objects.objects().len() - p.objects.blocks().len(),
                // Small-object memory (the allocator's arenas), tracked as blocks of no site.
                "small_object_blocks": p.objects.blocks().len(),
                "small_object_block_bytes": p.objects.blocks().values().sum::<u64>(),
                "records": p.records().len(),
                "pending_objects": p.objects.pending().len(),
                "tracked_bytes": p.objects.tracked_bytes(),
                // Resident bytes of the tracked objects on each tier, as located by move_pages at
                // the last interval (and adjusted by that interval's migrations).
                "bytes_per_tier": p.resident_bytes_by_tier,
                "events": p.stats.events,
                "events_dropped": header.dropped.load(std::sync::atomic::Ordering::Relaxed),
                "stats": p.stats,
                "sites": sites_json(p),
                // Sites whose objects all die young: the library reports one in
                // SHORT_LIVED_SAMPLE of their new objects (`objtier_policy::lifetimes`).
                "short_lived_sites": short_lived_sites_json(p),
                "hottest_records": hottest_records_json(p),
                "advised_ranges": p.objects.advice().len(),
                // The program's store file, how many sites it remembered, and how many were
                // placed at attach (the others when the library describes them).
                "warm_start": p.warm.as_ref().map(|w| json!({
                    "exe": w.program.exe,
                    "store_file": w.file,
                    "remembered_sites": w.remembered.len(),
                    "placed_at_attach": w.predicted.len(),
                })),
                "resync": match p.resync.state() {
                    crate::process::Resync::Idle => json!("idle"),
                    crate::process::Resync::Requested { request, .. } => json!({"requested": request}),
                    crate::process::Resync::Receiving { request, lo, .. } => json!({"receiving": request, "from": lo}),
                },
                "resync_served": p.ring.control().resync_served.load(std::sync::atomic::Ordering::Relaxed),
                "no_migrate": p.no_migrate,
                "profiled": p.recorder.is_some(),
                "placement": placement_json(p, d.topology.tiers.len()),
                "ring_backlog": header.backlog(),
                "attached_seconds": (crate::clock::monotonic_ns().saturating_sub(p.attached_ns)) as f64 / 1e9,
            })
        })
        .collect();
    json!({
        "daemon": {
            "pid": std::process::id(),
            "uptime_seconds": d.started.elapsed().as_secs_f64(),
            "socket": d.config.socket_path,
            "interval_ms": d.config.interval.as_millis() as u64,
            "startup_interval_ms": d.config.startup_interval.map(|s| s.as_millis() as u64),
            "startup_window_seconds": d.config.startup_window.as_secs_f64(),
            "alpha": d.config.alpha,
            "fill": d.config.fill,
            "split_bytes": d.split_bytes(),
            "split": if d.config.split_bytes.is_some() { "fixed" } else { "auto" },
            "prioritization": format!("{:?}", d.config.prioritization).to_lowercase(),
            "source": d.source.name(),
            "source_detail": d.source.describe(),
            "source_cost": d.source.cost(),
            "dry_run": d.config.dry_run,
            "reclaim_cache": d.config.reclaim_cache,
            "proactive": d.config.proactive.to_string(),
            "short_lived_sites": d.config.short_lived_sites,
            "policy": d.policy.describe(),
            "warm_start": d.site_store.is_some(),
            "site_store": d.site_store.as_ref().map(|s| s.dir()),
            "rate_limit_bytes_per_second": d.config.rate_limit_bytes_per_second,
            "tier_source": format!("{:?}", d.topology.tier_source),
            "totals": d.totals,
            "last_interval": d.last_interval,
        },
        "tiers": tiers,
        "processes": processes,
    })
}

/// Most records listed per process.
const STATUS_RECORDS: usize = 8;

/// The records with the highest access estimate (EMA), hottest first: where the access source's
/// observations landed.
fn hottest_records_json(p: &crate::process::Process) -> Vec<Value> {
    let mut records: Vec<(u64, &crate::process::Record)> = p.records().iter().collect();
    records.sort_by(|a, b| b.1.ema_accesses.total_cmp(&a.1.ema_accesses));
    records
        .into_iter()
        .take(STATUS_RECORDS)
        .filter(|(_, r)| r.ema_accesses > 0.0)
        .map(|(start, r)| {
            json!({
                "start": format!("{start:#x}"),
                "len": r.len,
                "object_start": format!("{:#x}", p.objects.object_start_of(start)),
                "site": format!("{:#018x}", r.site),
                "ema_accesses": r.ema_accesses,
                "recent_accesses": r.recent_accesses,
            })
        })
        .collect()
}

/// Most sites listed per process.
const STATUS_SITES: usize = 32;

/// The sites holding the most live tracked bytes, with their frames and placement.
fn sites_json(p: &crate::process::Process) -> Vec<Value> {
    let mut by_site: std::collections::HashMap<u64, (u64, u64)> = Default::default();
    for object in p.objects.objects().values() {
        let entry = by_site.entry(object.site).or_default();
        entry.0 += 1;
        entry.1 += object.len;
    }
    // Placed sites are listed even with no live objects: the placement is state worth seeing.
    for &site in p.placements.keys() {
        by_site.entry(site).or_default();
    }
    let mut sites: Vec<(u64, (u64, u64))> = by_site.into_iter().collect();
    sites.sort_by_key(|&(site, (_, bytes))| (std::cmp::Reverse(bytes), site));
    sites
        .into_iter()
        .take(STATUS_SITES)
        .map(|(site, (objects, bytes))| {
            let frames = p.sites.get(&site);
            json!({
                "site": format!("{site:#018x}"),
                "objects": objects,
                "bytes": bytes,
                "start_tier": p.placements.get(&site).map(|&(tier, _)| tier),
                "placed_by": p.placements.get(&site).map(|&(_, by)| by.describe()),
                // A site placed by warm start before the library described it shows the
                // remembered call path.
                "frames": frames.and_then(|f| f.names.clone()).or_else(|| {
                    frames.map(|f| f.ips.iter().map(|ip| format!("?+{ip:#x}")).collect())
                }).or_else(|| p.warm.as_ref().and_then(|w| w.predicted.get(&site).cloned())),
            })
        })
        .collect()
}

/// The placement file a process was started with, as applied: how many of its sites are
/// placed, what was skipped, the bytes it plans per tier and what its placed sites' objects
/// hold there now (as last located): a tier that filled sent the rest one tier down, and
/// `overflow_bytes` says how much of the fastest tier's plan went below.
fn placement_json(p: &crate::process::Process, tiers: usize) -> Option<Value> {
    let g = p.guided.as_ref()?;
    let planned = g.planned_bytes(tiers);
    let (held, unlocated, by_site) = p.placed_resident_bytes(tiers);
    // What a full tier sent one tier down: the bytes a placed site should hold in its tier
    // (all of them, or up to its budget) that are below it.
    let overflow: u64 = by_site
        .iter()
        .map(|(site, &(live, in_tier))| {
            let budget = g
                .placed
                .get(site)
                .and_then(|&i| g.placement.sites.get(i))
                .and_then(|s| s.budget_bytes)
                .unwrap_or(u64::MAX);
            live.min(budget).saturating_sub(in_tier)
        })
        .sum();
    Some(json!({
        "file": g.file,
        "algorithm": g.placement.algorithm,
        "program": g.placement.program.name,
        "sites_listed": g.placement.sites.len(),
        "sites_placed": g.placed.len(),
        "sites_table_full": g.table_full,
        "skipped_modules": g.skipped_modules,
        "fallback_tier": g.fallback_tier,
        "small_objects_tier": g.small_objects_tier,
        "phase": g.phase,
        "planned_bytes_by_tier": planned,
        "placed_bytes_by_tier": held,
        "placed_bytes_unlocated": unlocated,
        // Bytes of placed sites' objects that their tier should hold (up to their budgets) and
        // that are in a slower tier: a full tier sent them there.
        "overflow_bytes": overflow,
        // Room the daemon made in the fastest tier before the placed objects were born.
        "room_made_bytes": g.room_made_bytes,
    }))
}

fn short_lived_sites_json(p: &crate::process::Process) -> Vec<Value> {
    p.short_lived_sites()
        .into_iter()
        .take(STATUS_SITES)
        .map(|site| {
            json!({
                "site": format!("{site:#018x}"),
                // One marked by warm start before the library described it: the remembered path.
                "frames": p.sites.get(&site).and_then(|f| f.names.clone())
                    .or_else(|| p.warm.as_ref().and_then(|w| w.predicted.get(&site).cloned())),
                "remembered": p.lifetimes.get(site).is_some_and(|l| l.remembered),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::tests::{process, push};
    use objtier_wire::{event_flags, EventKind};

    #[test]
    fn hottest_records_come_hottest_first_and_unsampled_ones_not_at_all() {
        let (mut p, _peer) = process();
        for i in 0..4u64 {
            push(
                &p,
                EventKind::Alloc,
                0x10_0000 + i * 0x10_0000,
                0x10_0000,
                event_flags::SNAPSHOT,
            );
        }
        p.drain();
        for (i, ema) in [(1u64, 5.0), (3, 9.0)] {
            p.records_mut()
                .get_mut(0x10_0000 + i * 0x10_0000)
                .unwrap()
                .ema_accesses = ema;
        }
        let hottest = hottest_records_json(&p);
        let starts: Vec<&str> = hottest
            .iter()
            .map(|r| r["start"].as_str().unwrap())
            .collect();
        assert_eq!(starts, ["0x400000", "0x200000"]);
        assert_eq!(hottest[0]["ema_accesses"], 9.0);
        assert_eq!(hottest[0]["len"], 0x10_0000);
    }
}
