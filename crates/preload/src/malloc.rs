//! The malloc family's implementation: where each object goes (mimalloc, or pages of its own
//! and a report to the daemon), freeing, resizing in place or by moving, alignment. The
//! exported symbols (`exports.rs`) and the C API (`api.rs`) call in here.

use crate::*;
use core::cell::Cell;
use core::ffi::c_void;
use libmimalloc_sys as mi;
use objtier_wire::{event_flags, EventKind, PAGE_SIZE};

thread_local! {
    /// Set while this thread runs objtier's own code that may allocate (unwinding, attaching).
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    /// Objects of short-lived sites this thread has allocated, to report one in
    /// `SHORT_LIVED_SAMPLE` of them.
    static SHORT_LIVED_SEEN: Cell<u32> = const { Cell::new(0) };
}

/// Objects of more than this many bytes are reported even from a site the daemon found
/// short-lived: few programs make them fast enough for their reports to cost much, and a large
/// object is the one whose tier matters most if the daemon was wrong about its site.
pub(crate) const SHORT_LIVED_MAX_BYTES: usize = 1 << 20;

/// Whether this thread should report this object of a short-lived site: one in
/// `SHORT_LIVED_SAMPLE`, so that the daemon still sees how long the site's objects live.
#[inline]
pub(crate) fn sample_short_lived() -> bool {
    SHORT_LIVED_SEEN
        .try_with(|seen| {
            let n = seen.get().wrapping_add(1);
            seen.set(n);
            n % objtier_wire::SHORT_LIVED_SAMPLE == 0
        })
        .unwrap_or(true)
}

/// Marks this thread as inside objtier until dropped; None if it already was (re-entry).
pub(crate) struct HookGuard;

impl HookGuard {
    #[inline]
    pub(crate) fn enter() -> Option<HookGuard> {
        IN_HOOK
            .try_with(|flag| (!flag.replace(true)).then_some(HookGuard))
            .ok()
            .flatten()
    }
}

impl Drop for HookGuard {
    fn drop(&mut self) {
        let _ = IN_HOOK.try_with(|flag| flag.set(false));
    }
}

/// Alignment of `malloc`: what C requires for any object that fits the size (mimalloc gives
/// 16 bytes from 16-byte blocks up, 8 for the 8-byte class, as C allows).
pub(crate) const MIN_ALIGN: usize = 8;

/// True if a plain mimalloc block of `size` bytes is already aligned to `align`.
#[inline]
pub(crate) fn plain_block_suffices(size: usize, align: usize) -> bool {
    align <= MIN_ALIGN || (align <= 16 && size >= 16)
}

#[inline]
pub(crate) fn set_errno(value: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { crate::os::set_errno(value) };
}

/// Allocates `size` bytes aligned to `align` (a power of two): tracked pages or mimalloc.
#[inline]
pub(crate) unsafe fn allocate(size: usize, align: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { allocate_from(size, align, site::Caller::UNKNOWN) }
}

/// `allocate`, for a call from `caller` (which keys the allocation-site cache).
#[inline]
pub(crate) unsafe fn allocate_from(size: usize, align: usize, caller: site::Caller) -> *mut c_void {
    let tracked = options::get().tracks(size);
    let p = match tracked.then(|| allocate_tracked(size, align, caller)) {
        Some(Some((p, _))) => p as *mut c_void,
        // A huge object's own chunk refused: the program's ENOMEM, as glibc's would be.
        Some(None) if !large::fits_a_chunk(size, align.max(PAGE_SIZE)) => core::ptr::null_mut(),
        // Small, or tracked pages refused (no address space for a chunk under `ulimit -v`):
        // mimalloc's, untracked, as glibc would have served it.
        // SAFETY: plain mimalloc allocation.
        _ if plain_block_suffices(size, align) => unsafe { mi::mi_malloc(size) },
        // SAFETY: align is a power of two (checked by callers).
        _ => unsafe { mi::mi_malloc_aligned(size, align) },
    };
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p
}

