//! The idle purge: cached extents unused for a quarter of a second go back to the kernel,
//! checked by frees, tracked allocations and mimalloc's heartbeat, for every shard at once.

use super::*;

/// Cached dirty extents not reused for this long (in ticks, `ticks_at`: 250 ms) are returned to the
/// kernel: a program that finished a phase does not keep its peak footprint forever, nor carry
/// it into the next phase's peak (docs/design/dirty-cache.md).
pub(super) const DIRTY_IDLE_TICKS: u64 = 2;

/// Ticks (`ticks_at`) per second.
pub(super) const TICKS_PER_SECOND: u64 = 8;

/// The tick of `now_ns`, a time read from `report::now_ns` (CLOCK_MONOTONIC_COARSE, a vDSO
/// read, no syscall): coarse monotonic time in eighths of a second. The allocator's entry points
/// take the time their caller read for its report, so an allocation or a free reads the clock
/// once.
pub(super) fn ticks_at(now_ns: u64) -> u64 {
    now_ns / (1_000_000_000 / TICKS_PER_SECOND)
}

/// The idle purge for a caller that is not freeing (a tracked allocation, mimalloc's heartbeat),
/// at `now_ns` on `CLOCK_MONOTONIC_COARSE` (which the caller has read anyway), so that a program
/// that has stopped freeing tracked objects still returns its idle cached memory, instead of
/// keeping up to the whole cache until its next free. Cheap when nothing is cached (one load) or
/// this tick's purge is done (two loads), and never waits for a lock: a shard busy at the moment
/// is left to the next tick. The caller must hold no shard's lock.
pub fn purge_if_due(now_ns: u64) {
    if DIRTY_BYTES.load(Ordering::Relaxed) == 0 {
        return;
    }
    let now = ticks_at(now_ns);
    if purge_due(now) {
        other_shards(SHARD_COUNT, 0, now, true);
    }
}

/// Whether the idle purge is due at tick `now`: true for one caller per tick.
pub(super) fn purge_due(now: u64) -> bool {
    #[cfg(test)]
    if tests::PURGE_OFF.load(Ordering::Relaxed) {
        return false;
    }
    LAST_PURGE_TICK.load(Ordering::Relaxed) != now
        && LAST_PURGE_TICK.swap(now, Ordering::Relaxed) != now
}

/// The process-wide part of a free in shard `except`, done after releasing its lock and taking
/// one other shard's lock at a time: returns `excess` bytes of the other shards' dirty cache to
/// the kernel, and with `purge`, their extents idle at tick `now` (`except` = `SHARD_COUNT`:
/// every shard's). A shard busy at the moment is
/// skipped by the purge (the next tick's purge gets it), not by the eviction.
pub(super) fn other_shards(except: usize, mut excess: usize, now: u64, purge: bool) {
    for (id, shard) in SHARDS.iter().enumerate() {
        if id == except {
            continue;
        }
        let mut state = if excess > 0 {
            shard.lock()
        } else {
            match shard.try_lock() {
                Some(state) => state,
                None => continue,
            }
        };
        let here = excess.min(state.dirty_bytes);
        if here > 0 {
            state.evict_dirty(here);
            excess -= here;
        }
        if purge {
            state.purge_idle(now);
        }
        state.after_change();
    }
}

impl State {
    /// Returns cached dirty extents idle for `DIRTY_IDLE_TICKS` to the kernel (a scan of the
    /// dirty set); runs at most once a tick for each shard, from frees and allocations and
    /// mimalloc's heartbeat (`purge_due`).
    pub(super) fn purge_idle(&mut self, now: u64) {
        // Idle quick-listed extents go to the index first, to be purged with the others below.
        let mut idle_quick = Vec::new();
        let chunks = &self.chunks;
        self.quick.take_idle(
            |chunk, start| now.saturating_sub(chunks[chunk].site(start)) >= DIRTY_IDLE_TICKS,
            |chunk, start, pages| idle_quick.push((chunk, start, pages)),
        );
        for (chunk, start, pages) in idle_quick {
            self.quick_to_index(chunk, start, pages);
        }
        if self.dirty.is_empty() {
            return;
        }
        let mut idle = Vec::new();
        // An inconsistent index is the invariant checker's to report; purge what was found.
        let _ = self.dirty.for_each(|key| {
            let cached = self.chunks[key.chunk as usize].site(key.start as usize);
            if now.saturating_sub(cached) >= DIRTY_IDLE_TICKS {
                idle.push(key);
            }
        });
        // Evicting whole extents in any order leaves the same state: each becomes clean and
        // merges with its clean neighbours.
        let mut evicted = Evicted::new();
        for key in idle {
            self.evict_dirty_extent(key, key.pages as usize, &mut evicted);
        }
        self.give_back(&mut evicted);
    }
}
