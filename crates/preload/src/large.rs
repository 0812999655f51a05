//! Page-granular memory for tracked objects (those of at least `OBJTIER_TRACK_MIN` bytes).
//!
//! Each tracked object gets whole pages of its own, so that the daemon can move it between tiers
//! without dragging a neighbour along. Objects are carved out of large chunks of address space
//! (1 GiB each, 1 GiB-aligned, reserved with `MAP_NORESERVE`) instead of one `mmap` per object:
//! a process with hundreds of thousands of live objects stays far below `vm.max_map_count`, and
//! chunks are where per-tier placement will bind memory once, later.
//!
//! Inside a chunk, memory is a sequence of *extents* (runs of pages), each either allocated or
//! free, tiling `[0, bump)`; pages past `bump` were never handed out. Every extent writes a
//! boundary tag into a per-chunk side table at its first page (and its last, if longer than one
//! page), so `free` finds an object's length and coalesces with free neighbours in O(1) without
//! touching the object's own memory. Free extents are indexed by `(pages, chunk, start)` in a
//! B-tree for best-fit reuse.
//!
//! Free extents are *clean* (no resident pages, `MADV_DONTNEED`ed: they read as zero and cost no
//! memory) or *dirty* (kept resident for quick reuse, like glibc's trim threshold: a program
//! that frees and reallocates buffers should not pay a page fault per page each time). Dirty
//! extents are bounded to `DIRTY_BUDGET_BYTES` per process, never coalesced, and reused first;
//! `alloc` says whether the memory it returns is known to be zero, so `calloc` clears only
//! dirty memory.
//!
//! Ownership of a pointer is answered without a lock by a table indexed by the pointer's 1 GiB
//! granule, which names the owning chunk.

use crate::lock::FutexMutex;
use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use objtier_wire::PAGE_SIZE;

const CHUNK_SHIFT: u32 = 30;
const CHUNK_BYTES: usize = 1 << CHUNK_SHIFT;
/// User address space on x86_64/aarch64 with 4-level page tables is 47 bits.
const ADDRESS_BITS: u32 = 47;
const GRANULES: usize = 1 << (ADDRESS_BITS - CHUNK_SHIFT);
/// Chunk indices are stored +1 in a u16.
const MAX_CHUNKS: usize = u16::MAX as usize - 1;

const TAG_ALLOCATED: u32 = 1;
const TAG_TAIL: u32 = 2;
/// A free extent whose pages are still resident (not zeroed).
const TAG_DIRTY: u32 = 4;
const TAG_PAGES_SHIFT: u32 = 3;
/// Largest extent a tag can describe: 2^29 pages (2 TiB).
const MAX_EXTENT_PAGES: usize = 1 << 29;

/// Freed memory kept resident for reuse, per process: at least this much...
const DIRTY_BUDGET_BYTES: usize = 64 << 20;

/// ...and up to half of the live tracked bytes, so that a program churning through a large
/// working set reuses its pages the way glibc's heap would instead of faulting them back in.
fn dirty_budget_bytes() -> usize {
    DIRTY_BUDGET_BYTES.max(LIVE_BYTES.load(Ordering::Relaxed) as usize / 2)
}
/// Larger frees are always returned to the kernel at once.
const DIRTY_MAX_EXTENT_BYTES: usize = 4 << 20;

static GRANULE_OWNER: [AtomicU16; GRANULES] = [const { AtomicU16::new(0) }; GRANULES];

/// Bytes currently handed out to tracked objects, for statistics.
pub static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);

struct Chunk {
    base: usize,
    pages: usize,
    /// Boundary tags, one u32 per page of the chunk, in a mapping of their own.
    tags: *mut u32,
    /// Pages `[bump, pages)` have never been handed out.
    bump: usize,
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
}

struct State {
    chunks: Vec<Chunk>,
    /// Clean free extents as (pages, chunk index, start page): best fit is the first at or
    /// after `(wanted, 0, 0)`.
    free: BTreeSet<(u32, u32, u32)>,
    /// Dirty free extents, same order.
    dirty: BTreeSet<(u32, u32, u32)>,
    dirty_bytes: usize,
    /// Chunk with never-used pages at its end, where new extents are cut when nothing fits.
    current: Option<usize>,
}

// SAFETY: the raw tag pointers are only dereferenced under the state lock.
unsafe impl Send for State {}

