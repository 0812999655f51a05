//! Page-granular memory for tracked objects (those of at least `OBJTIER_TRACK_MIN` bytes).
//!
//! Each tracked object gets whole pages of its own, so that the daemon can move it between tiers
//! without dragging a neighbour along. Objects are carved out of large chunks of address space
//! (1 GiB each, 1 GiB-aligned, reserved with `MAP_NORESERVE`) instead of one `mmap` per object:
//! a process with hundreds of thousands of live objects stays far below `vm.max_map_count`, and
//! chunks are where per-tier placement binds memory, once per chunk. A chunk is mapped with
//! 1 GiB of slack for its alignment, trimmed at once; under an address-space limit (`ulimit -v`)
//! that refuses the slack, without it, at an aligned address below the mmap area. If that is
//! refused too, `alloc` fails, the caller serves the object from mimalloc, untracked, and no
//! chunk is tried again for a second.
//!
//! **Placement.** Each chunk belongs to one *placement*: the default (no memory policy: first
//! touch decides, and the daemon migrates later), or a set of NUMA nodes (a tier, as the daemon
//! describes it) that the whole chunk is bound to with one `mbind(MPOL_PREFERRED_MANY)` when it
//! is mapped. An object whose allocation site the daemon placed in a tier is carved from a chunk
//! of that placement, so placing 200,000 objects costs a handful of mappings, not 200,000.
//! "Preferred", not "bind": a full tier falls back to other nodes instead of failing the
//! allocation. Free extents are indexed per placement and never cross chunks.
//!
//! Inside a chunk, memory is a sequence of *extents* (runs of pages), each either allocated or
//! free, tiling `[0, bump)`; pages past `bump` were never handed out. Every extent writes a
//! boundary tag into a per-chunk side table at its first page (and its last, if longer than one
//! page), so `free` finds an object's length and coalesces with free neighbours in O(1) without
//! touching the object's own memory. Free extents are reused by best fit, and among extents of
//! the same size the one at the lowest (chunk, page) first (`free_index`).
//!
//! Free extents are *clean* (no resident pages, `MADV_DONTNEED`ed: they read as zero and cost no
//! memory) or *dirty* (kept resident for quick reuse, like glibc's trim threshold: a program
//! that frees and reallocates buffers should not pay a page fault per page each time). Dirty
//! extents merge with dirty neighbours and are reused first; the cache is bounded so that live
//! plus cached bytes stay within the process's high-water mark of live bytes (at least 64 MiB
//! of cache), evicting from the tails of the largest extents when a free would exceed it, and
//! extents idle for a quarter of a second are returned to the kernel (checked on frees, tracked
//! allocations and mimalloc's heartbeat: a program that stops freeing still returns them);
//! evictions and purges give their extents back in batches (`discard.rs`).
//! `alloc` says whether the memory it returns is known to be zero, so `calloc` clears only
//! dirty memory. Freed extents of up to `QUICK_MAX_PAGES` pages first wait in per-size quick
//! lists (see `Quick`), so that the common free-then-allocate of one size skips the index's
//! merges and searches.
//!
//! **Shards.** All of the above is one `State` behind one lock, and there are `SHARD_COUNT` of them,
//! like jemalloc's arenas: a thread allocates from shard 0 until it finds that lock held, then
//! from a shard of its own (given round robin, see `lock_for_alloc`), and a free goes to the
//! shard that owns the chunk, whichever thread calls it. Each shard has chunks, placements, free
//! and dirty extents of its own, so every invariant of a `State` holds per shard, and every
//! report about one address is made under the lock of the one shard that owns it. A
//! single-threaded program only ever uses shard 0. Threads that allocate at once soon take
//! different locks (bench/alloc `xthreads`, four threads on two CPUs: with one lock, 15 % of
//! its 1.05 M acquisitions found it held). What is process-wide
//! stays process-wide: the dirty cache's budget (evictions move on to other shards when the
//! freeing shard has too little cached) and the idle purge (the free, allocation or mimalloc
//! heartbeat that starts a tick purges every shard).
//!
//! Ownership of a pointer is answered without a lock by a table indexed by the pointer's 1 GiB
//! granule, which names the owning shard and chunk. A second side table per chunk keeps each live
//! object's allocation site, so the objects re-announced to a (re)attaching daemon keep theirs.

use crate::discard;
use crate::free_index::{self, Free, FreeIndex};
use crate::lock::FutexMutex;
use crate::log;
use alloc::vec::Vec;
use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use objtier_wire::PAGE_SIZE;

const CHUNK_SHIFT: u32 = 30;
const CHUNK_BYTES: usize = 1 << CHUNK_SHIFT;
/// A transparent huge page on x86_64 (and aarch64 with 4 KiB pages).
const HUGE_PAGE_BYTES: usize = 2 << 20;
const HUGE_PAGE_PAGES: usize = HUGE_PAGE_BYTES / PAGE_SIZE;
/// User address space on x86_64/aarch64 with 4-level page tables is 47 bits.
const ADDRESS_BITS: u32 = 47;
const GRANULES: usize = 1 << (ADDRESS_BITS - CHUNK_SHIFT);
/// Independent allocator states (see "Shards" above). A power of two, less than 256.
const SHARD_COUNT: usize = 8;
const SHARD_BITS: u32 = SHARD_COUNT.trailing_zeros();
/// Chunks per shard: the owner table stores `(chunk << SHARD_BITS | shard) + 1` in a u16.
const CHUNKS_PER_SHARD: usize = u16::MAX as usize >> SHARD_BITS;
/// Distinct placements (node sets) a process can have chunks for; more fall back to the default.
const MAX_PLACEMENTS: usize = 16;
/// The placement without a memory policy.
const DEFAULT_PLACEMENT: u32 = 0;

const TAG_ALLOCATED: u32 = 1;
const TAG_TAIL: u32 = 2;
/// A free extent whose pages are still resident (not zeroed).
const TAG_DIRTY: u32 = 4;
/// Both bits: a dirty free extent held in a quick list (see `Quick`), not in the dirty index.
/// To every test written before quick lists it reads as neither a live object nor a free
/// extent to merge with; `is_live` is what tells a live object.
const TAG_QUICK: u32 = TAG_ALLOCATED | TAG_DIRTY;
const TAG_PAGES_SHIFT: u32 = 3;

/// Whether a head tag is a live object's (not a free extent's, nor a quick-listed one's).
#[inline]
fn is_live(tag: u32) -> bool {
    tag & (TAG_ALLOCATED | TAG_DIRTY) == TAG_ALLOCATED
}

/// Quick lists: per shard, for each size of up to `QUICK_MAX_PAGES` pages of the default
/// placement, the last `QUICK_DEPTH` freed extents of exactly that size, reused last in, first
/// out by the next allocation of that size. A program that frees and allocates objects of a
/// few pages again and again (bench/alloc `fragmentation`, `xthreads`) then skips the dirty
/// index: a free no longer merges with its neighbours and an allocation no longer searches,
/// removes and splits. Quick extents are dirty extents in all but the index: counted in the
/// dirty cache, evicted like it (from the index first: an eviction that finds the index empty
/// moves them all into it), and purged like it (the idle purge moves the idle ones into the
/// index, where they merge with their neighbours, and returns them to the kernel with the rest).
const QUICK_MAX_PAGES: usize = 8;
const QUICK_DEPTH: usize = 1024;

/// One shard's quick lists: `(chunk, first page)` of each extent, per size.
struct Quick {
    len: [u16; QUICK_MAX_PAGES],
    entries: [[(u32, u32); QUICK_DEPTH]; QUICK_MAX_PAGES],
}

impl Quick {
    const fn new() -> Self {
        Self {
            len: [0; QUICK_MAX_PAGES],
            entries: [[(0, 0); QUICK_DEPTH]; QUICK_MAX_PAGES],
        }
    }

    fn is_empty(&self) -> bool {
        self.len.iter().all(|&n| n == 0)
    }

    /// Room for an extent of `pages` pages.
    fn has_room(&self, pages: usize) -> bool {
        (1..=QUICK_MAX_PAGES).contains(&pages) && (self.len[pages - 1] as usize) < QUICK_DEPTH
    }

    fn push(&mut self, pages: usize, chunk: usize, start: usize) {
        let n = &mut self.len[pages - 1];
        self.entries[pages - 1][*n as usize] = (chunk as u32, start as u32);
        *n += 1;
    }

    fn pop(&mut self, pages: usize) -> Option<(usize, usize)> {
        let n = self.len.get_mut(pages.wrapping_sub(1))?;
        *n = n.checked_sub(1)?;
        let (chunk, start) = self.entries[pages - 1][*n as usize];
        Some((chunk as usize, start as usize))
    }

    /// Takes out the extent of `pages` pages at `start` of `chunk`; false if not listed.
    fn remove(&mut self, pages: usize, chunk: usize, start: usize) -> bool {
        if !(1..=QUICK_MAX_PAGES).contains(&pages) {
            return false;
        }
        let n = self.len[pages - 1] as usize;
        let list = &mut self.entries[pages - 1];
        match list[..n]
            .iter()
            .position(|&e| e == (chunk as u32, start as u32))
        {
            Some(i) => {
                list.copy_within(i + 1..n, i);
                self.len[pages - 1] -= 1;
                true
            }
            None => false,
        }
    }

    /// Takes out, per size, the oldest extents (a list is in the order they were freed) for
    /// which `idle(chunk, start)` holds, as (chunk, first page, pages).
    fn take_idle(
        &mut self,
        mut idle: impl FnMut(usize, usize) -> bool,
        mut out: impl FnMut(usize, usize, usize),
    ) {
        for size in 0..QUICK_MAX_PAGES {
            let n = self.len[size] as usize;
            let list = &mut self.entries[size];
            let old = list[..n]
                .iter()
                .take_while(|&&(chunk, start)| idle(chunk as usize, start as usize))
                .count();
            for &(chunk, start) in &list[..old] {
                out(chunk as usize, start as usize, size + 1);
            }
            list.copy_within(old..n, 0);
            self.len[size] = (n - old) as u16;
        }
    }

    #[cfg(any(test, feature = "invariants"))]
    fn contains(&self, chunk: usize, start: usize, pages: usize) -> bool {
        (1..=QUICK_MAX_PAGES).contains(&pages)
            && self.entries[pages - 1][..self.len[pages - 1] as usize]
                .contains(&(chunk as u32, start as u32))
    }

    #[cfg(any(test, feature = "invariants"))]
    fn count(&self) -> usize {
        self.len.iter().map(|&n| n as usize).sum()
    }
}

/// Until this coarse tick no ordinary chunk is tried: the last try's address space was refused
/// (a program under `ulimit -v`), and trying again on every allocation would cost an mmap each.
static NO_CHUNK_BEFORE_TICK: AtomicU64 = AtomicU64::new(0);
/// Whether a chunk has been refused once (said once, with `OBJTIER_DEBUG`).
static CHUNK_REFUSED: AtomicBool = AtomicBool::new(false);

/// Largest extent a tag can describe: 2^29 pages (2 TiB).
const MAX_EXTENT_PAGES: usize = 1 << 29;

/// Freed memory kept resident for reuse, per process: at least this much...
const DIRTY_BUDGET_BYTES: usize = 64 << 20;

/// ...and as much as keeps live plus cached bytes within a quarter over the process's own
/// high-water mark of live tracked bytes. The mark itself: a program that churns through a
/// working set reuses its pages the way glibc's heap would (bench/alloc `fragmentation`: 1.03 M
/// page faults with a budget of the live bytes, 152 k with this one, and the same peak RSS).
/// The quarter over it: what a program frees and what it asks for next are rarely the same
/// sizes, so reuse by best fit leaves part of the cache unused while new requests take fresh
/// pages. A program steady at its mark (a JVM whose cleaner frees the direct buffers its
/// workers replace, a server replacing half its buffers) pushed live plus cached over the mark
/// alone, and from there every free returned a page range to the kernel and every allocation
/// faulted one back in: 28 % of the pages such a program allocated were page faults (host test
/// `steady-churn-reuses-its-pages`; 0.4 % now), and a JVM on direct buffers took 4.9x glibc's
/// time (bench/alloc `java`; 1.1x now). A half over the mark did little better than a quarter
/// (docs/performance.md). Idle cached memory is returned by `purge_idle`, so the room over the
/// mark is kept only while the program reuses it.
const DIRTY_OVER_PEAK_DIVISOR: u64 = 4;