#[cold]
pub(crate) fn allocate_tracked(
    size: usize,
    align: usize,
    caller: site::Caller,
) -> Option<(*mut u8, large::Contents)> {
    let guard = HookGuard::enter();
    let now = report::now_ns();
    if guard.is_some() {
        // Before the allocation, so that the first tracked object of a process (which is what
        // triggers the lazy attach) already gets its site and placement.
        report::tick(now);
    }
    let depth = options::get().site_depth;
    let control = report::control();
    // The frames of an unwind, kept for describing a new site; made (512 bytes zeroed) only
    // when there is an unwind, not on every tracked allocation.
    let mut frames: Option<site::Frames> = None;
    // The site: from the cache when this caller (return address and stack pointer) was seen
    // before, else by unwinding (about a microsecond for 16 frames), remembered for next time.
    let site = if guard.is_some() && depth > 0 && control.is_some() {
        site::cached(caller).unwrap_or_else(|| {
            let site = site::capture(depth, frames.insert(site::Frames::new()));
            site::remember(caller, site);
            site
        })
    } else {
        0
    };
    let advice = control.map_or_else(Default::default, |c| c.site_advice(site));
    // The daemon found that this site's objects die before it could ever tier them: they are
    // allocated as any other, but only one in SHORT_LIVED_SAMPLE is reported (to show the
    // daemon if that changes), and the others' frees are not reported either.
    let (report, flags) = if advice.short_lived && size <= SHORT_LIVED_MAX_BYTES {
        (sample_short_lived(), event_flags::SAMPLED)
    } else {
        (true, 0)
    };
    let placed = control.map_or(Placed::NOWHERE, |c| place(c, site, advice, size));
    let allocated = large::alloc(
        size,
        align.max(PAGE_SIZE),
        placed.nodes,
        site,
        placed.kept,
        now,
        |extent| {
            if report {
                report::push_alloc(extent, now, site, flags)
            } else {
                report::UNREPORTED
            }
        },
    );
    if let (Some((p, contents)), Some(tail)) = (allocated, placed.tail) {
        spill_tail(p, size, contents, placed.kept, tail);
    }
    // A program that allocates but no longer frees returns its idle cached memory too.
    large::purge_if_due(now);
    if guard.is_some() && site != 0 && site::first_sighting(site) {
        let frames = frames.get_or_insert_with(|| {
            // A cache hit: unwind once more, for the frames.
            let mut frames = site::Frames::new();
            site::capture(depth, &mut frames);
            frames
        });
        report::describe_site(site, frames);
    }
    allocated
}

/// Where a new tracked object goes: the NUMA nodes of its chunk (0: first touch), what its
/// placement budget charged it ([`budget::Charge::kept`], with [`large::KEPT_REBOUND`] when its
/// tail goes one tier down), and those lower nodes.
#[derive(Clone, Copy)]
pub(crate) struct Placed {
    nodes: u64,
    kept: u64,
    tail: Option<u64>,
}

impl Placed {
    const NOWHERE: Placed = Placed {
        nodes: 0,
        kept: 0,
        tail: None,
    };
}

/// The daemon's word on a new object of `site` (`advice`), `size` bytes: its site's tier, or a
/// placement's fallback tier for a site it did not place; within the site's budget there, or
/// one tier down beyond it, or split across the two for the object that crosses the budget.
pub(crate) fn place(
    control: &objtier_wire::Control,
    site: u64,
    advice: objtier_wire::SiteAdvice,
    size: usize,
) -> Placed {
    let Some(tier) = advice.tier.or_else(|| control.default_tier()) else {
        return Placed::NOWHERE;
    };
    let Some(nodes) = control.tier_nodes(tier) else {
        return Placed::NOWHERE;
    };
    let lower = control.tier_nodes(tier + 1);
    let slot = control.site_slot(site);
    let (Some(lower), Some(slot), true) = (
        lower,
        slot,
        advice.tier.is_some() && advice.budget_pages > 0,
    ) else {
        return Placed {
            nodes,
            kept: 0,
            tail: None,
        };
    };
    let pages = size.div_ceil(PAGE_SIZE);
    let charge = budget::charge(slot, advice.budget_pages, pages);
    match charge.head_pages {
        0 => Placed {
            nodes: lower,
            kept: 0,
            tail: None,
        },
        head if head >= pages => Placed {
            nodes,
            kept: charge.kept,
            tail: None,
        },
        _ => Placed {
            nodes,
            kept: charge.kept | large::KEPT_REBOUND,
            tail: Some(lower),
        },
    }
}