static STATE: FutexMutex<State> = FutexMutex::new(State {
    chunks: Vec::new(),
    free: BTreeSet::new(),
    dirty: BTreeSet::new(),
    dirty_bytes: 0,
    current: None,
});

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

/// Which chunk (if any) owns `ptr`, without taking the lock.
#[inline]
fn owner(ptr: usize) -> Option<usize> {
    let granule = ptr >> CHUNK_SHIFT;
    if granule >= GRANULES {
        return None;
    }
    match GRANULE_OWNER[granule].load(Ordering::Acquire) {
        0 => None,
        index => Some(index as usize - 1),
    }
}

/// True if `ptr` lies in memory this module manages.
#[inline]
pub fn contains(ptr: *const u8) -> bool {
    owner(ptr as usize).is_some()
}

/// Allocates `size` bytes on pages of their own, aligned to `align` (a power of two).
/// `on_alloc` runs under the allocator lock with the new extent, so that reports of frees and
/// reuses of the same address reach the daemon in the order they happened.
pub fn alloc(
    size: usize,
    align: usize,
    on_alloc: impl FnOnce(Extent),
) -> Option<(*mut u8, Contents)> {
    let pages = pages_for(size)?;
    let align_pages = (align / PAGE_SIZE).max(1);
    let mut state = STATE.lock();
    let (chunk, start, contents) = state.take(pages, align_pages)?;
    let addr = state.chunks[chunk].base + start * PAGE_SIZE;
    let len = pages * PAGE_SIZE;
    LIVE_BYTES.fetch_add(len as u64, Ordering::Relaxed);
    on_alloc(Extent { addr, len });
    Some((addr as *mut u8, contents))
}

/// The extent of the allocated object starting at `ptr`, or None if `ptr` is not the start of a
/// live object here (a foreign pointer, an interior pointer or a double free).
pub fn extent_of(ptr: *const u8) -> Option<Extent> {
    let addr = ptr as usize;
    let chunk = owner(addr)?;
    let state = STATE.lock();
    state.allocated_extent(chunk, addr)
}

/// Frees the object starting at `ptr`. Returns its extent, or None for a pointer that is not a
/// live object here (ignored: a double or invalid free must not corrupt other objects).
/// `on_free` runs under the allocator lock, before the memory can be reused.
pub fn free(ptr: *mut u8, on_free: impl FnOnce(Extent)) -> Option<Extent> {
    let addr = ptr as usize;
    let chunk = owner(addr)?;
    let mut state = STATE.lock();
    let extent = state.allocated_extent(chunk, addr)?;
    let start_page = (addr - state.chunks[chunk].base) / PAGE_SIZE;
    if extent.len <= DIRTY_MAX_EXTENT_BYTES {
        // Keep it resident for the next allocation of its size, making room in the cache by
        // returning the largest cached extents to the kernel: the cache follows what the
        // program frees now instead of filling once and refusing everything after.
        let budget = dirty_budget_bytes();
        while state.dirty_bytes + extent.len > budget {
            state.evict_largest_dirty();
        }
        on_free(extent);
        state.insert_dirty(chunk, start_page, extent.len / PAGE_SIZE);
        LIVE_BYTES.fetch_sub(extent.len as u64, Ordering::Relaxed);
        return Some(extent);
    }
    drop(state);
    // Drop the pages before the extent becomes reusable: once it is marked free another thread
    // may take it, and must find zeroed, non-resident memory.
    // SAFETY: the extent belongs to the object being freed; nobody else may use it until it is
    // marked free below.
    unsafe { libc::madvise(addr as *mut libc::c_void, extent.len, libc::MADV_DONTNEED) };
    let mut state = STATE.lock();
    // Re-check: a racing double free may have released it meanwhile.
    if state.allocated_extent(chunk, addr) != Some(extent) {
        return None;
    }
    on_free(extent);
    state.release(chunk, start_page, extent.len / PAGE_SIZE);
    LIVE_BYTES.fetch_sub(extent.len as u64, Ordering::Relaxed);
    Some(extent)
}

/// Calls `f` for every live object, then `then`, all under one hold of the allocator lock: a
/// snapshot that no concurrent allocation or free can slip past (used to re-announce live
/// objects when attaching to a daemon, before publishing the new ring).
pub fn for_each_live(mut f: impl FnMut(Extent), then: impl FnOnce()) {
    let state = STATE.lock();
    for chunk in &state.chunks {
        let mut page = 0;
        while page < chunk.bump {
            let tag = chunk.tag(page);
            let pages = (tag >> TAG_PAGES_SHIFT) as usize;
            if pages == 0 {
                break; // corrupted tags: stop rather than loop forever
            }
            if tag & TAG_ALLOCATED != 0 {
                f(Extent {
                    addr: chunk.base + page * PAGE_SIZE,
                    len: pages * PAGE_SIZE,
                });
            }
            page += pages;
        }
    }
    then();
}