/// The dirty cache's budget, for `leaving`, the bytes of an object being freed (still counted
/// live; 0 when nothing is): counting the object both live and cached would evict as much as
/// its free caches.
fn dirty_budget_bytes(leaving: usize) -> usize {
    #[cfg(test)]
    match tests::BUDGET.load(Ordering::Relaxed) {
        0 => {}
        budget => return budget,
    }
    dirty_budget(
        LIVE_BYTES.load(Ordering::Relaxed),
        PEAK_LIVE_BYTES.load(Ordering::Relaxed),
        leaving,
    )
}

fn dirty_budget(live: u64, peak: u64, leaving: usize) -> usize {
    let bound = peak.saturating_add(peak / DIRTY_OVER_PEAK_DIVISOR);
    DIRTY_BUDGET_BYTES.max(bound.saturating_sub(live.saturating_sub(leaving as u64)) as usize)
}

/// Cached dirty extents not reused for this long (in ticks, `ticks_at`: 250 ms) are returned to the
/// kernel: a program that finished a phase does not keep its peak footprint forever, nor carry
/// it into the next phase's peak (bench/alloc `sqlite`: with 2 s, the buffers of its index builds
/// were still cached when its later phases peaked, 404 MiB against mimalloc's 383).
const DIRTY_IDLE_TICKS: u64 = 2;
/// Ticks (`ticks_at`) per second.
const TICKS_PER_SECOND: u64 = 8;
/// Larger frees are always returned to the kernel at once. 32 MiB, glibc's largest dynamic mmap
/// threshold on 64-bit: a program that frees and grows buffers of several MiB again and again
/// (vectors, read buffers) reuses their pages instead of faulting them in each time
/// (bench/alloc `realloc-growth`: 146 k page faults with 4 MiB, 6 k with 32 MiB; mimalloc 8 k).
/// The budget above still bounds the cache by the process's own high-water mark.
const DIRTY_MAX_EXTENT_BYTES: usize = 32 << 20;

static GRANULE_OWNER: [AtomicU16; GRANULES] = [const { AtomicU16::new(0) }; GRANULES];

/// Bytes currently handed out to tracked objects, for statistics.
pub static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);
/// The most `LIVE_BYTES` has been.
static PEAK_LIVE_BYTES: AtomicU64 = AtomicU64::new(0);
/// Cached dirty bytes of all shards (each shard's own count is its `dirty_bytes`).
static DIRTY_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Coarse monotonic tick of the last idle purge.
static LAST_PURGE_TICK: AtomicU64 = AtomicU64::new(0);

/// Counts `bytes` more handed out, keeping the high-water mark.
fn add_live_bytes(bytes: usize) {
    let live = LIVE_BYTES.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
    // A read first: the mark is rarely beaten, and a read does not take the line exclusively.
    if live > PEAK_LIVE_BYTES.load(Ordering::Relaxed) {
        PEAK_LIVE_BYTES.fetch_max(live, Ordering::Relaxed);
    }
}

/// The tick of `now_ns`, a time read from `report::now_ns` (CLOCK_MONOTONIC_COARSE, a vDSO
/// read, no syscall): coarse monotonic time in eighths of a second. The allocator's entry points
/// take the time their caller read for its report, so an allocation or a free reads the clock
/// once.
fn ticks_at(now_ns: u64) -> u64 {
    now_ns / (1_000_000_000 / TICKS_PER_SECOND)
}

/// Dirty extents taken out of the cache to be given back to the kernel together
/// (`State::give_back`): their pages, and `(chunk, first page, pages)` of each.
struct Evicted {
    discards: discard::Batch,
    extents: [(u32, u32, u32); discard::BATCH],
}

impl Evicted {
    fn new() -> Self {
        Self {
            discards: discard::Batch::new(),
            extents: [(0, 0, 0); discard::BATCH],
        }
    }
}

struct Chunk {
    base: usize,
    pages: usize,
    /// Boundary tags, one u32 per page of the chunk, in a mapping of their own.
    tags: *mut u32,
    /// Allocation site, allocation event (`alloc`'s `on_alloc`) and what the caller keeps with
    /// the object starting at each page, `SIDE_WORDS` u64 a page (only head pages are
    /// meaningful), in a mapping of its own; touched only for pages where objects start.
    sites: *mut u64,
    /// Pages `[bump, pages)` have never been handed out.
    bump: usize,
    /// The placement it belongs to.
    placement: u32,
}

impl Chunk {
    fn tag(&self, page: usize) -> u32 {
        debug_assert!(page < self.pages);
        // SAFETY: `tags` maps `pages` u32 entries and `page < pages`.
        unsafe { *self.tags.add(page) }
    }

    fn set_tag(&mut self, page: usize, value: u32) {
        debug_assert!(page < self.pages);
        // SAFETY: as in `tag`; we hold the state lock, so no one else writes.
        unsafe { *self.tags.add(page) = value }
    }

    /// Writes head (and tail) tags for the extent `[start, start + pages)`; `flags` is
    /// `TAG_ALLOCATED`, `TAG_DIRTY` or 0 (clean free).
    fn mark(&mut self, start: usize, pages: usize, flags: u32) {
        debug_assert!((1..=MAX_EXTENT_PAGES).contains(&pages) && start + pages <= self.pages);
        let value = ((pages as u32) << TAG_PAGES_SHIFT) | flags;
        self.set_tag(start, value);
        if pages > 1 {
            self.set_tag(start + pages - 1, value | TAG_TAIL);
        }
    }

    /// The extents from page `from` (which must be an extent head) up to the bump, as
    /// (first page, pages, tag); stops early at a corrupted tag rather than loop forever.
    fn extents(&self, from: usize) -> impl Iterator<Item = (usize, usize, u32)> + '_ {
        let mut page = from;
        core::iter::from_fn(move || {
            if page >= self.bump {
                return None;
            }
            let tag = self.tag(page);
            let pages = (tag >> TAG_PAGES_SHIFT) as usize;
            if pages == 0 {
                return None;
            }
            let here = page;
            page += pages;
            Some((here, pages, tag))
        })
    }

    /// The live object whose extent starts at `page`.
    fn object(&self, page: usize, pages: usize) -> Extent {
        Extent {
            addr: self.base + page * PAGE_SIZE,
            len: pages * PAGE_SIZE,
        }
    }

    fn site(&self, page: usize) -> u64 {
        self.side(page, SIDE_SITE)
    }

    fn set_site(&mut self, page: usize, site: u64) {
        self.set_side(page, SIDE_SITE, site)
    }

    /// What `on_alloc` returned for the object starting at `page` (0 when it is known to the
    /// daemon some other way: moved, grown, or re-announced since).
    fn event(&self, page: usize) -> u64 {
        self.side(page, SIDE_EVENT)
    }

    /// (`&self`: the side table is not the chunk's; a walk over the extents clears entries as
    /// it goes. Callers hold the state lock, as for every other write.)
    fn set_event(&self, page: usize, event: u64) {
        self.set_side(page, SIDE_EVENT, event)
    }

    /// What the caller keeps with the object starting at `page` (`alloc`'s `kept`).
    fn kept(&self, page: usize) -> u64 {
        self.side(page, SIDE_KEPT)
    }

    fn side(&self, page: usize, word: usize) -> u64 {
        debug_assert!(page < self.pages && word < SIDE_WORDS);
        // SAFETY: `sites` maps `SIDE_WORDS * pages` u64 entries; callers hold the state lock.
        unsafe { *self.sites.add(SIDE_WORDS * page + word) }
    }

    fn set_side(&self, page: usize, word: usize, value: u64) {
        debug_assert!(page < self.pages && word < SIDE_WORDS);
        // SAFETY: as in `side`.
        unsafe { *self.sites.add(SIDE_WORDS * page + word) = value }
    }
}

/// The side table's words per page: the object's site, its allocation event, and what the
/// caller keeps with it.
const SIDE_WORDS: usize = 3;
const SIDE_SITE: usize = 0;
const SIDE_EVENT: usize = 1;
const SIDE_KEPT: usize = 2;

/// In what a caller keeps with an object (`alloc`'s `kept`): the object's pages from the
/// number in the low 32 bits on are bound to other nodes than its chunk's (a placement's
/// budget spilled them one tier down). Its free drops them and binds them back, rather than
/// keep them for reuse where the chunk's next object would inherit them.
pub const KEPT_REBOUND: u64 = 1 << 63;

/// What `free` tells `on_free` of the object it frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freed {
    /// What `alloc`'s `on_alloc` returned for it (0 if it has moved, grown or been
    /// re-announced since).
    pub event: u64,
    pub site: u64,
    /// What `alloc` was given to keep with it.
    pub kept: u64,
}

/// A set of NUMA nodes chunks are bound to (0 for the default placement), and the chunk of that
/// placement with never-used pages at its end, where new extents are cut when nothing fits.
struct Placement {
    nodes: u64,
    current: Option<usize>,
}

struct State {
    /// Which of the `SHARDS` this is.
    id: usize,
    chunks: Vec<Chunk>,
    /// Clean free extents.
    free: FreeIndex,
    /// Dirty free extents.
    dirty: FreeIndex,
    dirty_bytes: usize,
    /// Dirty extents of a few pages kept out of the index for reuse by size.
    quick: Quick,
    /// Index 0 is the default placement (created on first use).
    placements: Vec<Placement>,
}

// SAFETY: the raw tag pointers are only dereferenced under the state lock.
unsafe impl Send for State {}

/// Whether some thread is inside the large-object allocator. Code that mimalloc may call back
/// (its heartbeat) must not take an allocator lock when this is true: the caller may be the
/// thread that holds one, allocating metadata.
pub fn busy() -> bool {
    SHARDS.iter().any(FutexMutex::is_locked)
}

const fn shard(id: usize) -> FutexMutex<State> {
    FutexMutex::new(State {
        id,
        chunks: Vec::new(),
        free: FreeIndex::new(),
        dirty: FreeIndex::new(),
        dirty_bytes: 0,
        quick: Quick::new(),
        placements: Vec::new(),
    })
}

static SHARDS: [FutexMutex<State>; SHARD_COUNT] = [
    shard(0),
    shard(1),
    shard(2),
    shard(3),
    shard(4),
    shard(5),
    shard(6),
    shard(7),
];

/// The next shard to give a thread that found its own held (1, 2, ..., SHARD_COUNT - 1, 1, ...).
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    /// This thread's shard: 0 until it finds shard 0's lock held.
    static THREAD_SHARD: Cell<u8> = const { Cell::new(0) };
}

/// The shard this thread allocates from; shard 0 while the thread's TLS is being torn down.
#[inline]
fn thread_shard() -> usize {
    THREAD_SHARD.try_with(Cell::get).unwrap_or(0) as usize
}

/// Locks this thread's shard for an allocation. Every thread starts on shard 0 and is given a
/// shard of its own (round robin over the others) the first time it finds that lock held. A
/// shard costs a chunk, its side tables and the partly used pages at its end, a few MiB of
/// resident memory where huge pages are on (`always`), and all of it where first touch puts it:
/// in the fast tier. So threads that allocate together get shards of their own at once, and the
/// helper threads of a runtime that allocate now and then share shard 0.
fn lock_for_alloc() -> crate::lock::Guard<'static, State> {
    let shard = thread_shard();
    if let Some(state) = SHARDS[shard].try_lock() {
        return state;
    }
    if shard == 0 {
        let next = 1 + NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % (SHARD_COUNT - 1);
        if THREAD_SHARD.try_with(|cell| cell.set(next as u8)).is_ok() {
            return SHARDS[next].lock();
        }
    }
    SHARDS[shard].lock()
}

/// An allocated extent, as reported to callers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub addr: usize,
    pub len: usize,
}

/// Whether newly allocated memory is known to read as zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contents {
    Zeroed,
    Dirty,
}

#[inline]
fn pages_for(bytes: usize) -> Option<usize> {
    let pages = bytes.checked_add(PAGE_SIZE - 1)? / PAGE_SIZE;
    (pages <= MAX_EXTENT_PAGES).then_some(pages.max(1))
}

