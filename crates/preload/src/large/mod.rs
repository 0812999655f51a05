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

mod chunk;
mod dirty;
mod invariants;
mod mapping;
mod purge;
mod state;
#[cfg(test)]
mod tests;

use chunk::*;
use dirty::*;
use mapping::*;
pub(crate) use mapping::{bind_preferred, keep_off_huge_pages};
pub use purge::purge_if_due;
use purge::*;
use state::*;

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

/// Largest extent a tag can describe: 2^29 pages (2 TiB).
const MAX_EXTENT_PAGES: usize = 1 << 29;

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