/// Returns every cached dirty extent's pages to the kernel (`malloc_trim`). True if there were
/// any. Holds the allocator lock throughout, like an explicit trim in glibc.
pub fn trim() -> bool {
    let mut state = STATE.lock();
    let released = !state.dirty.is_empty();
    while !state.dirty.is_empty() {
        state.evict_largest_dirty();
    }
    released
}

/// Bytes of freed extents kept resident for reuse (for `mallinfo`).
pub fn cached_bytes() -> usize {
    STATE.lock().dirty_bytes
}

/// `pthread_atfork` support: hold the lock across `fork()`.
pub fn before_fork() {
    STATE.lock_raw();
}

/// # Safety
/// Must pair with `before_fork` in the same thread.
pub unsafe fn after_fork_parent() {
    // SAFETY: forwarded.
    unsafe { STATE.unlock_raw() };
}

/// # Safety
/// Only in the child after `fork()`, which is single-threaded.
pub unsafe fn after_fork_child() {
    // SAFETY: forwarded.
    unsafe { STATE.force_unlock() };
}

impl State {
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
        if tag & TAG_ALLOCATED == 0 || tag & TAG_TAIL != 0 {
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
    fn take(&mut self, pages: usize, align_pages: usize) -> Option<(usize, usize, Contents)> {
        if let Some((chunk, start)) = self.take_dirty(pages, align_pages) {
            return Some((chunk, start, Contents::Dirty));
        }
        if let Some((chunk, start)) = self.take_free(pages, align_pages) {
            return Some((chunk, start, Contents::Zeroed));
        }
        if let Some((chunk, start)) = self.take_bump(pages, align_pages) {
            return Some((chunk, start, Contents::Zeroed));
        }
        self.new_chunk(pages + align_pages - 1)?;
        let (chunk, start) = self.take_bump(pages, align_pages)?;
        Some((chunk, start, Contents::Zeroed))
    }

    /// Reuses the smallest dirty extent that fits; what is left over stays dirty.
    fn take_dirty(&mut self, pages: usize, align_pages: usize) -> Option<(usize, usize)> {
        if align_pages > 1 {
            return None;
        }
        let &(dirty_pages, chunk, start) = self.dirty.range((pages as u32, 0, 0)..).next()?;
        self.dirty.remove(&(dirty_pages, chunk, start));
        let (chunk, start, dirty_pages) = (chunk as usize, start as usize, dirty_pages as usize);
        self.dirty_bytes = self.dirty_bytes.saturating_sub(dirty_pages * PAGE_SIZE);
        self.chunks[chunk].mark(start, pages, TAG_ALLOCATED);
        if dirty_pages > pages {
            self.insert_dirty(chunk, start + pages, dirty_pages - pages);
        }
        Some((chunk, start))
    }

    /// Adds a dirty free extent, merged with dirty free neighbours (as clean ones are merged
    /// with clean ones): without merging, reuse by best fit splits the cache into ever smaller
    /// pieces that larger requests miss.
    fn insert_dirty(&mut self, chunk: usize, mut start: usize, mut pages: usize) {
        self.dirty_bytes += pages * PAGE_SIZE;
        let c = &self.chunks[chunk];
        if start > 0 {
            let before = c.tag(start - 1);
            if before & (TAG_ALLOCATED | TAG_DIRTY) == TAG_DIRTY {
                let before_pages = (before >> TAG_PAGES_SHIFT) as usize;
                self.dirty.remove(&(
                    before_pages as u32,
                    chunk as u32,
                    (start - before_pages) as u32,
                ));
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
                self.dirty
                    .remove(&(after_pages as u32, chunk as u32, end as u32));
                pages += after_pages;
            }
        }
        self.chunks[chunk].mark(start, pages, TAG_DIRTY);
        self.dirty
            .insert((pages as u32, chunk as u32, start as u32));
    }

    fn take_free(&mut self, pages: usize, align_pages: usize) -> Option<(usize, usize)> {
        let wanted = (pages + align_pages - 1) as u32;
        let &(free_pages, chunk, start) = self.free.range((wanted, 0, 0)..).next()?;
        self.free.remove(&(free_pages, chunk, start));
        let (chunk, start, free_pages) = (chunk as usize, start as usize, free_pages as usize);
        let base_page = self.chunks[chunk].base / PAGE_SIZE;
        let aligned = (base_page + start).next_multiple_of(align_pages) - base_page;
        self.carve(chunk, start, free_pages, aligned, pages);
        Some((chunk, aligned))
    }

    fn take_bump(&mut self, pages: usize, align_pages: usize) -> Option<(usize, usize)> {
        let chunk = self.current?;
        let c = &self.chunks[chunk];
        let base_page = c.base / PAGE_SIZE;
        let aligned = (base_page + c.bump).next_multiple_of(align_pages) - base_page;
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
        self.free.insert((pages as u32, chunk as u32, start as u32));
    }

    /// Returns the largest dirty extent's pages to the kernel and makes it clean free space.
    fn evict_largest_dirty(&mut self) {
        let Some(&(pages, chunk, start)) = self.dirty.iter().next_back() else {
            self.dirty_bytes = 0;
            return;
        };
        self.dirty.remove(&(pages, chunk, start));
        let (pages, chunk, start) = (pages as usize, chunk as usize, start as usize);
        self.dirty_bytes = self.dirty_bytes.saturating_sub(pages * PAGE_SIZE);
        let addr = self.chunks[chunk].base + start * PAGE_SIZE;
        // SAFETY: a free extent nobody may use: it is in no set while we hold the lock.
        unsafe {
            libc::madvise(
                addr as *mut libc::c_void,
                pages * PAGE_SIZE,
                libc::MADV_DONTNEED,
            )
        };
        self.release(chunk, start, pages);
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
                    .remove(&(before_pages as u32, chunk as u32, before_start as u32));
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
            self.free
                .remove(&(after_pages as u32, chunk as u32, end as u32));
            pages += after_pages;
        }
        self.insert_free(chunk, start, pages);
    }