/// Where in the free run `[start, end)` of a chunk whose first page is `base_page` an object of
/// `pages` pages aligned to `align_pages` starts: on a huge page boundary if it is a whole number
/// of huge pages and the run has room for that, else at the first `align_pages` boundary (the
/// caller has checked that it fits there, or checks it). Linux does the same for anonymous
/// mappings whose length is a multiple of the PMD size (6.7, narrowed to such lengths in 6.12).
///
/// An object on huge pages of its own is seen and moved as itself. The daemon's access sampling
/// reads a huge page's accessed bit, set by any write to its 2 MiB, so an object that shares a
/// huge page with a busy neighbour looks busy too: in the VM's warm-start scenario a cold 4 MiB
/// object began 12 KiB into a huge page whose first 12 KiB held buffers the program rewrote
/// every 500 ms, and a proactive placement of its site could be disproved by them. Moving such
/// an object also splits the shared huge pages at its edges. Runs that are reused (dirty
/// extents) and objects of other sizes keep the first fit: a gap before an aligned object is
/// free memory the next smaller objects are carved from.
#[inline]
fn start_in(base_page: usize, start: usize, end: usize, pages: usize, align_pages: usize) -> usize {
    if pages.is_multiple_of(HUGE_PAGE_PAGES) && align_pages < HUGE_PAGE_PAGES {
        let huge = (base_page + start).next_multiple_of(HUGE_PAGE_PAGES) - base_page;
        if huge + pages <= end {
            return huge;
        }
    }
    (base_page + start).next_multiple_of(align_pages) - base_page
}

/// Whether an object of `size` bytes aligned to `align` fits an ordinary chunk: when `alloc`
/// refuses one that does, no chunk could be mapped (an address-space limit), and the object may
/// go elsewhere; a larger one gets a chunk of its own, whose refusal is the program's ENOMEM.
pub fn fits_a_chunk(size: usize, align: usize) -> bool {
    pages_for(size)
        .is_some_and(|pages| pages + (align / PAGE_SIZE).max(1) - 1 <= CHUNK_BYTES / PAGE_SIZE)
}

/// Which shard and chunk (if any) own `ptr`, without taking a lock.
#[inline]
fn owner(ptr: usize) -> Option<(usize, usize)> {
    let granule = ptr >> CHUNK_SHIFT;
    if granule >= GRANULES {
        return None;
    }
    match GRANULE_OWNER[granule].load(Ordering::Acquire) {
        0 => None,
        code => {
            let code = code as usize - 1;
            Some((code & (SHARD_COUNT - 1), code >> SHARD_BITS))
        }
    }
}

/// True if `ptr` lies in memory this module manages.
#[inline]
pub fn contains(ptr: *const u8) -> bool {
    owner(ptr as usize).is_some()
}

