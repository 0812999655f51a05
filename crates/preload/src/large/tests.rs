//! The large-object allocator in-process: quick lists, eviction, purges, growth in place.

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
    let (r, contents) = alloc(3 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
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
    let (p, contents) = alloc(12 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
    assert_eq!(contents, Contents::Zeroed);
    // SAFETY: p is a live 8-page object.
    unsafe { *p = 42 };
    assert!(free(p, crate::report::now_ns(), |_, _| {}).is_some());
    assert!(
        free(p, crate::report::now_ns(), |_, _| {}).is_none(),
        "double free of a dirty extent is refused"
    );
    let (q, contents) = alloc(10 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
    assert_eq!(
        (q, contents),
        (p, Contents::Dirty),
        "reused, and says it is not zeroed"
    );
    // (Sizes beyond the quick lists': this is the dirty index.) The leftover 2 pages stay dirty and serve a 2-page request.
    let (r, contents) = alloc(2 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
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
    let (c, contents) = alloc(21 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
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
    let (q, contents) = alloc(6 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
    assert_eq!(
        (q, contents),
        (p, Contents::Dirty),
        "the head is still cached"
    );
    let (r, contents) = alloc(2 * PAGE_SIZE, 8, 0, 0, 0, crate::report::now_ns(), |_| 0).unwrap();
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