    /// Maps a new chunk able to hold at least `pages` pages and makes it current.
    fn new_chunk(&mut self, pages: usize) -> Option<()> {
        if self.chunks.len() >= MAX_CHUNKS {
            return None;
        }
        let bytes = (pages.checked_mul(PAGE_SIZE)?).next_multiple_of(CHUNK_BYTES);
        let base = map_aligned(bytes)?;
        let chunk_pages = bytes / PAGE_SIZE;
        let tags = map_anonymous(chunk_pages * core::mem::size_of::<u32>());
        if tags.is_null() {
            // SAFETY: unmapping the region we just mapped and never published.
            unsafe { libc::munmap(base as *mut libc::c_void, bytes) };
            return None;
        }
        // Retire the old current chunk's never-used tail into the free set so it stays usable.
        if let Some(old) = self.current {
            let c = &self.chunks[old];
            let (bump, total) = (c.bump, c.pages);
            if bump < total {
                self.chunks[old].bump = total;
                self.insert_free(old, bump, total - bump);
            }
        }
        let index = self.chunks.len();
        self.chunks.push(Chunk {
            base,
            pages: chunk_pages,
            tags: tags as *mut u32,
            bump: 0,
        });
        for owner in &GRANULE_OWNER[(base >> CHUNK_SHIFT)..((base + bytes) >> CHUNK_SHIFT)] {
            owner.store(index as u16 + 1, Ordering::Release);
        }
        self.current = Some(index);
        Some(())
    }
}