/// Allocates `size` bytes on pages of their own, aligned to `align` (a power of two), from a
/// chunk bound to the NUMA nodes in the mask `nodes` (0: no policy), for allocation site `site`.
/// The memory comes from this thread's shard. `on_alloc` runs under the shard's lock with the
/// new extent, so that reports of frees and reuses of the same address (always made under the
/// lock of the shard that owns it) reach the daemon in the order they happened. What it returns
/// (the report's place in the ring, 0 for none) is kept with the object and given to `free`'s
/// `on_free`, and so is `kept` (see [`KEPT_REBOUND`]). `now_ns` is the caller's read of
/// `report::now_ns` (see `ticks_at`).
pub fn alloc(
    size: usize,
    align: usize,
    nodes: u64,
    site: u64,
    kept: u64,
    now_ns: u64,
    on_alloc: impl FnOnce(Extent) -> u64,
) -> Option<(*mut u8, Contents)> {
    let pages = pages_for(size)?;
    let align_pages = (align / PAGE_SIZE).max(1);
    let mut state = lock_for_alloc();
    let placement = state.placement_for(nodes);
    let (chunk, start, contents) = state.take(placement, pages, align_pages, ticks_at(now_ns))?;
    state.chunks[chunk].set_site(start, site);
    state.chunks[chunk].set_side(start, SIDE_KEPT, kept);
    state.after_change();
    let addr = state.chunks[chunk].base + start * PAGE_SIZE;
    let len = pages * PAGE_SIZE;
    let event = on_alloc(Extent { addr, len });
    state.chunks[chunk].set_event(start, event);
    drop(state);
    add_live_bytes(len);
    Some((addr as *mut u8, contents))
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

/// The extent of the allocated object starting at `ptr`, or None if `ptr` is not the start of a
/// live object here (a foreign pointer, an interior pointer or a double free).
pub fn extent_of(ptr: *const u8) -> Option<Extent> {
    let addr = ptr as usize;
    let (shard, chunk) = owner(addr)?;
    let state = SHARDS[shard].lock();
    state.allocated_extent(chunk, addr)
}

/// The allocation site of the live object starting at `ptr`; 0 if unknown or not an object here.
pub fn site_of(ptr: *const u8) -> u64 {
    let addr = ptr as usize;
    let Some((shard, chunk)) = owner(addr) else {
        return 0;
    };
    let state = SHARDS[shard].lock();
    match state.allocated_extent(chunk, addr) {
        Some(_) => {
            let c = &state.chunks[chunk];
            c.site((addr - c.base) / PAGE_SIZE)
        }
        None => 0,
    }
}

/// Frees the object starting at `ptr`. Returns its extent, or None for a pointer that is not a
/// live object here (ignored: a double or invalid free must not corrupt other objects).
/// `on_free` runs under the lock of the shard that owns it, before the memory can be reused,
/// with what it keeps of the object ([`Freed`]). `now_ns` is the caller's read of
/// `report::now_ns`, which it needs for the free's report anyway: it dates the extent in the
/// cache (a clock read less per free).
pub fn free(ptr: *mut u8, now_ns: u64, on_free: impl FnOnce(Extent, Freed)) -> Option<Extent> {
    let addr = ptr as usize;
    let (shard, chunk) = owner(addr)?;
    let now = ticks_at(now_ns);
    let mut state = SHARDS[shard].lock();
    let extent = state.allocated_extent(chunk, addr)?;
    let start_page = (addr - state.chunks[chunk].base) / PAGE_SIZE;
    let freed = |c: &Chunk| Freed {
        event: c.event(start_page),
        site: c.site(start_page),
        kept: c.kept(start_page),
    };
    let rebound = state.chunks[chunk].kept(start_page) & KEPT_REBOUND != 0;
    let chunk_nodes = state.placements[state.chunks[chunk].placement as usize].nodes;
    if extent.len <= DIRTY_MAX_EXTENT_BYTES && !rebound {
        // Keep it resident for the next allocation of its size, making room in the cache by
        // returning the largest cached extents to the kernel: the cache follows what the
        // program frees now instead of filling once and refusing everything after. This
        // shard's own cache first; what it cannot give, the other shards' below.
        let budget = dirty_budget_bytes(extent.len);
        let mut excess = (DIRTY_BYTES.load(Ordering::Relaxed) + extent.len).saturating_sub(budget);
        if excess > 0 {
            let here = excess.min(state.dirty_bytes);
            if here > 0 {
                state.evict_dirty(here);
            }
            excess -= here;
        }
        on_free(extent, freed(&state.chunks[chunk]));
        state.cache_dirty(chunk, start_page, extent.len / PAGE_SIZE, now);
        let purge = purge_due(now);
        if purge {
            state.purge_idle(now);
        }
        state.after_change();
        drop(state);
        LIVE_BYTES.fetch_sub(extent.len as u64, Ordering::Relaxed);
        if excess > 0 || purge {
            other_shards(shard, excess, now, purge);
        }
        return Some(extent);
    }
    let kept = state.chunks[chunk].kept(start_page);
    drop(state);
    // Drop the pages before the extent becomes reusable: once it is marked free another thread
    // may take it, and must find zeroed, non-resident memory.
    // SAFETY: the extent belongs to the object being freed; nobody else may use it until it is
    // marked free below.
    unsafe { crate::os::madvise(addr as *mut libc::c_void, extent.len, libc::MADV_DONTNEED) };
    if rebound {
        // Its tail was bound one tier down: bound back to the chunk's nodes, for the next object.
        let head = (kept & 0xffff_ffff) as usize * PAGE_SIZE;
        if head < extent.len {
            bind_preferred(addr + head, extent.len - head, chunk_nodes);
        }
    }
    let mut state = SHARDS[shard].lock();
    // Re-check: a racing double free may have released it meanwhile.
    if state.allocated_extent(chunk, addr) != Some(extent) {
        return None;
    }
    on_free(extent, freed(&state.chunks[chunk]));
    state.release(chunk, start_page, extent.len / PAGE_SIZE);
    state.after_change();
    drop(state);
    LIVE_BYTES.fetch_sub(extent.len as u64, Ordering::Relaxed);
    Some(extent)
}

/// Whether the idle purge is due at tick `now`: true for one caller per tick.
fn purge_due(now: u64) -> bool {
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
fn other_shards(except: usize, mut excess: usize, now: u64, purge: bool) {
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

/// Calls `f` for every live object and its allocation site, then `then`, all under one hold of
/// the allocator lock: a snapshot that no concurrent allocation or free can slip past (used to
/// re-announce live objects when attaching to a daemon, before publishing the new ring, and
/// when the daemon asks for a resync).
pub fn for_each_live(mut f: impl FnMut(Extent, u64), then: impl FnOnce()) {
    // Every shard's lock, always in this order (no other path holds two).
    let states: [_; SHARD_COUNT] = core::array::from_fn(|id| SHARDS[id].lock());
    for state in &states {
        for chunk in &state.chunks {
            for (page, pages, tag) in chunk.extents(0) {
                if is_live(tag) {
                    f(chunk.object(page, pages), chunk.site(page));
                    // Its allocation report was made in a ring no longer in use, if any.
                    chunk.set_event(page, 0);
                }
            }
        }
    }
    then();
}

/// Grows the live object at `ptr` to at least `size` bytes in place, taking the pages right
/// after it if they are free (cached dirty, clean, or never used at the end of the chunk).
/// `on_change(before, after)` runs under the lock, so the daemon hears of the resize in order.
/// False (and nothing changed) when the pages are not free or `ptr` is not a live object.
/// `now_ns` is the caller's read of `report::now_ns` (see `ticks_at`).
pub fn grow_in_place(
    ptr: *mut u8,
    size: usize,
    now_ns: u64,
    on_change: impl FnOnce(Extent, Extent),
) -> bool {
    let Some(wanted) = pages_for(size) else {
        return false;
    };
    let addr = ptr as usize;
    let Some((shard, chunk)) = owner(addr) else {
        return false;
    };
    let mut state = SHARDS[shard].lock();
    let Some(before) = state.allocated_extent(chunk, addr) else {
        return false;
    };
    let start = (addr - state.chunks[chunk].base) / PAGE_SIZE;
    let pages = before.len / PAGE_SIZE;
    if wanted <= pages || wanted > MAX_EXTENT_PAGES {
        return false;
    }
    let extra = wanted - pages;
    let end = start + pages;
    let c = &state.chunks[chunk];
    // What follows: the never-used tail of the chunk (only the current chunk has one), or a
    // free extent (pages, dirty) to take the first `extra` pages of.
    let neighbour = if end == c.bump {
        if end + extra > c.pages {
            return false;
        }
        None
    } else {
        let tag = c.tag(end);
        let free_pages = (tag >> TAG_PAGES_SHIFT) as usize;
        if is_live(tag) || free_pages < extra {
            return false;
        }
        if tag & TAG_QUICK == TAG_QUICK {
            // Out of its quick list, it is a dirty extent like any other (below).
            if !state.quick.remove(free_pages, chunk, end) {
                return false;
            }
            state.dirty.insert(free_key(chunk, end, free_pages));
            state.chunks[chunk].mark(end, free_pages, TAG_DIRTY);
        }
        Some((free_pages, tag & TAG_DIRTY != 0))
    };
    match neighbour {
        None => state.chunks[chunk].bump = end + extra,
        Some((free_pages, dirty)) => {
            let key = free_key(chunk, end, free_pages);
            if dirty {
                state.dirty.remove(key);
                state.sub_dirty_bytes(free_pages * PAGE_SIZE);
            } else {
                state.free.remove(key);
            }
        }
    }
    // Tag the grown object before inserting what is left of the neighbour: the insertion
    // looks at the tag just before it to merge.
    state.chunks[chunk].mark(start, wanted, TAG_ALLOCATED);
    if let Some((free_pages, dirty)) = neighbour {
        let rest = free_pages - extra;
        if rest > 0 && dirty {
            state.insert_dirty(chunk, end + extra, rest, ticks_at(now_ns));
        } else if rest > 0 {
            state.insert_free(chunk, end + extra, rest);
        }
    }
    let after = Extent {
        addr,
        len: wanted * PAGE_SIZE,
    };
    add_live_bytes(extra * PAGE_SIZE);
    // The daemon hears of the object as grown now: its allocation's report stays.
    state.chunks[chunk].set_event(start, 0);
    on_change(before, after);
    state.after_change();
    true
}

/// Where a resync walk stands: (chunk index, page within the chunk), where the chunk index
/// counts the chunks of shard 0, then of shard 1, and so on (`CHUNKS_PER_SHARD` to a shard).
pub type Cursor = (usize, usize);

/// One bounded step of a resync walk over the live objects: under one hold of the lock of the
/// shard that owns the chunk, calls `begin(lo)`, then `f` for at most `max_objects` live objects (with their sites)
/// starting at `cursor`, then `end(hi)`, where `[lo, hi)` is the address range the step covered
/// completely (it never crosses chunks). Returns the cursor of the next step, or None (without
/// calling anything) when the walk is past the last chunk.
pub fn snapshot_step(
    cursor: Cursor,
    max_objects: usize,
    begin: impl FnOnce(usize),
    mut f: impl FnMut(Extent, u64),
    end: impl FnOnce(usize),
) -> Option<Cursor> {
    let (mut index, mut resume) = cursor;
    let (state, chunk) = loop {
        let shard = index / CHUNKS_PER_SHARD;
        let state = SHARDS.get(shard)?.lock();
        if index % CHUNKS_PER_SHARD < state.chunks.len() {
            break (state, index % CHUNKS_PER_SHARD);
        }
        // Past this shard's last chunk: on to the next shard's first.
        (index, resume) = ((shard + 1) * CHUNKS_PER_SHARD, 0);
    };
    let chunk = &state.chunks[chunk];
    // Frees since the last step may have merged the extent that started at `resume` into an
    // earlier one, leaving a stale tag there: only a walk from the chunk's start is sure to land
    // on extent heads. Skipping by extents is cheap next to reporting.
    let first = chunk
        .extents(0)
        .find(|&(page, _, _)| page >= resume)
        .map_or(chunk.bump, |(page, _, _)| page);
    begin(chunk.base + resume * PAGE_SIZE);
    let mut reported = 0;
    let mut next = chunk.bump;
    for (page, pages, tag) in chunk.extents(first) {
        if reported == max_objects {
            next = page;
            break;
        }
        if is_live(tag) {
            f(chunk.object(page, pages), chunk.site(page));
            // Re-announced: the object's allocation report must not be taken back any more
            // (its free would go unsaid, and the re-announcement keep it alive).
            chunk.set_event(page, 0);
            reported += 1;
        }
    }
    if next >= chunk.bump {
        end(chunk.base + chunk.pages * PAGE_SIZE);
        Some((index + 1, 0))
    } else {
        end(chunk.base + next * PAGE_SIZE);
        Some((index, next))
    }
}

/// Returns every cached dirty extent's pages to the kernel (`malloc_trim`). True if there were
/// any. Holds each shard's lock while it empties that shard's cache, like an explicit trim in
/// glibc.
pub fn trim() -> bool {
    let mut released = false;
    for shard in &SHARDS {
        let mut state = shard.lock();
        state.flush_quick();
        released |= !state.dirty.is_empty();
        // All of it, whatever the count says: `evict_dirty` stops only when the index is empty.
        state.evict_dirty(usize::MAX);
        state.after_change();
    }
    released
}

/// Bytes of freed extents kept resident for reuse (for `mallinfo`).
pub fn cached_bytes() -> usize {
    DIRTY_BYTES.load(Ordering::Relaxed)
}

/// `pthread_atfork` support: hold every shard's lock across `fork()` (in `for_each_live`'s
/// order).
pub fn before_fork() {
    for shard in &SHARDS {
        shard.lock_raw();
    }
}

/// # Safety
/// Must pair with `before_fork` in the same thread.
pub unsafe fn after_fork_parent() {
    for shard in &SHARDS {
        // SAFETY: forwarded: `before_fork` took every one.
        unsafe { shard.unlock_raw() };
    }
}

/// # Safety
/// Only in the child after `fork()`, which is single-threaded.
pub unsafe fn after_fork_child() {
    for shard in &SHARDS {
        // SAFETY: forwarded.
        unsafe { shard.force_unlock() };
    }
}

#[cfg(feature = "invariants")]
static CHANGES: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

impl State {
    /// Called under the lock after every allocation and free: with the `invariants` feature,
    /// checks the whole state every 64th time.
    #[inline]
    fn after_change(&self) {
        #[cfg(feature = "invariants")]
        if CHANGES.fetch_add(1, Ordering::Relaxed).is_multiple_of(64) {
            if let Err(why) = self.check() {
                crate::write_stderr(format_args!("objtier: allocator invariant broken: {why}"));
                // SAFETY: abort has no preconditions; a broken allocator must not go on.
                unsafe { libc::abort() };
            }
        }
    }

    /// Verifies the allocator's invariants; the first violation, described.
    #[cfg(any(test, feature = "invariants"))]
    fn check(&self) -> Result<(), alloc::string::String> {
        use alloc::format;
        let mut dirty_bytes = 0;
        let (mut free_seen, mut dirty_seen, mut quick_seen) = (0, 0, 0);
        for (index, c) in self.chunks.iter().enumerate() {
            let mut page = 0;
            let mut previous_clean_free = false;
            while page < c.bump {
                let tag = c.tag(page);
                let pages = (tag >> TAG_PAGES_SHIFT) as usize;
                if pages == 0 || page + pages > c.bump || tag & TAG_TAIL != 0 {
                    return Err(format!(
                        "chunk {index} page {page}: tag {tag:#x} is not an extent head within bump {}",
                        c.bump
                    ));
                }
                if pages > 1 && c.tag(page + pages - 1) != tag | TAG_TAIL {
                    return Err(format!(
                        "chunk {index} page {page}: tail tag {:#x} does not match head {tag:#x}",
                        c.tag(page + pages - 1)
                    ));
                }
                let key = free_key(index, page, pages);
                let clean_free = tag & (TAG_ALLOCATED | TAG_DIRTY) == 0;
                if tag & TAG_QUICK == TAG_QUICK {
                    dirty_bytes += pages * PAGE_SIZE;
                    quick_seen += 1;
                    if !self.quick.contains(index, page, pages) {
                        return Err(format!("quick extent {key:?} missing from the quick lists"));
                    }
                } else if tag & TAG_ALLOCATED == 0 {
                    if tag & TAG_DIRTY != 0 {
                        dirty_bytes += pages * PAGE_SIZE;
                        dirty_seen += 1;
                        if !self.dirty.contains(key) {
                            return Err(format!("dirty extent {key:?} missing from the dirty set"));
                        }
                    } else {
                        free_seen += 1;
                        if !self.free.contains(key) {
                            return Err(format!("free extent {key:?} missing from the free set"));
                        }
                        if previous_clean_free {
                            return Err(format!(
                                "clean free extent {key:?} follows another unmerged"
                            ));
                        }
                    }
                }
                previous_clean_free = clean_free;
                page += pages;
            }
        }
        if quick_seen != self.quick.count() {
            return Err(format!(
                "quick lists hold {} extents, the tags {quick_seen}",
                self.quick.count()
            ));
        }
        if free_seen != self.free.len() || dirty_seen != self.dirty.len() {
            return Err(format!(
                "sets hold {} free and {} dirty extents, the tags {free_seen} and {dirty_seen}",
                self.free.len(),
                self.dirty.len()
            ));
        }
        // Every extent is in its set; now every member of a set, reached as lookups reach it
        // (through the indexes' summaries), must be an extent of that kind: then lookups see
        // exactly the free extents.
        for (name, set, flags) in [("free", &self.free, 0), ("dirty", &self.dirty, TAG_DIRTY)] {
            let mut stray = None;
            set.for_each(|key| {
                let head = (key.pages << TAG_PAGES_SHIFT) | flags;
                let is_extent = self.chunks.get(key.chunk as usize).is_some_and(|c| {
                    (key.start as usize) < c.bump && c.tag(key.start as usize) == head
                });
                if !is_extent && stray.is_none() {
                    stray = Some(key);
                }
            })
            .map_err(|why| format!("{name} set: {why}"))?;
            if let Some(key) = stray {
                return Err(format!(
                    "{name} set holds {key:?}, not a {name} extent by the tags"
                ));
            }
        }
        if dirty_bytes != self.dirty_bytes {
            return Err(format!(
                "dirty_bytes says {}, the tags {dirty_bytes}",
                self.dirty_bytes
            ));
        }
        Ok(())
    }

    /// Counts `bytes` more cached dirty memory, in this shard and process-wide.
    fn add_dirty_bytes(&mut self, bytes: usize) {
        self.dirty_bytes += bytes;
        DIRTY_BYTES.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts `bytes` (at most what this shard has) less cached dirty memory.
    fn sub_dirty_bytes(&mut self, bytes: usize) {
        let bytes = bytes.min(self.dirty_bytes);
        self.dirty_bytes -= bytes;
        DIRTY_BYTES.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// The placement for chunks bound to `nodes`, created on first use; the default placement
    /// when `nodes` is 0 or too many placements exist already.
    fn placement_for(&mut self, nodes: u64) -> u32 {
        if self.placements.is_empty() {
            self.placements.push(Placement {
                nodes: 0,
                current: None,
            });
        }
        if let Some(i) = self.placements.iter().position(|p| p.nodes == nodes) {
            return i as u32;
        }
        if self.placements.len() >= MAX_PLACEMENTS {
            return DEFAULT_PLACEMENT;
        }
        self.placements.push(Placement {
            nodes,
            current: None,
        });
        (self.placements.len() - 1) as u32
    }

    fn allocated_extent(&self, chunk: usize, addr: usize) -> Option<Extent> {
        let c = self.chunks.get(chunk)?;
        if !addr.is_multiple_of(PAGE_SIZE) || addr < c.base {
            return None;
        }
        let page = (addr - c.base) / PAGE_SIZE;
        if page >= c.bump {
            return None;
        }
        let tag = c.tag(page);
        if !is_live(tag) || tag & TAG_TAIL != 0 {
            return None;
        }
        Some(Extent {
            addr,
            len: (tag >> TAG_PAGES_SHIFT) as usize * PAGE_SIZE,
        })
    }

    /// Finds `pages` pages aligned to `align_pages`, marks them allocated, and returns
    /// (chunk, start, contents): a dirty extent of a fitting size first, then a clean one, then
    /// never-used pages.
    fn take(
        &mut self,
        placement: u32,
        pages: usize,
        align_pages: usize,
        now: u64,
    ) -> Option<(usize, usize, Contents)> {
        if placement == DEFAULT_PLACEMENT && align_pages == 1 {
            if let Some((chunk, start)) = self.quick.pop(pages) {
                self.sub_dirty_bytes(pages * PAGE_SIZE);
                self.chunks[chunk].mark(start, pages, TAG_ALLOCATED);
                return Some((chunk, start, Contents::Dirty));
            }
        }
        if let Some((chunk, start)) = self.take_dirty(placement, pages, align_pages, now) {
            return Some((chunk, start, Contents::Dirty));
        }
        if let Some((chunk, start)) = self.take_free(placement, pages, align_pages) {
            return Some((chunk, start, Contents::Zeroed));
        }
        if let Some((chunk, start)) = self.take_bump(placement, pages, align_pages) {
            return Some((chunk, start, Contents::Zeroed));
        }
        self.new_chunk(placement, pages + align_pages - 1, now)?;
        let (chunk, start) = self.take_bump(placement, pages, align_pages)?;
        Some((chunk, start, Contents::Zeroed))
    }

    /// Reuses the smallest dirty extent of `placement` that fits; the rest stays dirty, cached
    /// anew at tick `now`.
    fn take_dirty(
        &mut self,
        placement: u32,
        pages: usize,
        align_pages: usize,
        now: u64,
    ) -> Option<(usize, usize)> {
        if align_pages > 1 {
            return None;
        }
        let key = self.dirty.fitting(placement, pages)?;
        self.dirty.remove(key);
        let (chunk, start, dirty_pages) =
            (key.chunk as usize, key.start as usize, key.pages as usize);
        self.sub_dirty_bytes(dirty_pages * PAGE_SIZE);
        self.chunks[chunk].mark(start, pages, TAG_ALLOCATED);
        if dirty_pages > pages {
            self.insert_dirty(chunk, start + pages, dirty_pages - pages, now);
        }
        Some((chunk, start))
    }

    /// Caches a freed extent: in its size's quick list if it has one with room, else in the
    /// dirty index (`insert_dirty`). `cached` is when, in coarse ticks.
    fn cache_dirty(&mut self, chunk: usize, start: usize, pages: usize, cached: u64) {
        if self.chunks[chunk].placement != DEFAULT_PLACEMENT || !self.quick.has_room(pages) {
            self.insert_dirty(chunk, start, pages, cached);
            return;
        }
        self.add_dirty_bytes(pages * PAGE_SIZE);
        let c = &mut self.chunks[chunk];
        c.mark(start, pages, TAG_QUICK);
        c.set_site(start, cached);
        self.quick.push(pages, chunk, start);
    }

    /// Moves every quick-listed extent into the dirty index, where it merges with its dirty
    /// neighbours and can be evicted or purged.
    fn flush_quick(&mut self) {
        // One at a time, in place: the lists are too large to copy onto an allocating thread's
        // stack, which may be small.
        for pages in 1..=QUICK_MAX_PAGES {
            while let Some((chunk, start)) = self.quick.pop(pages) {
                self.quick_to_index(chunk, start, pages);
            }
        }
    }

    /// Puts an extent taken out of a quick list into the dirty index, with its cache time.
    fn quick_to_index(&mut self, chunk: usize, start: usize, pages: usize) {
        let cached = self.chunks[chunk].site(start);
        // `insert_dirty` counts the bytes again.
        self.sub_dirty_bytes(pages * PAGE_SIZE);
        self.insert_dirty(chunk, start, pages, cached);
    }

    /// Adds a dirty free extent, merged with dirty free neighbours (as clean ones are merged
    /// with clean ones): without merging, reuse by best fit splits the cache into ever smaller
    /// pieces that larger requests miss. `cached` is when it was cached, in coarse ticks.
    fn insert_dirty(&mut self, chunk: usize, mut start: usize, mut pages: usize, cached: u64) {
        self.add_dirty_bytes(pages * PAGE_SIZE);
        // Its own tags first, as `release` does: merged into the extent before it, its head
        // page becomes an interior page whose tag nothing rewrites, and a stale "allocated"
        // tag there would let a second free of the same pointer through.
        self.chunks[chunk].mark(start, pages, TAG_DIRTY);
        let c = &self.chunks[chunk];
        if start > 0 {
            let before = c.tag(start - 1);
            if before & (TAG_ALLOCATED | TAG_DIRTY) == TAG_DIRTY {
                let before_pages = (before >> TAG_PAGES_SHIFT) as usize;
                self.dirty
                    .remove(free_key(chunk, start - before_pages, before_pages));
                start -= before_pages;
                pages += before_pages;
            }
        }
        let c = &self.chunks[chunk];
        let end = start + pages;
        if end < c.bump {
            let after = c.tag(end);
            if after & (TAG_ALLOCATED | TAG_DIRTY) == TAG_DIRTY {
                let after_pages = (after >> TAG_PAGES_SHIFT) as usize;
                self.dirty.remove(free_key(chunk, end, after_pages));
                pages += after_pages;
            }
        }
        self.chunks[chunk].mark(start, pages, TAG_DIRTY);
        // A free extent has no site: its slot in the side table holds when it was cached.
        self.chunks[chunk].set_site(start, cached);
        self.dirty.insert(free_key(chunk, start, pages));
    }

    /// Returns cached dirty extents idle for `DIRTY_IDLE_TICKS` to the kernel (a scan of the
    /// dirty set); runs at most once a tick for each shard, from frees and allocations and
    /// mimalloc's heartbeat (`purge_due`).
    fn purge_idle(&mut self, now: u64) {
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

    fn take_free(
        &mut self,
        placement: u32,
        pages: usize,
        align_pages: usize,
    ) -> Option<(usize, usize)> {
        let key = self.free.fitting(placement, pages + align_pages - 1)?;
        self.free.remove(key);
        let (chunk, start, free_pages) =
            (key.chunk as usize, key.start as usize, key.pages as usize);
        let base_page = self.chunks[chunk].base / PAGE_SIZE;
        let aligned = start_in(base_page, start, start + free_pages, pages, align_pages);
        self.carve(chunk, start, free_pages, aligned, pages);
        Some((chunk, aligned))
    }

    fn take_bump(
        &mut self,
        placement: u32,
        pages: usize,
        align_pages: usize,
    ) -> Option<(usize, usize)> {
        let chunk = self.placements[placement as usize].current?;
        let c = &self.chunks[chunk];
        let base_page = c.base / PAGE_SIZE;
        let aligned = start_in(base_page, c.bump, c.pages, pages, align_pages);
        if aligned + pages > c.pages {
            return None;
        }
        let start = c.bump;
        self.chunks[chunk].bump = aligned + pages;
        self.carve(chunk, start, aligned + pages - start, aligned, pages);
        Some((chunk, aligned))
    }

    /// Splits the free run `[start, start + run)` into an allocated `[aligned, aligned + pages)`
    /// and free leftovers before and after it.
    fn carve(&mut self, chunk: usize, start: usize, run: usize, aligned: usize, pages: usize) {
        if aligned > start {
            self.insert_free(chunk, start, aligned - start);
        }
        self.chunks[chunk].mark(aligned, pages, TAG_ALLOCATED);
        let end = aligned + pages;
        if end < start + run {
            self.insert_free(chunk, end, start + run - end);
        }
    }

    fn insert_free(&mut self, chunk: usize, start: usize, pages: usize) {
        self.chunks[chunk].mark(start, pages, 0);
        self.free.insert(free_key(chunk, start, pages));
    }

    /// Returns at least `bytes` of cached dirty memory to the kernel, from the largest extents,
    /// taking only the tail of an extent larger than what is still needed. Dirty neighbours
    /// merge, so the largest extent can hold most of the cache: evicting it whole would turn
    /// one over-budget free into a cold start for every size the program reuses.
    fn evict_dirty(&mut self, bytes: usize) {
        let mut needed_pages = bytes.div_ceil(PAGE_SIZE);
        let mut evicted = Evicted::new();
        while needed_pages > 0 {
            let largest = (0..self.placements.len() as u32)
                .filter_map(|p| self.dirty.largest(p))
                .max_by_key(|key| key.pages);
            let Some(key) = largest else {
                // Quick-listed extents merge with their neighbours' tags: the evicted ones must
                // be clean free space first.
                self.give_back(&mut evicted);
                if !self.quick.is_empty() {
                    self.flush_quick();
                    continue;
                }
                self.sub_dirty_bytes(self.dirty_bytes);
                return;
            };
            let evict = (key.pages as usize).min(needed_pages);
            self.evict_dirty_extent(key, evict, &mut evicted);
            needed_pages -= evict;
        }
        self.give_back(&mut evicted);
    }

    /// Takes the last `evict` pages of the dirty extent `key` out of the cache, into `evicted`
    /// (given back to the kernel, then clean free space, by `give_back`); the rest of it stays
    /// cached. Until then the evicted pages are in no set and keep their old tags, which nothing
    /// reads: only `give_back` may touch them, in the same hold of the lock.
    fn evict_dirty_extent(&mut self, key: Free, evict: usize, evicted: &mut Evicted) {
        if evicted.discards.is_full() {
            self.give_back(evicted);
        }
        self.dirty.remove(key);
        let (pages, chunk, start) = (key.pages as usize, key.chunk as usize, key.start as usize);
        let evict = evict.min(pages);
        let keep = pages - evict;
        self.sub_dirty_bytes(evict * PAGE_SIZE);
        if keep > 0 {
            // The head stays dirty (same start, fewer pages, same cache time).
            self.chunks[chunk].mark(start, keep, TAG_DIRTY);
            self.dirty.insert(free_key(chunk, start, keep));
        }
        let tail = start + keep;
        let addr = self.chunks[chunk].base + tail * PAGE_SIZE;
        evicted.extents[evicted.discards.len()] = (chunk as u32, tail as u32, evict as u32);
        evicted.discards.push(addr, evict * PAGE_SIZE);
    }

    /// Gives the pages of the extents in `evicted` back to the kernel, together, then makes
    /// them clean free space (merged with their clean neighbours, which may be each other).
    fn give_back(&mut self, evicted: &mut Evicted) {
        let count = evicted.discards.len();
        if count == 0 {
            return;
        }
        // SAFETY: free extents nobody may use: they are in no set while we hold the lock.
        unsafe { evicted.discards.discard() };
        for &(chunk, start, pages) in &evicted.extents[..count] {
            self.release(chunk as usize, start as usize, pages as usize);
        }
    }

    /// Returns an allocated (already zeroed) extent to the clean free set, merging it with
    /// clean free neighbours.
    fn release(&mut self, chunk: usize, mut start: usize, mut pages: usize) {
        let c = &mut self.chunks[chunk];
        c.mark(start, pages, 0);
        if start > 0 {
            let before = c.tag(start - 1);
            if before & (TAG_ALLOCATED | TAG_DIRTY) == 0 {
                let before_pages = (before >> TAG_PAGES_SHIFT) as usize;
                let before_start = start - before_pages;
                self.free
                    .remove(free_key(chunk, before_start, before_pages));
                start = before_start;
                pages += before_pages;
            }
        }
        let c = &mut self.chunks[chunk];
        let end = start + pages;
        if end == c.bump {
            // Give the run back to the never-used tail: it is zero and non-resident either way.
            c.bump = start;
            return;
        }
        let after = c.tag(end);
        if after & (TAG_ALLOCATED | TAG_DIRTY) == 0 {
            let after_pages = (after >> TAG_PAGES_SHIFT) as usize;
            self.free.remove(free_key(chunk, end, after_pages));
            pages += after_pages;
        }
        self.insert_free(chunk, start, pages);
    }

    /// Maps a new chunk of `placement` able to hold at least `pages` pages and makes it the
    /// placement's current chunk.
    fn new_chunk(&mut self, placement: u32, pages: usize, now: u64) -> Option<()> {
        if self.chunks.len() >= CHUNKS_PER_SHARD {
            return None;
        }
        let bytes = (pages.checked_mul(PAGE_SIZE)?).next_multiple_of(CHUNK_BYTES);
        if bytes == CHUNK_BYTES && now < NO_CHUNK_BEFORE_TICK.load(Ordering::Relaxed) {
            return None;
        }
        // A chunk of its own for one huge object is mapped without MAP_NORESERVE, so the
        // kernel's overcommit policy judges it as it would glibc's mmap: `malloc(1 TiB)` on a
        // 24 GiB machine fails with ENOMEM instead of succeeding on paper.
        let Some(base) = map_aligned(bytes, bytes > CHUNK_BYTES) else {
            if bytes == CHUNK_BYTES {
                // Not one failed mmap per allocation: the caller serves them from mimalloc.
                NO_CHUNK_BEFORE_TICK.store(now + TICKS_PER_SECOND, Ordering::Relaxed);
                if !CHUNK_REFUSED.swap(true, Ordering::Relaxed) {
                    log!(
                        "cannot reserve {} MiB of address space for tracked objects (ulimit -v?): objects go untracked to mimalloc until it can",
                        bytes >> 20
                    );
                }
            }
            return None;
        };
        let chunk_pages = bytes / PAGE_SIZE;
        let tags_bytes = chunk_pages * core::mem::size_of::<u32>();
        let sites_bytes = SIDE_WORDS * chunk_pages * core::mem::size_of::<u64>();
        // The clean and the dirty index's bitmaps for this chunk, one after the other.
        let bitmap_words = free_index::bitmap_words(chunk_pages);
        let bitmaps_bytes = 2 * bitmap_words * core::mem::size_of::<u64>();
        // Side tables are written a word per extent, sparsely: with huge pages `always`, each
        // first write would fault in 2 MiB (see `map_metadata`).
        let tags = map_metadata(tags_bytes);
        let sites = map_metadata(sites_bytes);
        let bitmaps = map_metadata(bitmaps_bytes);
        if tags.is_null() || sites.is_null() || bitmaps.is_null() {
            // SAFETY: unmapping the regions we just mapped and never published.
            unsafe {
                crate::os::munmap(base as *mut libc::c_void, bytes);
                for (side, len) in [
                    (tags, tags_bytes),
                    (sites, sites_bytes),
                    (bitmaps, bitmaps_bytes),
                ] {
                    if !side.is_null() {
                        crate::os::munmap(side as *mut libc::c_void, len);
                    }
                }
            }
            return None;
        }
        let bitmaps = bitmaps as *mut u64;
        // SAFETY: a fresh zeroed mapping of 2 * bitmap_words words, never unmapped, split
        // between the two indexes; the chunk is numbered `self.chunks.len()` in both, as below.
        unsafe {
            self.free.add_chunk(placement, chunk_pages, bitmaps);
            self.dirty
                .add_chunk(placement, chunk_pages, bitmaps.add(bitmap_words));
        }
        if bytes == CHUNK_BYTES {
            // A thread's first tracked objects, often a process's only ones (a shell, a helper,
            // a short tool), go at the start of its shard's first chunk: under
            // `transparent_hugepage=always` the first of them would make 2 MiB resident, taken
            // where first touch puts it, in the fast tier, as mimalloc's first arena would
            // (`arenas::keep_first_off_huge_pages`). The rest of the chunk keeps the system's
            // setting, so large arrays still get huge pages.
            keep_off_huge_pages(base, HUGE_PAGE_BYTES);
        }
        let nodes = self.placements[placement as usize].nodes;
        if nodes != 0 {
            bind_preferred(base, bytes, nodes);
        }
        // Retire the old current chunk's never-used tail into the free set so it stays usable.
        if let Some(old) = self.placements[placement as usize].current {
            let c = &self.chunks[old];
            let (bump, total) = (c.bump, c.pages);
            if bump < total {
                self.chunks[old].bump = total;
                self.insert_free(old, bump, total - bump);
            }
        }
        let index = self.chunks.len();
        let code = (index << SHARD_BITS | self.id) + 1;
        self.chunks.push(Chunk {
            base,
            pages: chunk_pages,
            tags: tags as *mut u32,
            sites: sites as *mut u64,
            bump: 0,
            placement,
        });
        for owner in &GRANULE_OWNER[(base >> CHUNK_SHIFT)..((base + bytes) >> CHUNK_SHIFT)] {
            owner.store(code as u16, Ordering::Release);
        }
        self.placements[placement as usize].current = Some(index);
        Some(())
    }
}

/// The free extent of `pages` pages from page `start` of `chunk`, as the indexes know it.
fn free_key(chunk: usize, start: usize, pages: usize) -> Free {
    Free {
        pages: pages as u32,
        chunk: chunk as u32,
        start: start as u32,
    }
}

const MPOL_PREFERRED: i64 = 1;
const MPOL_PREFERRED_MANY: i64 = 5;

/// Binds `[base, base + bytes)` to prefer the nodes in `nodes`: the node itself
/// (`MPOL_PREFERRED`) when it is one, all of them where the kernel has `MPOL_PREFERRED_MANY`
/// (5.15+) when they are several, else the lowest one; `nodes` 0 gives the range back to the
/// default policy. A failure leaves the range as it was (its objects start wherever first touch
/// or the old policy puts them, and the daemon moves them later).
///
/// One node is bound with `MPOL_PREFERRED` because of huge pages: under it a fault that finds
/// no free 2 MiB block on the node takes base pages there, where `MPOL_PREFERRED_MANY` takes
/// the huge page from another node at once (without reclaim or compaction on the preferred
/// ones): on a fragmented fast node, objects placed fast were born slow in 2 MiB steps.
pub(crate) fn bind_preferred(base: usize, bytes: usize, nodes: u64) {
    if crate::sandbox::confined() {
        return;
    }
    if nodes == 0 {
        // SAFETY: mbind with MPOL_DEFAULT and no mask, on a range we own.
        unsafe { crate::os::mbind(base, bytes, 0, &[], 0) };
        return;
    }
    let mask = [nodes, 0u64];
    let lowest = [1u64 << nodes.trailing_zeros(), 0u64];
    let modes: &[(i64, &[u64; 2])] = if nodes.is_power_of_two() {
        &[(MPOL_PREFERRED, &mask)]
    } else {
        &[(MPOL_PREFERRED_MANY, &mask), (MPOL_PREFERRED, &lowest)]
    };
    for &(mode, mask) in modes {
        // SAFETY: mbind on a range we own; the mask outlives the call and holds maxnode bits.
        let rc = unsafe { crate::os::mbind(base, bytes, mode, mask, (mask.len() * 64) as u64) };
        if rc == 0 {
            return;
        }
    }
}

/// Maps `bytes` of private anonymous memory; `accounted` leaves out MAP_NORESERVE.
fn map_anonymous(bytes: usize, accounted: bool) -> *mut u8 {
    map_anonymous_at(0, bytes, accounted)
}

/// `map_anonymous` at `addr` exactly, if nothing is mapped there (`MAP_FIXED_NOREPLACE`; a
/// kernel before 4.17 takes it as a hint, so the caller checks where the mapping landed); 0:
/// anywhere.
fn map_anonymous_at(addr: usize, bytes: usize, accounted: bool) -> *mut u8 {
    let noreserve = if accounted { 0 } else { libc::MAP_NORESERVE };
    let fixed = if addr != 0 {
        libc::MAP_FIXED_NOREPLACE
    } else {
        0
    };
    // SAFETY: a fresh private anonymous mapping; MAP_FIXED_NOREPLACE never replaces one.
    let p = unsafe {
        crate::os::mmap(
            addr as *mut libc::c_void,
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | noreserve | fixed,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        core::ptr::null_mut()
    } else {
        p as *mut u8
    }
}

/// Maps `bytes` of memory for the allocator's own tables, without transparent huge pages: like
/// jemalloc's metadata (`metadata_thp:disabled`), they are written sparsely, and under
/// `transparent_hugepage=always` each first write would make 2 MiB resident. That memory is
/// taken where first touch puts it, in the fast tier, before the program's own data.
fn map_metadata(bytes: usize) -> *mut u8 {
    let p = map_anonymous(bytes, false);
    if !p.is_null() {
        keep_off_huge_pages(p as usize, bytes);
    }
    p
}

/// Advises `[start, start + len)`, memory the library mapped or mimalloc reserved, against
/// transparent huge pages (`MADV_NOHUGEPAGE`), for memory that would be written sparsely: under
/// `transparent_hugepage=always` each first write there would make 2 MiB resident, in the fast
/// tier, where first touch puts it. EINVAL (a kernel without THP) is fine: there are no huge
/// pages to avoid.
pub(crate) fn keep_off_huge_pages(start: usize, len: usize) {
    // SAFETY: the advice changes which page size backs the range, never its contents.
    unsafe { crate::os::madvise(start as *mut libc::c_void, len, libc::MADV_NOHUGEPAGE) };
}

/// Maps `bytes` (a multiple of CHUNK_BYTES) aligned to CHUNK_BYTES, trimming the excess.
fn map_aligned(bytes: usize, accounted: bool) -> Option<usize> {
    let padded = bytes.checked_add(CHUNK_BYTES)?;
    let raw = map_anonymous(padded, accounted) as usize;
    let base = if raw == 0 {
        // The slack refused (an address-space limit): without it.
        map_aligned_without_slack(bytes, accounted)?
    } else {
        let base = raw.next_multiple_of(CHUNK_BYTES);
        // SAFETY: both trims are inside the mapping we just created and own.
        unsafe {
            if base > raw {
                crate::os::munmap(raw as *mut libc::c_void, base - raw);
            }
            let end = base + bytes;
            if raw + padded > end {
                crate::os::munmap(end as *mut libc::c_void, raw + padded - end);
            }
        }
        base
    };
    if (base + bytes) >> CHUNK_SHIFT > GRANULES {
        // SAFETY: unmapping our own mapping, outside the range the owner table covers.
        unsafe { crate::os::munmap(base as *mut libc::c_void, bytes) };
        return None;
    }
    Some(base)
}

/// Maps `bytes` aligned to CHUNK_BYTES in as much address space as it covers, for a process
/// whose limit (`ulimit -v`) refused the slack `map_aligned` asks for: a process under a limit of
/// a few GiB can then have two or three chunks instead of one. Where the kernel would place
/// `bytes` is free, and so, usually, is the address space below it (the mmap area grows down):
/// the range from that place rounded down to the alignment is asked for exactly.
fn map_aligned_without_slack(bytes: usize, accounted: bool) -> Option<usize> {
    let probe = map_anonymous(bytes, accounted) as usize;
    if probe == 0 {
        return None;
    }
    if probe.is_multiple_of(CHUNK_BYTES) {
        return Some(probe);
    }
    // SAFETY: unmapping the probe we just mapped.
    unsafe { crate::os::munmap(probe as *mut libc::c_void, bytes) };
    let base = probe - probe % CHUNK_BYTES;
    let p = map_anonymous_at(base, bytes, accounted) as usize;
    if p == base {
        return Some(base);
    }
    if p != 0 {
        // An old kernel took the address as a hint and mapped elsewhere.
        // SAFETY: unmapping the mapping we just made.
        unsafe { crate::os::munmap(p as *mut libc::c_void, bytes) };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    // The allocator state is global; these tests run serially through one lock of their own.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Holds off the idle purge (which moves quick-listed extents into the dirty index), so a
    /// test sees the quick lists whatever the clock does.
    pub(super) static PURGE_OFF: AtomicBool = AtomicBool::new(false);

    /// The dirty cache's budget for a test that needs one it knows (0: the real one). The
    /// real one follows the process's high-water mark, which the other tests move.
    pub(super) static BUDGET: AtomicUsize = AtomicUsize::new(0);

    struct Budget;
    impl Budget {
        fn set(bytes: usize) -> Self {
            BUDGET.store(bytes, Ordering::Relaxed);
            Budget
        }
    }
    impl Drop for Budget {
        fn drop(&mut self) {
            BUDGET.store(0, Ordering::Relaxed);
        }
    }

    struct PurgeOff;
    impl PurgeOff {
        fn new() -> Self {
            PURGE_OFF.store(true, Ordering::Relaxed);
            PurgeOff
        }
    }
    impl Drop for PurgeOff {
        fn drop(&mut self) {
            PURGE_OFF.store(false, Ordering::Relaxed);
        }
    }

    fn quick_count() -> usize {
        SHARDS[thread_shard()].lock().quick.count()
    }

    #[test]
    fn small_frees_are_reused_by_size_from_the_quick_lists() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let _off = PurgeOff::new();
        flush_dirty();
        let guard_before = big(PAGE_SIZE, 8);
        let (p, _) = alloc(3 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        let guard_after = big(PAGE_SIZE, 8);
        // SAFETY: p is a live 3-page object.
        unsafe { *p = 7 };
        assert!(free(p, crate::report::now_ns(), |_, _| {}).is_some());
        assert_eq!(quick_count(), 1);
        assert_eq!(cached_bytes(), 3 * PAGE_SIZE, "counted in the dirty cache");
        // A quick-listed extent is no object: a second free, a lookup and a snapshot skip it.
        assert!(
            free(p, crate::report::now_ns(), |_, _| {}).is_none(),
            "double free refused"
        );
        assert!(extent_of(p).is_none());
        let mut live = Vec::new();
        for_each_live(|e, _| live.push(e.addr), || {});
        assert!(!live.contains(&(p as usize)));
        check_all();
        // Another size does not take it; the same size does, dirty, as last freed first out.
        let (q, _) = alloc(2 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_ne!(q, p);
        let (r, contents) =
            alloc(3 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_eq!((r, contents), (p, Contents::Dirty));
        // SAFETY: r is p again, its contents kept.
        assert_eq!(unsafe { *r }, 7);
        assert_eq!(quick_count(), 0);
        // Page-aligned requests of more than a page never come from the quick lists.
        assert!(free(r, crate::report::now_ns(), |_, _| {}).is_some());
        let (s, _) = alloc(
            3 * PAGE_SIZE,
            2 * PAGE_SIZE,
            0,
            0,
            0,
            crate::report::now_ns(),
            |_| 0,
        )
        .unwrap();
        assert_eq!(quick_count(), 1);
        check_all();
        for x in [q, s, guard_before, guard_after] {
            assert!(free(x, crate::report::now_ns(), |_, _| {}).is_some());
        }
        flush_dirty();
        assert_eq!((quick_count(), cached_bytes()), (0, 0));
        check_all();
    }

    #[test]
    fn full_quick_lists_overflow_into_the_index_and_flushed_extents_merge() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let _off = PurgeOff::new();
        flush_dirty();
        // Adjacent 2-page objects, freed in address order: the first QUICK_DEPTH go to the
        // quick list, the rest to the index, where they merge with each other.
        let blocks: Vec<*mut u8> = (0..QUICK_DEPTH + 4)
            .map(|_| big(2 * PAGE_SIZE, 8))
            .collect();
        let fence = big(PAGE_SIZE, 8);
        for &b in &blocks {
            assert!(free(b, crate::report::now_ns(), |_, _| {}).is_some());
        }
        assert_eq!(quick_count(), QUICK_DEPTH);
        assert_eq!(cached_bytes(), blocks.len() * 2 * PAGE_SIZE);
        check_all();
        // Moved into the index (as the idle purge does), all of them merge into one extent
        // that serves a request for all their pages at once.
        SHARDS[thread_shard()].lock().flush_quick();
        assert_eq!(quick_count(), 0);
        check_all();
        let (whole, contents) = alloc(
            blocks.len() * 2 * PAGE_SIZE,
            8,
            0,
            0,
            0,
            crate::report::now_ns(),
            |_| 0,
        )
        .unwrap();
        assert_eq!((whole, contents), (blocks[0], Contents::Dirty));
        assert!(free(whole, crate::report::now_ns(), |_, _| {}).is_some());
        assert!(free(fence, crate::report::now_ns(), |_, _| {}).is_some());
        flush_dirty();
        assert_eq!(cached_bytes(), 0);
        check_all();
    }

    #[test]
    fn eviction_reaches_quick_listed_extents() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let _off = PurgeOff::new();
        flush_dirty();
        let p = big(4 * PAGE_SIZE, 8);
        let fence = big(PAGE_SIZE, 8);
        assert!(free(p, crate::report::now_ns(), |_, _| {}).is_some());
        assert_eq!(quick_count(), 1);
        // Only quick-listed memory is cached: evicting it must find it, not forget it.
        SHARDS[thread_shard()].lock().evict_dirty(PAGE_SIZE);
        assert_eq!(quick_count(), 0);
        assert_eq!(
            cached_bytes(),
            3 * PAGE_SIZE,
            "the tail page went back to the kernel"
        );
        check_all();
        assert!(free(fence, crate::report::now_ns(), |_, _| {}).is_some());
        flush_dirty();
        assert_eq!(cached_bytes(), 0);
        check_all();
    }

    fn big(size: usize, align: usize) -> *mut u8 {
        alloc(size, align, 0, 0, 0, crate::report::now_ns(), |_| 0)
            .unwrap()
            .0
    }

    /// A program that stops freeing still returns its idle cache: `purge_if_due` (run after a
    /// tracked allocation and from mimalloc's heartbeat) returns extents idle for
    /// `DIRTY_IDLE_TICKS`, as a free does.
    #[test]
    fn an_allocation_returns_idle_cached_memory_without_a_free() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        flush_dirty();
        let p = big(16 * PAGE_SIZE, 8);
        // SAFETY: p is a live 16-page object.
        unsafe { p.write_bytes(1, 16 * PAGE_SIZE) };
        {
            let _off = PurgeOff::new();
            assert!(free(p, crate::report::now_ns(), |_, _| {}).is_some());
        }
        assert_eq!(cached_bytes(), 16 * PAGE_SIZE);
        // Idle for DIRTY_IDLE_TICKS and into a tick of its own (ticks are 125 ms).
        std::thread::sleep(std::time::Duration::from_millis(
            (DIRTY_IDLE_TICKS + 2) * 1000 / TICKS_PER_SECOND,
        ));
        // Larger than the cached extent, so it does not reuse it; then the purge that
        // lib.rs runs after each tracked allocation.
        let q = big(32 * PAGE_SIZE, 8);
        purge_if_due(crate::report::now_ns());
        assert_eq!(cached_bytes(), 0, "the idle extent went back to the kernel");
        // SAFETY: the purged extent is free and reads as zero again, through a new object.
        let r = big(16 * PAGE_SIZE, 8);
        assert_eq!(unsafe { *r.add(PAGE_SIZE) }, 0);
        check_all();
        assert!(
            free(q, crate::report::now_ns(), |_, _| {}).is_some()
                && free(r, crate::report::now_ns(), |_, _| {}).is_some()
        );
        flush_dirty();
    }

    /// The idle purge gives back more extents than one batch of `discard` holds, in batches,
    /// with `process_madvise` or a `madvise` each: every one is clean free space afterwards,
    /// reads as zero, and merges with its neighbours once they are free too.
    #[test]
    fn a_purge_gives_back_many_extents_in_batches() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        for plain in [false, true] {
            crate::discard::tests::FORCE_PLAIN.store(plain, Ordering::Relaxed);
            flush_dirty();
            // Freed and kept objects alternate, so that no two freed ones merge.
            let n = 2 * discard::BATCH + 5;
            let objects: Vec<*mut u8> = (0..2 * n).map(|_| big(9 * PAGE_SIZE, 8)).collect();
            {
                let _off = PurgeOff::new();
                for &p in objects.iter().step_by(2) {
                    // SAFETY: p is a live 9-page object.
                    unsafe { p.write_bytes(0xA5, 9 * PAGE_SIZE) };
                    assert!(free(p, crate::report::now_ns(), |_, _| {}).is_some());
                }
            }
            assert_eq!(cached_bytes(), n * 9 * PAGE_SIZE);
            std::thread::sleep(std::time::Duration::from_millis(
                (DIRTY_IDLE_TICKS + 2) * 1000 / TICKS_PER_SECOND,
            ));
            purge_if_due(crate::report::now_ns());
            assert_eq!(
                cached_bytes(),
                0,
                "every idle extent went back (plain: {plain})"
            );
            check_all();
            let again: Vec<*mut u8> = (0..n).map(|_| big(9 * PAGE_SIZE, 8)).collect();
            for &p in &again {
                // SAFETY: a live 9-page object, on given-back pages.
                unsafe {
                    assert_eq!(*p, 0);
                    assert_eq!(*p.add(9 * PAGE_SIZE - 1), 0);
                }
            }
            for p in again
                .into_iter()
                .chain(objects.into_iter().skip(1).step_by(2))
            {
                assert!(free(p, crate::report::now_ns(), |_, _| {}).is_some());
            }
            flush_dirty();
            check_all();
        }
        crate::discard::tests::FORCE_PLAIN.store(false, Ordering::Relaxed);
    }

    /// Returns every cached dirty extent to the kernel (tests start from a known state).
    fn flush_dirty() {
        trim();
    }

    /// Checks every shard's invariants.
    fn check_all() {
        for shard in &SHARDS {
            shard.lock().check().unwrap();
        }
    }

    /// Frees, then flushes the dirty cache, for tests of coalescing.
    fn free_clean(p: *mut u8) -> Option<Extent> {
        let result = free(p, crate::report::now_ns(), |_, _| {});
        flush_dirty();
        result
    }

    #[test]
    fn dirty_extents_are_reused_and_reported_as_dirty() {
        let _g = SERIAL.lock().unwrap();
        flush_dirty();
        let (p, contents) =
            alloc(12 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_eq!(contents, Contents::Zeroed);
        // SAFETY: p is a live 8-page object.
        unsafe { *p = 42 };
        assert!(free(p, crate::report::now_ns(), |_, _| {}).is_some());
        assert!(
            free(p, crate::report::now_ns(), |_, _| {}).is_none(),
            "double free of a dirty extent is refused"
        );
        let (q, contents) =
            alloc(10 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_eq!(
            (q, contents),
            (p, Contents::Dirty),
            "reused, and says it is not zeroed"
        );
        // (Sizes beyond the quick lists': this is the dirty index.) The leftover 2 pages stay dirty and serve a 2-page request.
        let (r, contents) =
            alloc(2 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_eq!(contents, Contents::Dirty);
        assert_eq!(r as usize, p as usize + 10 * PAGE_SIZE);
        assert!(free_clean(q).is_some());
        assert!(free_clean(r).is_some());
        assert_eq!(cached_bytes(), 0);
    }

    #[test]
    fn dirty_neighbours_merge() {
        let _g = SERIAL.lock().unwrap();
        flush_dirty();
        let a = big(10 * PAGE_SIZE, 8);
        let b = big(11 * PAGE_SIZE, 8);
        let guard = big(PAGE_SIZE, 8);
        assert!(free(a, crate::report::now_ns(), |_, _| {}).is_some());
        assert!(free(b, crate::report::now_ns(), |_, _| {}).is_some());
        // b's head page is now inside the merged extent: a double free of b is refused, and
        // leaves nothing behind (it used to insert an overlapping extent).
        assert!(
            free(b, crate::report::now_ns(), |_, _| {}).is_none(),
            "double free refused"
        );
        assert!(extent_of(b).is_none());
        check_all();
        // a and b merged (sizes beyond the quick lists'): a 21-page request is served from them, dirty.
        let (c, contents) =
            alloc(21 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_eq!((c, contents), (a, Contents::Dirty));
        assert!(free_clean(c).is_some());
        assert!(free_clean(guard).is_some());
        check_all();
    }

    #[test]
    fn a_full_dirty_cache_evicts_rather_than_refuses() {
        let _g = SERIAL.lock().unwrap();
        let _budget = Budget::set(DIRTY_BUDGET_BYTES);
        let big = DIRTY_MAX_EXTENT_BYTES;
        let blocks: Vec<*mut u8> = (0..DIRTY_BUDGET_BYTES / big + 2)
            .map(|_| {
                alloc(big, 8, 0, 0, 0, crate::report::now_ns(), |_| 0)
                    .unwrap()
                    .0
            })
            .collect();
        for &b in &blocks {
            assert!(free(b, crate::report::now_ns(), |_, _| {}).is_some());
            assert!(cached_bytes() <= dirty_budget_bytes(0));
        }
        // The most recent free is cached (reused, dirty), not returned to the kernel.
        let (p, contents) = alloc(PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_eq!(contents, Contents::Dirty);
        assert!(free_clean(p).is_some());
    }

    #[test]
    fn the_budget_leaves_room_over_the_mark_and_counts_a_freed_object_once() {
        const MIB: u64 = 1 << 20;
        let floor = DIRTY_BUDGET_BYTES;
        // A quarter over the mark: live plus cached may reach 1.25 times the mark.
        assert_eq!(dirty_budget(1024 * MIB, 1024 * MIB, 0), 256 << 20);
        assert_eq!(dirty_budget(256 * MIB, 1024 * MIB, 0), 1024 << 20);
        // An object being freed counts as cached, not also as live: its free makes room for
        // exactly its own bytes.
        assert_eq!(dirty_budget(1024 * MIB, 1024 * MIB, 4 << 20), 260 << 20);
        // Never below the floor, however small or full the process.
        assert_eq!(dirty_budget(0, 0, 0), floor);
        assert_eq!(dirty_budget(10 * MIB, 10 * MIB, 0), floor);
        assert_eq!(dirty_budget(u64::MAX / 2, 0, 0), floor);
        assert_eq!(dirty_budget(0, 0, usize::MAX), floor);
    }

    #[test]
    fn alloc_free_reuse_and_coalesce() {
        let _g = SERIAL.lock().unwrap();
        let a = big(3 * PAGE_SIZE, 8);
        let b = big(PAGE_SIZE + 1, 8);
        let c = big(PAGE_SIZE, 8);
        assert!(!a.is_null() && !b.is_null() && !c.is_null());
        assert_eq!(a as usize % PAGE_SIZE, 0);
        assert_eq!(extent_of(b).unwrap().len, 2 * PAGE_SIZE);
        // Memory is usable and zeroed.
        // SAFETY: b is a live 2-page object.
        unsafe {
            assert_eq!(*b, 0);
            *b.add(2 * PAGE_SIZE - 1) = 7;
        }
        assert!(free_clean(b).is_some());
        assert!(free_clean(b).is_none(), "double free is refused");
        assert!(free_clean(a).is_some());
        // a (3 pages) and b (2 pages) coalesced: a 5-page request fits at a's address.
        let d = big(5 * PAGE_SIZE, 8);
        assert_eq!(d, a);
        // SAFETY: d is live and was freed memory: it must read zero.
        unsafe { assert_eq!(*d.add(4 * PAGE_SIZE - 1), 0) };
        assert!(free_clean(d).is_some());
        assert!(free_clean(c).is_some());
        assert!(extent_of(c).is_none());
        check_all();
    }

    #[test]
    fn aligned_and_interior_pointers() {
        let _g = SERIAL.lock().unwrap();
        let p = big(PAGE_SIZE, 64 * 1024);
        assert_eq!(p as usize % (64 * 1024), 0);
        assert!(free_clean(p.wrapping_add(PAGE_SIZE)).is_none());
        let mut seen = 0;
        for_each_live(
            |e, _| {
                if e.addr == p as usize {
                    seen += 1;
                }
            },
            || {},
        );
        assert_eq!(seen, 1);
        assert!(free_clean(p).is_some());
        assert!(!contains(&seen as *const i32 as *const u8));
    }

    #[test]
    fn objects_of_whole_huge_pages_start_on_one_where_the_run_has_room() {
        let h = HUGE_PAGE_PAGES;
        // A chunk's first page is on a huge page boundary (chunks are 1 GiB-aligned); runs
        // are [start, end) in pages of the chunk.
        assert_eq!(
            start_in(0, 3, 10 * h, 2 * h, 1),
            h,
            "past the gap, on a boundary"
        );
        assert_eq!(start_in(0, 3, 3 + 2 * h, 2 * h, 1), 3, "no room: first fit");
        assert_eq!(
            start_in(0, 3, 10 * h, 2 * h + 1, 1),
            3,
            "not whole huge pages"
        );
        assert_eq!(start_in(0, 3, 10 * h, 5, 4), 4, "the caller's alignment");
        assert_eq!(
            start_in(0, 3, 10 * h, h, 4 * h),
            4 * h,
            "a larger one is kept"
        );
        assert_eq!(start_in(0, h, 10 * h, h, 1), h, "already on one");
        // The boundary is the address's, not the chunk's (every chunk's base is on one, but
        // the arithmetic does not rely on it).
        assert_eq!(start_in(5, 0, 10 * h, h, 1), h - 5);
        // Through the allocator: a page, then an object of 37 huge pages (a size no other
        // test frees, so no clean run that fits it exactly without room is at hand).
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        flush_dirty();
        let page = big(PAGE_SIZE, 8);
        let huge = big(37 * HUGE_PAGE_BYTES, 8);
        assert_eq!(huge as usize % HUGE_PAGE_BYTES, 0);
        check_all();
        assert!(
            free(huge, crate::report::now_ns(), |_, _| {}).is_some()
                && free(page, crate::report::now_ns(), |_, _| {}).is_some()
        );
        flush_dirty();
        check_all();
    }

    #[test]
    fn huge_objects_get_their_own_chunk() {
        let _g = SERIAL.lock().unwrap();
        let p = big(CHUNK_BYTES + PAGE_SIZE, 8);
        assert!(!p.is_null());
        assert_eq!(extent_of(p).unwrap().len, CHUNK_BYTES + PAGE_SIZE);
        assert!(free(p, crate::report::now_ns(), |_, _| {}).is_some());
        assert!(alloc(usize::MAX - 10, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).is_none());
    }

    #[test]
    fn placements_get_chunks_of_their_own_and_sites_are_kept() {
        let _g = SERIAL.lock().unwrap();
        // Node 0 exists on every machine; a mask naming it gives a bound placement.
        let (placed, _) = alloc(PAGE_SIZE, 8, 1, 0xabc, 0, crate::report::now_ns(), |_| 0).unwrap();
        let (plain, _) = alloc(PAGE_SIZE, 8, 0, 0xdef, 0, crate::report::now_ns(), |_| 0).unwrap();
        let chunk_of = |p: *mut u8| owner(p as usize).unwrap();
        assert_ne!(chunk_of(placed), chunk_of(plain));
        assert!(free(placed, crate::report::now_ns(), |_, _| {}).is_some());
        // The freed placed extent is not handed to an unplaced request...
        let (again, _) = alloc(PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_ne!(chunk_of(again), chunk_of(placed));
        // ...but is reused for the same placement.
        let (same, _) = alloc(PAGE_SIZE, 8, 1, 0x123, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_eq!(same, placed);
        let mut sites = Vec::new();
        for_each_live(
            |e, site| {
                if e.addr == same as usize || e.addr == plain as usize {
                    sites.push(site);
                }
            },
            || {},
        );
        sites.sort();
        assert_eq!(sites, vec![0x123, 0xdef]);
        // A resync walk sees the same objects, in steps of at most two objects.
        let mut walked = 0;
        let mut cursor = (0, 0);
        while let Some(next) = snapshot_step(cursor, 2, |_| {}, |_, _| walked += 1, |_| {}) {
            cursor = next;
        }
        let mut live = 0;
        for_each_live(|_, _| live += 1, || {});
        assert_eq!(walked, live);
        for p in [same, plain, again] {
            assert!(free_clean(p).is_some());
        }
        check_all();
    }

    #[test]
    fn threads_that_never_contend_share_shard_zero() {
        let _g = SERIAL.lock().unwrap();
        // One thread after another: none ever finds shard 0's lock held.
        let mut objects = Vec::new();
        for _ in 0..4 {
            objects.push(
                std::thread::spawn(|| big(PAGE_SIZE, 8) as usize)
                    .join()
                    .unwrap(),
            );
        }
        assert!(objects.iter().all(|&p| owner(p).unwrap().0 == 0));
        for p in objects {
            assert!(free(p as *mut u8, crate::report::now_ns(), |_, _| {}).is_some());
        }
        check_all();
    }

    #[test]
    fn threads_allocate_from_shards_of_their_own_and_free_across_them() {
        let _g = SERIAL.lock().unwrap();
        flush_dirty();
        // Four threads whose first allocation finds shard 0 held (here, by this thread) are
        // given four shards of their own, and keep them.
        let held = SHARDS[0].lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let objects: Vec<Vec<usize>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let tx = tx.clone();
                    s.spawn(move || {
                        let first = big(PAGE_SIZE, 8) as usize;
                        tx.send(()).unwrap();
                        let mut list = vec![first];
                        list.extend((0..63).map(|i| big((1 + i % 5) * PAGE_SIZE, 8) as usize));
                        list
                    })
                })
                .collect();
            for _ in 0..4 {
                rx.recv().unwrap();
            }
            drop(held);
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let shards: std::collections::BTreeSet<usize> = objects
            .iter()
            .flatten()
            .map(|&p| owner(p).unwrap().0)
            .collect();
        assert_eq!(shards.len(), 4, "each thread has a shard of its own");
        assert!(!shards.contains(&0));
        for list in &objects {
            let shard = owner(list[0]).unwrap().0;
            assert!(list.iter().all(|&p| owner(p).unwrap().0 == shard));
        }
        // The resync walk crosses the shards and sees what `for_each_live` sees.
        let (mut walked, mut live) = (0, 0);
        let mut cursor = (0, 0);
        while let Some(next) = snapshot_step(cursor, 5, |_| {}, |_, _| walked += 1, |_| {}) {
            cursor = next;
        }
        for_each_live(|_, _| live += 1, || {});
        assert_eq!(walked, live);
        assert!(live >= 4 * 64);
        // Each thread frees another's objects: into the shard that owns them.
        std::thread::scope(|s| {
            for i in 0..4 {
                let list = &objects[(i + 1) % 4];
                s.spawn(move || {
                    for &p in list {
                        assert!(free(p as *mut u8, crate::report::now_ns(), |_, _| {}).is_some());
                    }
                });
            }
        });
        check_all();
        assert!(cached_bytes() > 0);
        flush_dirty();
        assert_eq!(cached_bytes(), 0);
        check_all();
    }

    #[test]
    fn eviction_takes_the_tail_and_keeps_the_head_cached() {
        let _g = SERIAL.lock().unwrap();
        flush_dirty();
        let p = big(8 * PAGE_SIZE, 8);
        let guard = big(PAGE_SIZE, 8);
        assert!(free(p, crate::report::now_ns(), |_, _| {}).is_some());
        SHARDS[thread_shard()].lock().evict_dirty(2 * PAGE_SIZE);
        assert_eq!(cached_bytes(), 6 * PAGE_SIZE);
        let (q, contents) =
            alloc(6 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_eq!(
            (q, contents),
            (p, Contents::Dirty),
            "the head is still cached"
        );
        let (r, contents) =
            alloc(2 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
        assert_eq!(
            (r as usize, contents),
            (p as usize + 6 * PAGE_SIZE, Contents::Zeroed),
            "the evicted tail is clean free space"
        );
        check_all();
        for x in [q, r, guard] {
            assert!(free_clean(x).is_some());
        }
    }

    #[test]
    fn a_free_gets_its_allocations_report_unless_the_daemon_heard_of_the_object_since() {
        let _g = SERIAL.lock().unwrap();
        let mut got = None;
        let (p, _) = alloc(2 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 77).unwrap();
        assert!(free(p, crate::report::now_ns(), |_, freed| got =
            Some(freed.event))
        .is_some());
        assert_eq!(got, Some(77), "the allocation's report, for taking it back");
        // Grown in place: the daemon heard of it as grown.
        let (a, _) = alloc(2 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 78).unwrap();
        let b = big(4 * PAGE_SIZE, 8);
        let guard = big(PAGE_SIZE, 8);
        assert!(free(b, crate::report::now_ns(), |_, _| {}).is_some());
        assert!(grow_in_place(
            a,
            5 * PAGE_SIZE,
            crate::report::now_ns(),
            |_, _| {}
        ));
        assert!(free(a, crate::report::now_ns(), |_, freed| got =
            Some(freed.event))
        .is_some());
        assert_eq!(got, Some(0));
        // Re-announced (a resync step, or an attach): the daemon heard of it again.
        let (r, _) = alloc(PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 79).unwrap();
        let (s, _) = alloc(PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 80).unwrap();
        for_each_live(|_, _| {}, || {});
        assert!(free(r, crate::report::now_ns(), |_, freed| got =
            Some(freed.event))
        .is_some());
        assert_eq!(got, Some(0));
        let (t, _) = alloc(PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 81).unwrap();
        let mut cursor = (0, 0);
        while let Some(next) = snapshot_step(cursor, usize::MAX, |_| {}, |_, _| {}, |_| {}) {
            cursor = next;
        }
        for q in [s, t] {
            assert!(free(q, crate::report::now_ns(), |_, freed| got =
                Some(freed.event))
            .is_some());
            assert_eq!(got, Some(0));
        }
        assert!(free(guard, crate::report::now_ns(), |_, _| {}).is_some());
        check_all();
    }

    #[test]
    fn what_the_caller_keeps_comes_back_at_the_free_and_a_rebound_tail_is_bound_back() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let mut got = None;
        let (p, _) = alloc(
            3 * PAGE_SIZE,
            8,
            0,
            0x5e,
            42,
            crate::report::now_ns(),
            |_| 0,
        )
        .unwrap();
        assert!(free(p, crate::report::now_ns(), |_, freed| got = Some(freed)).is_some());
        let freed = got.unwrap();
        assert_eq!((freed.site, freed.kept), (0x5e, 42));
        // A rebound object is never kept for reuse dirty: its pages come back dropped.
        flush_dirty();
        let (q, _) = alloc(
            3 * PAGE_SIZE,
            8,
            1,
            0x5e,
            1 | KEPT_REBOUND,
            crate::report::now_ns(),
            |_| 0,
        )
        .unwrap();
        // SAFETY: q is a live object of three pages.
        unsafe { q.write_bytes(1, 3 * PAGE_SIZE) };
        bind_preferred(q as usize + PAGE_SIZE, 2 * PAGE_SIZE, 1);
        assert!(free(q, crate::report::now_ns(), |_, _| {}).is_some());
        assert_eq!(cached_bytes(), 0, "not cached dirty");
        check_all();
    }

    #[test]
    fn objects_grow_in_place_into_free_pages_only() {
        let _g = SERIAL.lock().unwrap();
        flush_dirty();
        let a = big(2 * PAGE_SIZE, 8);
        let b = big(4 * PAGE_SIZE, 8);
        let guard = big(PAGE_SIZE, 8);
        let mut seen = None;
        // b is allocated right after a: no room.
        assert!(!grow_in_place(
            a,
            3 * PAGE_SIZE,
            crate::report::now_ns(),
            |_, _| panic!("nothing changed")
        ));
        assert!(free(b, crate::report::now_ns(), |_, _| {}).is_some()); // now 4 dirty pages follow a
        assert!(grow_in_place(
            a,
            5 * PAGE_SIZE,
            crate::report::now_ns(),
            |before, after| { seen = Some((before.len, after.len)) }
        ));
        assert_eq!(seen, Some((2 * PAGE_SIZE, 5 * PAGE_SIZE)));
        assert_eq!(extent_of(a).unwrap().len, 5 * PAGE_SIZE);
        assert_eq!(cached_bytes(), PAGE_SIZE, "one dirty page is left after it");
        assert!(
            !grow_in_place(a, 8 * PAGE_SIZE, crate::report::now_ns(), |_, _| {}),
            "the guard object blocks further growth"
        );
        check_all();
        for p in [a, guard] {
            assert!(free_clean(p).is_some());
        }
        check_all();
    }

    /// Without the slack, a chunk still comes aligned (below the mmap area, or where the kernel
    /// put it), and covers only its own address space.
    #[test]
    fn a_chunk_maps_aligned_without_slack() {
        let base =
            super::map_aligned_without_slack(CHUNK_BYTES, false).expect("1 GiB of address space");
        assert_eq!(base % CHUNK_BYTES, 0);
        // SAFETY: the mapping this test made.
        unsafe { libc::munmap(base as *mut libc::c_void, CHUNK_BYTES) };
    }
}
