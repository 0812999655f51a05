//! Room in the fast tier for a placement, before the program's objects are born there.
//!
//! A page the library binds to the fast tier takes it only while the node has free memory:
//! its allocation falls to the slow node at once, without reclaiming anything on the fast one,
//! so the cold file pages a launcher left there (mpirun's libraries: more than hpcc's whole
//! share of the fast tier) keep it. A move *into* a node does reclaim there, and never calls
//! the OOM killer (`__GFP_THISNODE`): the daemon moves as many of its own scratch pages into
//! the fast tier as the placement lacks room for, and frees them, so that the kernel has
//! reclaimed (or, with demotion on, demoted) that much of the tier's coldest memory first.
//! See docs/design/room-for-placements.md.

use objtier_sys::pages::PageStatus;
use objtier_sys::PAGE_SIZE;
use std::time::{Duration, Instant};

/// Scratch moved at a time; the whole takes at most the deadline given, which bounds how long
/// the program waits at attach (the library waits at most a second for its tiers) and how long
/// an interval's step is held up.
const STEP_BYTES: usize = 16 << 20;
const ATTACH_DEADLINE: Duration = Duration::from_millis(500);
const INTERVAL_DEADLINE: Duration = Duration::from_millis(200);

impl crate::daemon::Daemon {
    /// At attach: room in the fastest tier for what process `id`'s placement plans there.
    pub(crate) fn make_room_for_placement(&mut self, id: u64) {
        self.topology.refresh_free(&self.config.sys_root);
        self.make_room(id, ATTACH_DEADLINE, false);
    }

    /// Every interval: room for what the placements plan in the fastest tier and their objects
    /// do not hold there yet (objects to be born: hpcc's table, allocated after its HPL phase,
    /// found the room made at attach taken again by then). Expects free memory just refreshed.
    pub(crate) fn keep_room_for_placements(&mut self) {
        let ids: Vec<u64> = self
            .processes
            .iter()
            .filter(|(_, p)| p.guided.is_some() && !p.exited())
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            if self.make_room(id, INTERVAL_DEADLINE, true) > 0 {
                self.topology.refresh_free(&self.config.sys_root);
            }
        }
    }

    /// Makes room in the fastest tier for what process `id`'s placement plans there (at most
    /// the capacity it was computed for) and does not hold there yet, beyond what the tier has
    /// free, plus the kernel's own margin; returns the bytes made room for (also kept for
    /// status). `again`: only if the placed objects grew into the room made last time; room that
    /// others took instead (a launcher that faults its code back in) would be taken again, and
    /// making it at every interval only moves pages (hpcc: 0.05 GiB, against NUMA balancing's
    /// 0.03, for no more of its accesses in the fast tier).
    fn make_room(&mut self, id: u64, deadline: Duration, again: bool) -> u64 {
        let tiers = self.topology.tiers.len();
        if tiers < 2 || self.config.dry_run {
            return 0;
        }
        let Some(p) = self.processes.get(&id) else {
            return 0;
        };
        let Some(guided) = p.guided.as_ref() else {
            return 0;
        };
        let planned = guided.planned_bytes(tiers)[0];
        let planned = guided
            .placement
            .computed_for
            .tiers
            .first()
            .and_then(|t| t.capacity_bytes)
            .map_or(planned, |cap| planned.min(cap));
        // Objects not located yet count as held: better too little room made than reclaim at
        // every interval for objects already in place.
        let (resident, unlocated, _) = p.placed_resident_bytes(tiers);
        let held = resident[0] + unlocated;
        if again && guided.room_held_bytes.is_some_and(|before| held <= before) {
            return 0;
        }
        let (capacity, free) = self.topology.tier_bytes(0);
        // The kernel keeps some of a node free (its watermarks): an allocation that finds only
        // that much goes to the next node.
        let margin = (capacity / 64).max(4 << 20);
        let need = (planned.saturating_sub(held) + margin).saturating_sub(free);
        if need < (1 << 20) {
            return 0;
        }
        let Some(&node) = self.topology.tiers[0].nodes.first() else {
            return 0;
        };
        let pid = p.pid;
        let made = balloon(self.mover.as_mut(), node, need as usize, deadline);
        if let Some(g) = self.processes.get_mut(&id).and_then(|p| p.guided.as_mut()) {
            g.room_made_bytes += made;
            g.room_held_bytes = Some(held);
        }
        tracing::info!(
            pid,
            planned_mib = planned >> 20,
            held_mib = held >> 20,
            free_mib = free >> 20,
            made_mib = made >> 20,
            made_pages = made / PAGE_SIZE as u64,
            "made room in the fastest tier for the placement (its coldest memory reclaimed)"
        );
        made
    }
}

/// Moves up to `bytes` of the daemon's own fresh pages to `node` and frees them; returns the
/// bytes that got there. Stops early when a step gets less than half its pages there (the
/// node has nothing more to reclaim) or at the deadline.
fn balloon(
    mover: &mut dyn objtier_sys::pages::PageMover,
    node: u32,
    bytes: usize,
    deadline: Duration,
) -> u64 {
    let deadline = Instant::now() + deadline;
    let me = std::process::id();
    let mut made = 0u64;
    let mut left = bytes.div_ceil(PAGE_SIZE) * PAGE_SIZE;
    while left > 0 && Instant::now() < deadline {
        let len = left.min(STEP_BYTES);
        let Some(scratch) = Scratch::new(len) else {
            break;
        };
        let pages: Vec<u64> = (0..len / PAGE_SIZE)
            .map(|i| scratch.addr + (i * PAGE_SIZE) as u64)
            .collect();
        let mut status: Vec<PageStatus> = vec![0; pages.len()];
        if mover.move_to(me, &pages, node, &mut status).is_err() {
            break;
        }
        let arrived = status.iter().filter(|&&s| s == node as PageStatus).count();
        made += (arrived * PAGE_SIZE) as u64;
        left -= len;
        if arrived < pages.len() / 2 {
            break;
        }
    }
    made
}

