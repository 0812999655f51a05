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
    match LinuxPageMover::default().query(std::process::id(), &[page], &mut status) {
        Ok(()) if status[0] >= 0 => Ok(status[0]),
        Ok(()) => Err(format!("the query returned errno {}", -status[0])),
        Err(e) => Err(e.to_string()),
    }
}

/// How the daemon will locate pages (`/proc/PID/pagemap` or `move_pages`), checked on pages of
/// our own: spread over up to two nodes with `move_pages` where there are several, then located
/// both ways. Returns (method, pages checked, nodes they were found on, whether both agree).
fn probe_page_location(nodes: &[u32]) -> (&'static str, usize, Vec<i32>, bool) {
    const PAGES: usize = 32;
    let ps = objtier_sys::PAGE_SIZE;
    let buffer = vec![1u8; (PAGES + 1) * ps];
    let first = (buffer.as_ptr() as u64).next_multiple_of(ps as u64);
    let pages: Vec<u64> = (0..PAGES as u64).map(|i| first + i * ps as u64).collect();
    let pid = std::process::id();
    let mut by_syscall = LinuxPageMover::default();
    if let Some(&other) = nodes.get(1) {
        // Odd pages to the second node, so that the check covers a node the first is not.
        let odd: Vec<u64> = pages.iter().copied().skip(1).step_by(2).collect();
        let mut status = vec![0; odd.len()];
        let _ = by_syscall.move_to(pid, &odd, other, &mut status);
    }
    let mut syscall = vec![i32::MIN; PAGES];
    let mut daemons = LinuxPageMover::new();
    let mut located = vec![i32::MIN; PAGES];
    let ok = by_syscall.query(pid, &pages, &mut syscall).is_ok()
        && daemons.query(pid, &pages, &mut located).is_ok();
    std::hint::black_box(&buffer);
    let mut seen: Vec<i32> = syscall.iter().copied().filter(|&n| n >= 0).collect();
    seen.sort_unstable();
    seen.dedup();
    (
        daemons.locates_with(),
        PAGES,
        seen,
        ok && syscall == located,
    )
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
    let node_ids: Vec<u32> = topology
        .as_ref()
        .map(|t| t.nodes.iter().map(|n| n.id).collect())
        .unwrap_or_default();
    let location = probe_page_location(&node_ids);
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
            "page_location": json!({"method": location.0, "pages": location.1, "nodes": location.2, "agrees_with_move_pages": location.3}),
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
    let (method, pages, nodes, agrees) = &location;
    println!(
        "page location: with {method}{}; on {pages} pages of this process on nodes {nodes:?} it {} \
         move_pages",
        if *method == "pagemap" {
            " (/proc/PID/pagemap frames, 4-5 times cheaper than move_pages)"
        } else {
            " (pagemap needs root and the kernel's memory blocks)"
        },
        if *agrees { "agrees with" } else { "DISAGREES with" }
    );
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