fn map_anonymous(bytes: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
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

/// Maps `bytes` (a multiple of CHUNK_BYTES) aligned to CHUNK_BYTES, trimming the excess.
fn map_aligned(bytes: usize) -> Option<usize> {
    let padded = bytes.checked_add(CHUNK_BYTES)?;
    let raw = map_anonymous(padded) as usize;
    if raw == 0 {
        return None;
    }
    let base = raw.next_multiple_of(CHUNK_BYTES);
    // SAFETY: both trims are inside the mapping we just created and own.
    unsafe {
        if base > raw {
            libc::munmap(raw as *mut libc::c_void, base - raw);
        }
        let end = base + bytes;
        if raw + padded > end {
            libc::munmap(end as *mut libc::c_void, raw + padded - end);
        }
    }
    if (base + bytes) >> CHUNK_SHIFT > GRANULES {
        // SAFETY: unmapping our own mapping, outside the range the owner table covers.
        unsafe { libc::munmap(base as *mut libc::c_void, bytes) };
        return None;
    }
    Some(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The allocator state is global; these tests run serially through one lock of their own.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn big(size: usize, align: usize) -> *mut u8 {
        alloc(size, align, |_| {}).unwrap().0
    }

    /// Returns every cached dirty extent to the kernel (tests start from a known state).
    fn flush_dirty() {
        let mut state = STATE.lock();
        while !state.dirty.is_empty() {
            state.evict_largest_dirty();
        }
    }

    /// Frees, then flushes the dirty cache, for tests of coalescing.
    fn free_clean(p: *mut u8) -> Option<Extent> {
        let result = free(p, |_| {});
        flush_dirty();
        result
    }

    #[test]
    fn dirty_extents_are_reused_and_reported_as_dirty() {
        let _g = SERIAL.lock().unwrap();
        flush_dirty();
        let (p, contents) = alloc(8 * PAGE_SIZE, 8, |_| {}).unwrap();
        assert_eq!(contents, Contents::Zeroed);
        // SAFETY: p is a live 8-page object.
        unsafe { *p = 42 };
        assert!(free(p, |_| {}).is_some());
        assert!(
            free(p, |_| {}).is_none(),
            "double free of a dirty extent is refused"
        );
        let (q, contents) = alloc(6 * PAGE_SIZE, 8, |_| {}).unwrap();
        assert_eq!(
            (q, contents),
            (p, Contents::Dirty),
            "reused, and says it is not zeroed"
        );
        // The leftover 2 pages stay dirty and serve a 2-page request.
        let (r, contents) = alloc(2 * PAGE_SIZE, 8, |_| {}).unwrap();
        assert_eq!(contents, Contents::Dirty);
        assert_eq!(r as usize, p as usize + 6 * PAGE_SIZE);
        assert!(free_clean(q).is_some());
        assert!(free_clean(r).is_some());
        assert_eq!(STATE.lock().dirty_bytes, 0);
    }

    #[test]
    fn dirty_neighbours_merge() {
        let _g = SERIAL.lock().unwrap();
        flush_dirty();
        let a = big(2 * PAGE_SIZE, 8);
        let b = big(3 * PAGE_SIZE, 8);
        let guard = big(PAGE_SIZE, 8);
        assert!(free(a, |_| {}).is_some());
        assert!(free(b, |_| {}).is_some());
        // a and b merged: a 5-page request is served from them, dirty.
        let (c, contents) = alloc(5 * PAGE_SIZE, 8, |_| {}).unwrap();
        assert_eq!((c, contents), (a, Contents::Dirty));
        assert!(free_clean(c).is_some());
        assert!(free_clean(guard).is_some());
    }

    #[test]
    fn a_full_dirty_cache_evicts_rather_than_refuses() {
        let _g = SERIAL.lock().unwrap();
        let big = DIRTY_MAX_EXTENT_BYTES;
        let blocks: Vec<*mut u8> = (0..DIRTY_BUDGET_BYTES / big + 2)
            .map(|_| alloc(big, 8, |_| {}).unwrap().0)
            .collect();
        for &b in &blocks {
            assert!(free(b, |_| {}).is_some());
            assert!(STATE.lock().dirty_bytes <= DIRTY_BUDGET_BYTES);
        }
        // The most recent free is cached (reused, dirty), not returned to the kernel.
        let (p, contents) = alloc(PAGE_SIZE, 8, |_| {}).unwrap();
        assert_eq!(contents, Contents::Dirty);
        assert!(free_clean(p).is_some());
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
    }

    #[test]
    fn aligned_and_interior_pointers() {
        let _g = SERIAL.lock().unwrap();
        let p = big(PAGE_SIZE, 64 * 1024);
        assert_eq!(p as usize % (64 * 1024), 0);
        assert!(free_clean(p.wrapping_add(PAGE_SIZE)).is_none());
        let mut seen = 0;
        for_each_live(
            |e| {
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
    fn huge_objects_get_their_own_chunk() {
        let _g = SERIAL.lock().unwrap();
        let p = big(CHUNK_BYTES + PAGE_SIZE, 8);
        assert!(!p.is_null());
        assert_eq!(extent_of(p).unwrap().len, CHUNK_BYTES + PAGE_SIZE);
        assert!(free(p, |_| {}).is_some());
        assert!(alloc(usize::MAX - 10, 8, |_| {}).is_none());
    }
}