/// Anonymous memory of the daemon's, touched so that it has pages to move; unmapped on drop.
struct Scratch {
    addr: u64,
    len: usize,
}

impl Scratch {
    fn new(len: usize) -> Option<Scratch> {
        // SAFETY: a fresh private anonymous mapping, ours alone until unmapped.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // Base pages: a huge page would move whole or not at all.
        // SAFETY: advice on the mapping just made.
        unsafe { libc::madvise(ptr, len, libc::MADV_NOHUGEPAGE) };
        for offset in (0..len).step_by(PAGE_SIZE) {
            // SAFETY: within the mapping, writable.
            unsafe { std::ptr::write_volatile((ptr as *mut u8).add(offset), 1) };
        }
        Some(Scratch {
            addr: ptr as u64,
            len,
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use objtier_sys::pages::{MoveError, PageMover, PageStatus};

    /// A node that takes `room` more pages, then answers ENOMEM.
    struct Node {
        room: usize,
        calls: Vec<usize>,
    }

    impl PageMover for Node {
        fn query(&mut self, _: u32, _: &[u64], _: &mut [PageStatus]) -> Result<(), MoveError> {
            unreachable!("the balloon only moves")
        }
        fn move_to(
            &mut self,
            _: u32,
            pages: &[u64],
            node: u32,
            status: &mut [PageStatus],
        ) -> Result<(), MoveError> {
            self.calls.push(pages.len());
            for s in status.iter_mut() {
                *s = if self.room > 0 {
                    self.room -= 1;
                    node as PageStatus
                } else {
                    -libc::ENOMEM
                };
            }
            Ok(())
        }
        fn huge_page_size(&mut self) -> Option<u64> {
            None
        }
        fn split_huge(&mut self, _: u32, _: &[u64]) -> Result<u64, MoveError> {
            Ok(0)
        }
    }

    /// A placement that plans more of the fastest tier than it has free gets that room made
    /// at attach (and its margin): the daemon's scratch pages move in, and status counts it;
    /// one whose objects already hold their room gets none.
    #[test]
    fn a_placement_gets_the_room_it_plans_beyond_the_free_memory() {
        use crate::guided::tests::{daemon, placement};
        let (mut d, _peer, _sys) = daemon();
        // 64 MiB fast, 1 MiB of it free.
        d.topology = objtier_sys::topology::Topology::two_tiers(64 << 20, 1 << 20, 1 << 30);
        d.mover = Box::new(Node {
            room: usize::MAX,
            calls: vec![],
        });
        let file = crate::guided::PlacementFile {
            path: "p.json".into(),
            placement: placement(),
        };
        d.place_by(1, file, "/opt/app/bin/app", None, |_| None);
        d.make_room_for_placement(1);
        // The placement plans 1 MiB of tier 0 (its capacity); the margin is 4 MiB.
        let made = d.processes[&1].guided.as_ref().unwrap().room_made_bytes;
        assert_eq!(made, 4 << 20);
        let status = crate::status::status_json(&d, None);
        assert_eq!(
            status["processes"][0]["placement"]["room_made_bytes"],
            4 << 20
        );
        // With 8 MiB free, nothing more is made.
        d.topology = objtier_sys::topology::Topology::two_tiers(64 << 20, 8 << 20, 1 << 30);
        d.keep_room_for_placements();
        assert_eq!(
            d.processes[&1].guided.as_ref().unwrap().room_made_bytes,
            made
        );
        // Free memory down to 1 MiB again, and none of it taken by the placed objects (they
        // hold no more than before): someone else took the room, and it is not made again.
        d.topology = objtier_sys::topology::Topology::two_tiers(64 << 20, 1 << 20, 1 << 30);
        d.keep_room_for_placements();
        assert_eq!(
            d.processes[&1].guided.as_ref().unwrap().room_made_bytes,
            made
        );
    }

    /// The balloon moves scratch pages into the node until it has made the room asked, in
    /// steps, and stops when a step finds the node full.
    #[test]
    fn the_balloon_moves_what_was_asked_and_stops_at_a_full_node() {
        let mut roomy = Node {
            room: usize::MAX,
            calls: vec![],
        };
        assert_eq!(
            super::balloon(&mut roomy, 0, 40 << 20, super::ATTACH_DEADLINE),
            40 << 20
        );
        assert_eq!(roomy.calls, [4096, 4096, 2048], "16 + 16 + 8 MiB");

        let mut full = Node {
            room: 1024, // 4 MiB
            calls: vec![],
        };
        assert_eq!(
            super::balloon(&mut full, 0, 40 << 20, super::ATTACH_DEADLINE),
            4 << 20
        );
        assert_eq!(full.calls.len(), 1, "the first step found the node full");
    }
}