/// Binds the pages of a new object past what its budget charged (`kept`'s head) one tier down
/// (`tail`): it crossed its site's budget. Pages of a reused extent that are resident already
/// are dropped first, so that they fault in where the binding says.
pub(crate) fn spill_tail(p: *mut u8, size: usize, contents: large::Contents, kept: u64, tail: u64) {
    let head = (kept & 0xffff_ffff) as usize * PAGE_SIZE;
    let len = size.next_multiple_of(PAGE_SIZE);
    if head >= len {
        return;
    }
    let start = p as usize + head;
    if contents == large::Contents::Dirty {
        // SAFETY: the tail is the new object's own pages, not yet handed out.
        unsafe { crate::os::madvise(start as *mut c_void, len - head, libc::MADV_DONTNEED) };
    }
    large::bind_preferred(start, len - head, tail);
}

#[inline]
pub(crate) unsafe fn release(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    if large::contains(ptr as *const u8) {
        let now = report::now_ns();
        large::free(ptr as *mut u8, now, |extent, freed| {
            report::push_free(extent, freed.event, now);
            budget::refund(freed.kept);
        });
    } else if owned_by_mimalloc(ptr) {
        // SAFETY: mimalloc owns it.
        unsafe { mi::mi_free(ptr) }
    }
    // Anything else was not allocated by us (e.g. by the dynamic loader before we were
    // interposed): leaking it is the only safe answer.
}

/// Usable bytes of a block we own; 0 for pointers we do not know.
#[inline]
pub(crate) unsafe fn usable_size(ptr: *const c_void) -> usize {
    if ptr.is_null() {
        0
    } else if large::contains(ptr as *const u8) {
        large::extent_of(ptr as *const u8).map_or(0, |e| e.len)
    } else if owned_by_mimalloc(ptr) {
        // SAFETY: mimalloc owns it.
        unsafe { mi::mi_usable_size(ptr) }
    } else {
        0
    }
}

pub(crate) unsafe fn reallocate(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded.
    unsafe { reallocate_from(ptr, size, site::Caller::UNKNOWN) }
}

pub(crate) unsafe fn reallocate_from(
    ptr: *mut c_void,
    size: usize,
    caller: site::Caller,
) -> *mut c_void {
    if ptr.is_null() {
        // SAFETY: plain allocation.
        return unsafe { allocate_from(size, MIN_ALIGN, caller) };
    }
    if size == 0 {
        // glibc frees and returns NULL for realloc(p, 0).
        // SAFETY: ptr is a live block (caller contract).
        unsafe { release(ptr) };
        return core::ptr::null_mut();
    }
    let options = options::get();
    let is_large = large::contains(ptr as *const u8);
    if !is_large && !options.tracks(size) && owned_by_mimalloc(ptr) {
        // SAFETY: small stays small: mimalloc's realloc keeps the contents.
        let p = unsafe { mi::mi_realloc(ptr, size) };
        if p.is_null() {
            set_errno(libc::ENOMEM);
        }
        return p;
    }
    // SAFETY: ptr is a live block (caller contract).
    let old = unsafe { usable_size(ptr) };
    if is_large && size <= old && size > old / 2 && size >= options.track_min_bytes {
        return ptr; // fits in the pages it already has
    }
    if is_large && size > old {
        // Grow into the free pages that follow, if there are enough: no copy, and the pages
        // already there stay where the daemon put them.
        let now = report::now_ns();
        let grown = large::grow_in_place(ptr as *mut u8, size, now, |before, after| {
            report::push(EventKind::Moved, 0, after, now, before.addr as u64);
        });
        if grown {
            return ptr;
        }
    }
    if is_large && old > 0 && options.tracks(size) {
        // SAFETY: ptr is a live tracked object of `old` usable bytes (caller contract).
        return unsafe { move_tracked(ptr, old, size) };
    }
    if old == 0 {
        // A pointer we did not allocate; we cannot know its size. Copy what is certainly
        // readable (up to the end of its page) rather than lose or overread data.
        set_errno(libc::ENOMEM);
        let readable = PAGE_SIZE - (ptr as usize % PAGE_SIZE);
        // SAFETY: fresh allocation, then a copy bounded by both sizes.
        unsafe {
            let p = allocate_from(size, MIN_ALIGN, caller);
            if !p.is_null() {
                core::ptr::copy_nonoverlapping(ptr as *const u8, p as *mut u8, size.min(readable));
            }
            return p;
        }
    }
    // SAFETY: move to a new block, copying the smaller of the two sizes; free the old one only
    // on success (realloc must leave the original intact on failure).
    unsafe {
        let p = allocate_from(size, MIN_ALIGN, caller);
        if p.is_null() {
            return p;
        }
        core::ptr::copy_nonoverlapping(ptr as *const u8, p as *mut u8, size.min(old));
        release(ptr);
        p
    }
}

