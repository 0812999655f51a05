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

/// Scratch moved at a time; the whole takes at most `ROOM_DEADLINE`, which bounds how long the
/// program waits at attach (the library waits at most a second for its tiers).
const STEP_BYTES: usize = 16 << 20;
const ROOM_DEADLINE: Duration = Duration::from_millis(500);

impl crate::Daemon {
    /// Makes room in the fastest tier for what process `id`'s placement plans there (at most
    /// the capacity it was computed for), beyond what the tier has free, plus the kernel's own
    /// margin; returns the bytes made room for (also kept for status).
    pub(crate) fn make_room_for_placement(&mut self, id: u64) -> u64 {
        let tiers = self.topology.tiers.len();
        if tiers < 2 || self.config.dry_run {
            return 0;
        }
        let Some(guided) = self.processes.get(&id).and_then(|p| p.guided.as_ref()) else {
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
        self.topology.refresh_free(&self.config.sys_root);
        let (capacity, free) = self.topology.tier_bytes(0);
        // The kernel keeps some of a node free (its watermarks): an allocation that finds only
        // that much goes to the next node.
        let margin = (capacity / 64).max(4 << 20);
        let need = (planned + margin).saturating_sub(free);
        if need < (1 << 20) {
            return 0;
        }
        let Some(&node) = self.topology.tiers[0].nodes.first() else {
            return 0;
        };
        let made = balloon(self.mover.as_mut(), node, need as usize);
        if let Some(g) = self.processes.get_mut(&id).and_then(|p| p.guided.as_mut()) {
            g.room_made_bytes += made;
        }
        tracing::info!(
            pid = self.processes.get(&id).map_or(0, |p| p.pid),
            planned_mib = planned >> 20,
            free_mib = free >> 20,
            made_mib = made >> 20,
            "made room in the fastest tier for the placement (its coldest memory reclaimed)"
        );
        made
    }
}

/// Moves up to `bytes` of the daemon's own fresh pages to `node` and frees them; returns the
/// bytes that got there. Stops early when a step gets less than half its pages there (the
/// node has nothing more to reclaim) or at the deadline.
fn balloon(mover: &mut dyn objtier_sys::pages::PageMover, node: u32, bytes: usize) -> u64 {
    let deadline = Instant::now() + ROOM_DEADLINE;
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

    /// The balloon moves scratch pages into the node until it has made the room asked, in
    /// steps, and stops when a step finds the node full.
    #[test]
    fn the_balloon_moves_what_was_asked_and_stops_at_a_full_node() {
        let mut roomy = Node {
            room: usize::MAX,
            calls: vec![],
        };
        assert_eq!(super::balloon(&mut roomy, 0, 40 << 20), 40 << 20);
        assert_eq!(roomy.calls, [4096, 4096, 2048], "16 + 16 + 8 MiB");

        let mut full = Node {
            room: 1024, // 4 MiB
            calls: vec![],
        };
        assert_eq!(super::balloon(&mut full, 0, 40 << 20), 4 << 20);
        assert_eq!(full.calls.len(), 1, "the first step found the node full");
    }
}
