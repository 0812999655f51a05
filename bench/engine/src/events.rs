//! What the daemon spends on each event the library sends: the drain of a process's ring.
//!
//! Every tracked allocation and free reaches the daemon as an event, and an allocation-heavy
//! program sends millions a second (bench/alloc `cleaner`: 2.2 M in a 1.3 s run). On a machine
//! whose CPUs the program keeps busy, each microsecond the daemon spends on them is taken from
//! the program, so the cost per event bounds how close "with a daemon" can come to "without".
//!
//! The stream is a program's: objects of 1 to 16 pages (as [`Rng::pages`]) allocated one after
//! another, each freed once `window` younger ones exist (first in, first out, as a pipeline's
//! cleaner frees its workers' buffers), at addresses a simple allocator reuses (the last freed
//! extent of the size, else fresh ones at the end of a heap). The events go through a real ring
//! and are drained by [`Process::drain`] every 8,192 events, as the library's doorbell wakes
//! the daemon; every 2^20 events the interval's allocations are committed, as the daemon does
//! halfway through each interval. Between drains the bench writes every cache line of a 64 MiB
//! buffer, as the program would be writing its own data meanwhile on a real machine: without
//! that, the daemon's tables would sit in the caches as they never do beside a program that
//! allocates (the window's objects alone, 100,000 of 12 KiB, are 1.2 GB). Only the drains and
//! commits are timed, as CPU time of this thread.

use super::{cpu_ns, Rng};
use anyhow::{bail, Result};
use objtier_daemon::process::Process;
use objtier_policy::DEFAULT_SPLIT_BYTES;
use objtier_wire::{Event, EventKind, PAGE_SIZE};

/// Events between drains: an eighth of the library's default ring, when its doorbell rings.
const DRAIN_EVERY: u64 = 8192;
/// Events between commits of the interval's allocations (about half a second of `cleaner`).
const COMMIT_EVERY: u64 = 1 << 20;
/// The buffer written between drains, standing for the program's own memory traffic.
const POLLUTION_BYTES: usize = 64 << 20;

/// One measurement: `events` events of a stream whose objects live for `window` allocations.
pub struct Cost {
    pub window: u64,
    pub events: u64,
    /// In drains.
    pub ns_per_event: f64,
    /// In the commits of each interval's allocations, spread over the events.
    pub commit_ns_per_event: f64,
    /// Objects freed while still pending (never became a record).
    pub ephemeral: u64,
}

/// Drains `events` events of the stream described above through a synthetic process.
pub fn drain_cost(window: u64, events: u64) -> Result<Cost> {
    let (mut process, _peer) = Process::synthetic(1, 4242, 1 << 16, DEFAULT_SPLIT_BYTES)?;
    // As the daemon runs by default: counting how each site's objects live.
    process
        .lifetimes
        .set_young_ns(Some(objtier_policy::lifetimes::young_ns(2_000_000_000)));
    let mut rng = Rng(0xd4a1_0000 + window);
    let mut pollution = vec![0u8; POLLUTION_BYTES];
    let heap_start = 0x7f00_0000_0000u64;
    let mut heap_end = heap_start;
    // Freed extents by size in pages, reused last in, first out.
    let mut reusable: Vec<Vec<u64>> = vec![Vec::new(); 17];
    let mut live: std::collections::VecDeque<(u64, u64)> = Default::default();
    let mut pushed = 0u64;
    let mut timed_ns = 0u64;
    let mut commit_ns = 0u64;
    let mut since_drain = 0u64;
    let mut since_commit = 0u64;
    let push = |process: &mut Process, event: Event| -> Result<()> {
        if !process.ring.header().push(&event) {
            bail!("the ring filled between drains");
        }
        Ok(())
    };
    // A clock of 100 ns an event, so that the objects' lifetimes are counted as the daemon
    // counts a program's.
    let event = |kind: EventKind, addr: u64, len: u64, site: u64, pushed: u64| Event {
        kind: kind as u32,
        flags: 0,
        addr,
        len,
        time_ns: pushed * 100,
        site,
    };
    while pushed < events {
        let pages = rng.pages();
        let addr = reusable[pages as usize].pop().unwrap_or_else(|| {
            let addr = heap_end;
            heap_end += pages * PAGE_SIZE as u64;
            addr
        });
        let len = pages * PAGE_SIZE as u64;
        push(
            &mut process,
            event(EventKind::Alloc, addr, len, 1 + rng.next() % 64, pushed),
        )?;
        live.push_back((addr, pages));
        pushed += 1;
        if live.len() as u64 > window {
            let (addr, pages) = live.pop_front().expect("the window is not empty");
            push(&mut process, event(EventKind::Free, addr, 0, 0, pushed))?;
            reusable[pages as usize].push(addr);
            pushed += 1;
        }
        since_drain += 2;
        since_commit += 2;
        if since_drain >= DRAIN_EVERY {
            since_drain = 0;
            for line in pollution.chunks_mut(64) {
                line[0] = line[0].wrapping_add(1);
            }
            let start = cpu_ns();
            process.drain();
            timed_ns += cpu_ns() - start;
            if since_commit >= COMMIT_EVERY {
                since_commit = 0;
                let start = cpu_ns();
                process.commit_pending(pushed * 100);
                commit_ns += cpu_ns() - start;
            }
        }
    }
    let start = cpu_ns();
    process.drain();
    timed_ns += cpu_ns() - start;
    std::hint::black_box(&pollution);
    Ok(Cost {
        window,
        events: process.stats.events,
        ns_per_event: timed_ns as f64 / process.stats.events.max(1) as f64,
        commit_ns_per_event: commit_ns as f64 / process.stats.events.max(1) as f64,
        ephemeral: process.stats.ephemeral_objects,
    })
}