/// Moves the tracked object at `ptr`, of `old` usable bytes, to new pages for `size` bytes, and
/// tells the daemon in one [`EventKind::Moved`] that the new object continues the old one: it
/// keeps its allocation site, its tier (below), and at the daemon its access history, so a
/// grown array is not ranked cold as a newcomer. Null (and the old object intact) when there is
/// no memory.
///
/// A growing object gets room for half again its old size when that is more than `size`, so
/// that the next growths happen in place: an array grown by fixed steps, whose following pages
/// are taken, would otherwise be copied whole at every step (glibc's `mremap` cannot serve
/// objects carved out of shared chunks), and now moves a logarithmic number of times
/// (docs/design/realloc-growth.md). The room costs address space, not memory: pages never
/// written are not resident (those taken from the cache of freed memory are dropped), the
/// daemon ranks records by resident bytes, and a free gives them back with the rest.
#[cold]
pub(crate) unsafe fn move_tracked(ptr: *mut c_void, old: usize, size: usize) -> *mut c_void {
    let now = report::now_ns();
    if let Some(_guard) = HookGuard::enter() {
        report::tick(now);
    }
    let site = large::site_of(ptr as *const u8);
    // The copy starts in the tier the object is in (where the daemon put it, or first touch),
    // not in its site's starting tier: that is a guess for new objects, and this one has a
    // history (docs/design/realloc-growth.md).
    let nodes = report::control()
        // With one tier there is nothing to choose (and no reason for chunks of a placement).
        .filter(|c| c.tier_nodes(1).is_some())
        .and_then(|c| {
            let node = api::node_of(ptr).ok()?;
            c.tier_of_node(node).and_then(|tier| c.tier_nodes(tier))
        })
        .unwrap_or(0);
    let room = extent_for_move(old, size);
    let mut extent = large::Extent { addr: 0, len: 0 };
    // No report of its own: the move below tells of it.
    let mut allocate = |bytes| {
        large::alloc(bytes, PAGE_SIZE, nodes, site, 0, now, |e| {
            extent = e;
            0
        })
    };
    let allocated = match allocate(room) {
        None if room > size => allocate(size),
        allocated => allocated,
    };
    let Some((p, contents)) = allocated else {
        set_errno(libc::ENOMEM);
        return core::ptr::null_mut();
    };
    let used = size.next_multiple_of(PAGE_SIZE);
    if contents == large::Contents::Dirty && extent.len > used {
        // SAFETY: [p + used, end of extent) is the new extent's own, not yet handed out.
        unsafe {
            crate::os::madvise(
                p.add(used) as *mut c_void,
                extent.len - used,
                libc::MADV_DONTNEED,
            )
        };
    }
    // SAFETY: both are live objects of at least the bytes copied, and distinct.
    unsafe { core::ptr::copy_nonoverlapping(ptr as *const u8, p, size.min(old)) };
    // Reported under the old object's lock, before its pages can be reused (as a free is).
    // The copy is not charged to its site's budget (it stays in the old one's tier), and the
    // old one's charge comes back.
    large::free(ptr as *mut u8, now, |from, freed| {
        report::push(EventKind::Moved, 0, extent, now, from.addr as u64);
        budget::refund(freed.kept);
    });
    large::purge_if_due(now);
    p as *mut c_void
}

/// The bytes to allocate for a tracked object of `old` usable bytes that moves to hold `size`:
/// half again its old size when it grows by less than that (see [`move_tracked`]).
pub(crate) fn extent_for_move(old: usize, size: usize) -> usize {
    match old.checked_add(old / 2) {
        Some(room) if size > old => room.max(size),
        _ => size,
    }
}

pub(crate) unsafe fn aligned(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    }
    // SAFETY: alignment validated.
    unsafe { allocate(size, align.max(MIN_ALIGN)) }
}
