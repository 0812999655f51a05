//! The bench's tables (markdown) and JSON.

use crate::*;

/// Measures and prints the daemon's cost per drained event (`events.rs`) for each window.
pub(crate) fn print_event_costs(windows: &[u64], events: u64, json: bool) -> Result<()> {
    let mut costs = Vec::new();
    for &window in windows {
        costs.push(events::drain_cost(window, events)?);
    }
    if json {
        for c in &costs {
            println!(
                "{}",
                serde_json::json!({
                    "event_window": c.window,
                    "events": c.events,
                    "ns_per_event": c.ns_per_event,
                    "commit_ns_per_event": c.commit_ns_per_event,
                    "ephemeral_objects": c.ephemeral,
                })
            );
        }
        return Ok(());
    }
    println!();
    println!(
        "Draining a program's events, CPU ns per event (objects freed after `window` younger \
         ones; drained every 8,192 events, committed every 2^20, the caches cleared between \
         drains):"
    );
    println!();
    println!("| window | events | drain, ns per event | commits, ns per event | freed before committed |");
    println!("|---|---|---|---|---|");
    for c in &costs {
        println!(
            "| {} | {} | {:.1} | {:.1} | {} |",
            c.window, c.events, c.ns_per_event, c.commit_ns_per_event, c.ephemeral
        );
    }
    Ok(())
}

pub(crate) fn print_churn(rows: &[serde_json::Value]) {
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    println!();
    println!(
        "Records coming and going, CPU ms: a share of the records freed and as many allocated \
         at random addresses, the record store's walk before and after it settles, and a \
         BTreeMap given the same changes:"
    );
    println!();
    println!(
        "| records | changes each way | store: events | walk | settle | walk settled | BTreeMap: events | walk |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            r["records"],
            r["changes_each_way"],
            f(r, "store_events_ms"),
            f(r, "store_walk_unsettled_ms"),
            f(r, "store_settle_ms"),
            f(r, "store_walk_settled_ms"),
            f(r, "btree_events_ms"),
            f(r, "btree_walk_ms"),
        );
    }
}

pub(crate) fn print_tables(rows: &[serde_json::Value], kernel: Vec<(&str, f64, f64)>) {
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    println!("Time per interval, CPU ms on one core (medians):");
    println!();
    println!(
        "| records | pages | interval | in the fake mover | daemon's own | own, freed memory kept | prioritize | assign_tiers | first interval (pages moved) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} ({}) |",
            r["records"],
            r["pages"],
            f(r, "interval_ms"),
            f(r, "interval_mover_ms"),
            f(r, "interval_own_ms"),
            f(r, "kept_interval_own_ms"),
            f(r, "prioritize_ms"),
            f(r, "assign_tiers_ms"),
            f(r, "first_interval_ms"),
            r["first_interval_moved_pages"],
        );
    }
    println!();
    println!("Memory, heap bytes per record (requested from the allocator):");
    println!();
    println!(
        "| records | records map | objects map | daemon state | kept between intervals | interval's peak extra | peak RSS MiB (with the fake's page map) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} |",
            r["records"],
            f(r, "records_map_bytes_per_record"),
            f(r, "objects_map_bytes_per_record"),
            f(r, "state_bytes_per_record"),
            f(r, "kept_between_intervals_bytes_per_record"),
            f(r, "interval_peak_extra_bytes_per_record"),
            f(r, "peak_rss_mib"),
        );
    }
    println!();
    if kernel.is_empty() {
        println!("Locating pages could not be timed here.");
        return;
    }
    let costs: Vec<String> = kernel
        .iter()
        .map(|(how, all, turn)| {
            format!("{how} {all:.0} ns (a twelfth of the records: {turn:.0} ns)")
        })
        .collect();
    println!(
        "Locating a page costs the kernel (CPU, best of 5, on our own memory laid out as the \
         records, all of them or a twelfth as at 10^6 records): {}. The daemon here locates with \
         {}. Pages each interval asked it to locate, and what that adds (steady intervals at the \
         twelfth's cost, the first at the whole's):",
        costs.join("; "),
        kernel.last().unwrap().0
    );
    println!();
    let header: Vec<String> = kernel
        .iter()
        .map(|(how, _, _)| format!("kernel ms per interval with {how} (first)"))
        .collect();
    println!(
        "| records | pages | located per interval (first) | {} |",
        header.join(" | ")
    );
    println!("|---|---|---|{}", "---|".repeat(kernel.len()));
    for r in rows {
        let ms: Vec<String> = kernel
            .iter()
            .map(|(_, all, turn)| {
                format!(
                    "{:.0} ({:.0})",
                    f(r, "interval_located_pages") * turn / 1e6,
                    f(r, "first_interval_located_pages") * all / 1e6
                )
            })
            .collect();
        println!(
            "| {} | {} | {:.0} ({}) | {} |",
            r["records"],
            r["pages"],
            f(r, "interval_located_pages"),
            r["first_interval_located_pages"],
            ms.join(" | ")
        );
    }
}
