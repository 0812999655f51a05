//! `objtier doctor`: what this machine offers objtier, and what to do about what it lacks.

use objtier_sys::pages::{LinuxPageMover, PageMover};
use objtier_sys::probe::{probe_damon, probe_perf, probe_proc, Roots, SourceReport};
use objtier_sys::topology::Topology;
use serde_json::json;
use std::process::ExitCode;

/// `move_pages` on a page of our own: the one kernel call objtier cannot do without.
fn probe_move_pages() -> Result<i32, String> {
    let buffer = vec![1u8; 2 * objtier_sys::PAGE_SIZE];
    let page = (buffer.as_ptr() as u64).next_multiple_of(objtier_sys::PAGE_SIZE as u64);
    let mut status = [0i32];
    match LinuxPageMover.query(std::process::id(), &[page], &mut status) {
        Ok(()) if status[0] >= 0 => Ok(status[0]),
        Ok(()) => Err(format!("the query returned errno {}", -status[0])),
        Err(e) => Err(e.to_string()),
    }
}

fn report_json(r: &SourceReport) -> serde_json::Value {
    json!({
        "name": r.name,
        "implemented": r.implemented,
        "usable": r.usable,
        "detail": r.detail,
        "remedy": r.remedy,
    })
}

pub fn run(as_json: bool) -> anyhow::Result<ExitCode> {
    let roots = Roots::default();
    // SAFETY: geteuid has no failure mode.
    let euid = unsafe { libc::geteuid() };
    let topology = Topology::discover(&roots.sys);
    let move_pages = probe_move_pages();
    // In the order `--source auto` tries them.
    let sources = [
        probe_perf(&roots, objtier_sys::perf::ring::try_open),
        probe_damon(&roots, euid),
        probe_proc(&roots, euid),
    ];
    let chosen = sources
        .iter()
        .find(|s| s.implemented && s.usable)
        .map_or("none", |s| s.name);
    if as_json {
        let topology_json = match &topology {
            Ok(t) => json!({
                "source": format!("{:?}", t.tier_source),
                "nodes": t.nodes.iter().map(|n| json!({
                    "id": n.id, "has_cpus": n.has_cpus,
                    "total_bytes": n.total_bytes, "free_bytes": n.free_bytes,
                    "tier": t.tier_of_node(n.id),
                })).collect::<Vec<_>>(),
                "tiers": t.tiers.iter().map(|t| json!({"kernel_tier": t.kernel_id, "nodes": t.nodes})).collect::<Vec<_>>(),
            }),
            Err(e) => json!({"error": e.to_string()}),
        };
        let out = json!({
            "topology": topology_json,
            "move_pages": match &move_pages { Ok(node) => json!({"works": true, "node": node}), Err(e) => json!({"works": false, "error": e}) },
            "sources": sources.iter().map(report_json).collect::<Vec<_>>(),
            "auto_source": chosen,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mib = |b: u64| b / (1 << 20);
    match &topology {
        Ok(t) => {
            println!("NUMA nodes:");
            for n in &t.nodes {
                let tier = t.tier_of_node(n.id).map_or("no tier".into(), |i| {
                    format!("tier {i} (kernel memory_tier{})", t.tiers[i].kernel_id)
                });
                println!(
                    "  node {}: {}, {} MiB ({} MiB free), {tier}",
                    n.id,
                    if n.has_cpus { "CPUs" } else { "no CPUs" },
                    mib(n.total_bytes),
                    mib(n.free_bytes)
                );
            }
            let order: Vec<String> = t.tiers.iter().map(|t| format!("{:?}", t.nodes)).collect();
            println!(
                "tiers, fastest first: {} (from {:?})",
                order.join(" > "),
                t.tier_source
            );
            if t.tiers.len() < 2 {
                println!(
                    "  note: a single tier: objtier has nothing to move here. To see it work on \
                     real tiers, use scripts/tiered-vm (a QEMU guest with HMAT-declared tiers)."
                );
            }
        }
        Err(e) => println!("NUMA topology: cannot read it: {e}"),
    }
    match &move_pages {
        Ok(node) => println!("move_pages: works (a page of this process is on node {node})"),
        Err(e) => println!("move_pages: does not work: {e}"),
    }
    println!("access sources:");
    for s in &sources {
        let state = match (s.implemented, s.usable) {
            (true, true) => "usable",
            (true, false) => "NOT usable",
            (false, _) => "not implemented yet",
        };
        println!("  {}: {state}: {}", s.name, s.detail);
        if let Some(remedy) = &s.remedy {
            println!("    what to do: {remedy}");
        }
    }
    if chosen == "none" {
        println!(
            "`objtier daemon --source auto` would run with no access source: objects are \
             tracked and capacity caps enforced, but nothing is promoted."
        );
    } else {
        println!("`objtier daemon --source auto` would use: {chosen}");
    }
    Ok(ExitCode::SUCCESS)
}
