//! Whether mimalloc owns a pointer, in a few instructions.
//!
//! `free` must not give mimalloc a pointer it does not own (memory the dynamic loader allocated
//! before we were interposed, say). `mi_is_in_heap_region` answers, but by walking mimalloc's
//! arena table, a comparison per arena, on every free: 5 % of xthreads' instructions with two
//! arenas, and a heap of many GiB has dozens of arenas (ours start at 64 MiB, see
//! `ARENA_RESERVE_KIB`). mimalloc v2 takes its memory from arenas aligned to and sized in whole
//! 32 MiB segments (`MI_SEGMENT_SIZE`), and does not return them while the process runs. So a
//! bitmap with a bit per 32 MiB of address space, set for each arena once seen, answers
//! exactly. A pointer outside the map asks mimalloc, and if mimalloc owns it maps the arenas
//! reserved since: only foreign pointers, and segments mimalloc took from the OS outside any
//! arena (which the map must not hold: they are returned), keep taking the slow way.

use core::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// log2 of mimalloc v2's segment size, which arenas are aligned to and sized in.
const SEGMENT_SHIFT: u32 = 25;
/// User address space on x86_64/aarch64 with 4-level page tables is 47 bits.
const ADDRESS_BITS: u32 = 47;
const SEGMENTS: usize = 1 << (ADDRESS_BITS - SEGMENT_SHIFT);

/// A bit per segment that lies in a mimalloc arena (512 KiB of zero pages, a few touched).
static IN_ARENA: [AtomicU64; SEGMENTS / 64] = [const { AtomicU64::new(0) }; SEGMENTS / 64];
/// Arenas (ids 1, 2, ...) whose segments are in `IN_ARENA`.
static MAPPED: AtomicI32 = AtomicI32::new(0);

extern "C" {
    /// mimalloc: the start and size of arena `arena_id` (1-based), or NULL past the last one.
    /// Only atomic loads: safe from any context.
    fn mi_arena_area(arena_id: i32, size: *mut usize) -> *mut libc::c_void;
    /// mimalloc: initialises the process (once) and the calling thread's heap, without
    /// allocating a segment.
    fn mi_thread_init();
    /// mimalloc: reserves an arena of `size` bytes (0, or an errno), its id in `arena_id`.
    fn mi_reserve_os_memory_ex(
        size: usize,
        commit: bool,
        allow_large: bool,
        exclusive: bool,
        arena_id: *mut i32,
    ) -> libc::c_int;
}

/// The start and size of mimalloc's arena `id` (1, 2, ...), or None past the last one reserved
/// (or one being added right now). Safe from any context, the allocator's included.
pub fn arena(id: i32) -> Option<(usize, usize)> {
    let mut size = 0usize;
    // SAFETY: mi_arena_area reads mimalloc's arena table with atomic loads.
    let start = unsafe { mi_arena_area(id, &mut size) } as usize;
    (start != 0 && size != 0).then_some((start, size))
}

/// Whether `ptr` points into memory mimalloc allocated.
#[inline]
pub fn owned_by_mimalloc(ptr: *const libc::c_void) -> bool {
    let segment = ptr as usize >> SEGMENT_SHIFT;
    if let Some(word) = IN_ARENA.get(segment / 64) {
        if word.load(Ordering::Relaxed) & (1 << (segment % 64)) != 0 {
            return true;
        }
    }
    owned_slow(ptr)
}

#[cold]
#[inline(never)]
fn owned_slow(ptr: *const libc::c_void) -> bool {
    // SAFETY: a lookup in mimalloc's own tables; safe for any pointer value.
    let owned = unsafe { libmimalloc_sys::mi_is_in_heap_region(ptr) };
    if owned {
        map_new_arenas();
    }
    owned
}

/// Keeps mimalloc's first arena off transparent huge pages, as the chunks' first 2 MiB and the
/// side tables are (`large/`): under `transparent_hugepage=always` the first touch of each
/// 2 MiB of it makes 2 MiB resident, so a process with a few KiB of small objects (a shell, an
/// MPI helper, `sleep`) held 2-4 MiB there, in the fast tier, where first touch puts it. Later
/// arenas (a program with more than the first arena's 64 MiB of small objects, which fills its
/// huge pages) keep the system's setting.
///
/// Called once, from the library's constructor: if mimalloc has no arena yet, the first is
/// reserved here (`reserve_bytes`, committed up front if `commit`), as mimalloc would at its
/// first allocation, so the advice comes before any page of it is touched.
pub fn keep_first_off_huge_pages(reserve_bytes: usize, commit: bool) {
    if arena(1).is_none() && reserve_bytes > 0 {
        let mut id = 0;
        // SAFETY: mimalloc must be initialised to reserve (its random state picks the
        // address); then it reserves and registers a new arena; `id` outlives the call. A
        // failure leaves mimalloc to reserve at its first allocation, without the advice.
        unsafe {
            mi_thread_init();
            mi_reserve_os_memory_ex(reserve_bytes, commit, false, false, &mut id);
        }
    }
    if let Some((start, size)) = arena(1) {
        crate::large::keep_off_huge_pages(start, size);
    }
}

/// Sets the bits of the arenas reserved since the last call. Idempotent: threads that race
/// here set the same bits.
fn map_new_arenas() {
    let mut mapped = MAPPED.load(Ordering::Acquire);
    while let Some((start, size)) = arena(mapped + 1) {
        debug_assert_eq!(
            start % (1 << SEGMENT_SHIFT),
            0,
            "mimalloc arenas are segment-aligned"
        );
        let (first, end) = (start >> SEGMENT_SHIFT, (start + size) >> SEGMENT_SHIFT);
        for segment in first..end.min(SEGMENTS) {
            IN_ARENA[segment / 64].fetch_or(1 << (segment % 64), Ordering::Relaxed);
        }
        mapped += 1;
    }
    MAPPED.fetch_max(mapped, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mimalloc_pointers_are_owned_and_others_not() {
        // SAFETY: plain mimalloc allocations, freed below.
        let blocks: Vec<*mut libc::c_void> = (0..1000)
            .map(|i| unsafe { libmimalloc_sys::mi_malloc(16 + i % 2000) })
            .collect();
        for &b in &blocks {
            assert!(owned_by_mimalloc(b));
        }
        // Now from the map, without asking mimalloc.
        assert!(MAPPED.load(Ordering::Relaxed) >= 1);
        for &b in &blocks {
            let segment = b as usize >> SEGMENT_SHIFT;
            assert_ne!(
                IN_ARENA[segment / 64].load(Ordering::Relaxed) & (1 << (segment % 64)),
                0
            );
            // SAFETY: allocated above.
            unsafe { libmimalloc_sys::mi_free(b) };
        }
        let stack = 0u64;
        assert!(!owned_by_mimalloc(
            &stack as *const u64 as *const libc::c_void
        ));
        // SAFETY: a private mapping nobody allocated from, unmapped below.
        let foreign = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                1 << 16,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(!owned_by_mimalloc(foreign));
        // SAFETY: mapped above.
        unsafe { libc::munmap(foreign, 1 << 16) };
        assert!(!owned_by_mimalloc(core::ptr::null()));
        assert!(!owned_by_mimalloc(usize::MAX as *const libc::c_void));
    }
}
