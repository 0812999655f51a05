//! Allocation sites: a 64-bit hash of the call path that led to a tracked allocation.
//!
//! The paper's bkmalloc hashes up to 16 return addresses from `backtrace(3)`. glibc's
//! `backtrace` `dlopen`s libgcc_s on first use (which allocates); we call libgcc's
//! `_Unwind_Backtrace` directly instead: libgcc_s is already loaded as a dependency of this
//! library, so unwinding needs no loader work, and the recursion guard in `lib.rs` routes any
//! allocation the unwinder itself makes straight to mimalloc, untracked.
//!
//! Frames inside libobjtier.so itself are skipped, so the first frame hashed is the caller of
//! `malloc` (or `operator new`'s caller, one frame further up through libstdc++).
//!
//! Each site is described to the daemon once per attach: its frames' return addresses, which
//! the daemon turns into `module+offset` through the process's memory map (a form that matches
//! across runs despite ASLR). A fixed, lock-free set remembers which sites were described.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use objtier_wire::site_id;

#[allow(non_camel_case_types)]
type _Unwind_Trace_Fn = extern "C" fn(ctx: *mut c_void, arg: *mut c_void) -> c_int;

extern "C" {
    fn _Unwind_Backtrace(trace: _Unwind_Trace_Fn, arg: *mut c_void) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}

const URC_NO_REASON: c_int = 0;
const URC_END_OF_STACK: c_int = 5;

/// Address range of this library's code, set once by the constructor.
static SELF_START: AtomicUsize = AtomicUsize::new(0);
static SELF_END: AtomicUsize = AtomicUsize::new(0);

/// Most frames a site can have (`OBJTIER_SITE_DEPTH` is clamped to this).
pub const MAX_FRAMES: usize = 64;

/// Return addresses of one call path, innermost first.
pub struct Frames {
    pub ips: [usize; MAX_FRAMES],
    pub len: usize,
}

impl Frames {
    pub const fn new() -> Self {
        Self {
            ips: [0; MAX_FRAMES],
            len: 0,
        }
    }
}

struct Walk<'a> {
    hash: u64,
    max_frames: usize,
    frames: &'a mut Frames,
}

extern "C" fn on_frame(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Walk` passed by `capture`, alive for the whole unwind; `ctx` is the
    // unwinder's context for this frame.
    let (walk, ip) = unsafe { (&mut *(arg as *mut Walk), _Unwind_GetIP(ctx)) };
    if ip == 0 {
        return URC_END_OF_STACK;
    }
    if ip >= SELF_START.load(Ordering::Relaxed) && ip < SELF_END.load(Ordering::Relaxed) {
        return URC_NO_REASON;
    }
    walk.hash = site_id::step(walk.hash, ip as u64);
    walk.frames.ips[walk.frames.len] = ip;
    walk.frames.len += 1;
    if walk.frames.len >= walk.max_frames {
        URC_END_OF_STACK
    } else {
        URC_NO_REASON
    }
}

/// Hash of up to `max_frames` return addresses above this library, which it leaves in
/// `frames`; never 0 (0 means unknown).
#[inline(never)]
pub fn capture(max_frames: usize, frames: &mut Frames) -> u64 {
    frames.len = 0;
    let max_frames = max_frames.min(MAX_FRAMES);
    if max_frames == 0 {
        return 0;
    }
    let mut walk = Walk {
        hash: site_id::SEED,
        max_frames,
        frames,
    };
    // SAFETY: `on_frame` only touches `walk` through the pointer we pass, which outlives the call.
    unsafe { _Unwind_Backtrace(on_frame, &mut walk as *mut Walk as *mut c_void) };
    site_id::finish(walk.hash)
}

/// Records where this library's code lives so that its own frames are not hashed.
pub fn init() {
    struct Search {
        needle: usize,
        start: usize,
        end: usize,
    }
    extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info` for each object; `data` is our Search.
        unsafe {
            let search = &mut *(data as *mut Search);
            let info = &*info;
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
                    let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                    let end = start + ph.p_memsz as usize;
                    if search.needle >= start && search.needle < end {
                        search.start = start;
                        search.end = end;
                        return 1;
                    }
                }
            }
        }
        0
    }
    let mut search = Search {
        needle: capture as fn(usize, &mut Frames) -> u64 as usize,
        start: 0,
        end: 0,
    };
    // SAFETY: dl_iterate_phdr calls `visit` synchronously with our `search`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    SELF_START.store(search.start, Ordering::Relaxed);
    SELF_END.store(search.end, Ordering::Relaxed);
    find_wrappers();
}

/// Sites described to the current daemon: an insert-only open-addressing set, cleared on attach.
const DESCRIBED_SLOTS: usize = 8192;
const DESCRIBED_PROBES: usize = 16;
static DESCRIBED: [AtomicU64; DESCRIBED_SLOTS] = [const { AtomicU64::new(0) }; DESCRIBED_SLOTS];

/// Claims the description of `site`: true for exactly one caller per site (until `forget_all`).
/// False also when the set is full around the site's slot: the site goes undescribed rather
/// than being described on every allocation.
pub fn first_sighting(site: u64) -> bool {
    let start = (site ^ (site >> 29)) as usize;
    for probe in 0..DESCRIBED_PROBES {
        let slot = &DESCRIBED[(start + probe) & (DESCRIBED_SLOTS - 1)];
        // Read first: every tracked allocation asks, nearly always about a site already
        // described, and a compare-and-swap takes the line exclusive even when it fails.
        match slot.load(Ordering::Relaxed) {
            existing if existing == site => return false,
            0 => {}
            _ => continue,
        }
        match slot.compare_exchange(0, site, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(existing) if existing == site => return false,
            Err(_) => {}
        }
    }
    false
}

/// Forgets which sites were described (a new daemon knows none of them).
pub fn forget_all() {
    for slot in &DESCRIBED {
        slot.store(0, Ordering::Relaxed);
    }
}

/// Who called into the allocator: the return address into the caller and the caller's stack
/// pointer at the call, as the entry stubs in `lib.rs` read them (0, 0 when unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub ra: usize,
    pub sp: usize,
}

impl Caller {
    pub const UNKNOWN: Caller = Caller { ra: 0, sp: 0 };
}

/// The allocation-site cache: caller -> site id, direct-mapped, lock-free.
///
/// A call from the same return address with the same stack pointer is, in practice, the same
/// call path (the same loop calling the same function at the same depth), so its site id can be
/// reused instead of unwinding again. Two paths that reach one return address at the same stack
/// depth through different callers would share an id; that is most likely through a wrapper
/// every allocation passes (C++ `operator new`), so return addresses inside the C++ runtimes are
/// never cached. Entries are written by any thread; a check word detects a torn entry, which
/// then reads as a miss.
const CACHE_SLOTS: usize = 4096;

struct CacheEntry {
    key: AtomicU64,
    site: AtomicU64,
    check: AtomicU64,
}

static CACHE: [CacheEntry; CACHE_SLOTS] = [const {
    CacheEntry {
        key: AtomicU64::new(0),
        site: AtomicU64::new(0),
        check: AtomicU64::new(0),
    }
}; CACHE_SLOTS];

/// Code ranges of loaded C++ runtimes (libstdc++, libc++), whose return addresses are not cached.
static WRAPPERS: [(AtomicUsize, AtomicUsize); 4] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; 4];

fn cache_key(caller: Caller) -> Option<u64> {
    if caller.ra == 0 {
        return None;
    }
    let in_wrapper = WRAPPERS.iter().any(|(start, end)| {
        (start.load(Ordering::Relaxed)..end.load(Ordering::Relaxed)).contains(&caller.ra)
    });
    (!in_wrapper).then(|| {
        site_id::step(
            site_id::step(0x1234_5678, caller.ra as u64),
            caller.sp as u64,
        ) | 1
    })
}

/// The cache slot of `key`: its top bits. A key is a product (`site_id::step`), whose low bits
/// depend only on the low bits of what was multiplied; threads' stacks are aligned alike, so
/// their stack pointers differ only in high bits and the low bits of their keys are equal. With
/// the low bits as the index every thread calling from one place took the same slot, evicting
/// each other's entry and unwinding again (1,570 unwinds in one xthreads run, 2 with one thread).
#[inline]
fn slot_of(key: u64) -> usize {
    (key >> (64 - CACHE_SLOTS.trailing_zeros())) as usize
}

#[inline]
fn check_word(key: u64, site: u64) -> u64 {
    key ^ site.rotate_left(17)
}

/// The cached site of `caller`, if any.
#[inline]
pub fn cached(caller: Caller) -> Option<u64> {
    let key = cache_key(caller)?;
    let entry = &CACHE[slot_of(key)];
    if entry.key.load(Ordering::Acquire) != key {
        return None;
    }
    let site = entry.site.load(Ordering::Relaxed);
    (entry.check.load(Ordering::Relaxed) == check_word(key, site) && site != 0).then_some(site)
}

/// Remembers `site` as the site of `caller`.
#[inline]
pub fn remember(caller: Caller, site: u64) {
    let Some(key) = cache_key(caller) else {
        return;
    };
    let entry = &CACHE[slot_of(key)];
    entry.key.store(0, Ordering::Relaxed);
    entry.site.store(site, Ordering::Relaxed);
    entry.check.store(check_word(key, site), Ordering::Relaxed);
    entry.key.store(key, Ordering::Release);
}

/// Records where the C++ runtimes' code lives (called by `init`; runtimes loaded later by
/// `dlopen` are not seen, and their callers are cached like any other).
fn find_wrappers() {
    struct Found {
        count: usize,
    }
    extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info`; `data` is our Found.
        unsafe {
            let found = &mut *(data as *mut Found);
            let info = &*info;
            if info.dlpi_name.is_null() {
                return 0;
            }
            let name = core::ffi::CStr::from_ptr(info.dlpi_name).to_bytes();
            let is_runtime = name.windows(9).any(|w| w == b"libstdc++")
                || name.windows(7).any(|w| w == b"libc++.");
            if !is_runtime {
                return 0;
            }
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 && found.count < 4 {
                    let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                    WRAPPERS[found.count].0.store(start, Ordering::Relaxed);
                    WRAPPERS[found.count]
                        .1
                        .store(start + ph.p_memsz as usize, Ordering::Relaxed);
                    found.count += 1;
                }
            }
        }
        0
    }
    let mut found = Found { count: 0 };
    // SAFETY: dl_iterate_phdr calls `visit` synchronously with our `found`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut found as *mut Found as *mut c_void) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_answers_per_caller() {
        let a = Caller {
            ra: 0x40_1000,
            sp: 0x7ff0_0000,
        };
        let deeper = Caller {
            sp: 0x7fef_ff00,
            ..a
        };
        assert_eq!(cached(a), None);
        remember(a, 42);
        assert_eq!(cached(a), Some(42));
        assert_eq!(cached(deeper), None, "another stack depth is another path");
        remember(Caller::UNKNOWN, 5);
        assert_eq!(
            cached(Caller::UNKNOWN),
            None,
            "unknown callers are never cached"
        );
    }

    #[test]
    fn threads_calling_from_one_place_get_slots_of_their_own() {
        // Thread stacks 8 MiB apart, at the same offset in each: the same low bits.
        let slots: std::collections::HashSet<usize> = (0..64u64)
            .map(|thread| {
                let caller = Caller {
                    ra: 0x5555_5555_55c7,
                    sp: (0x7fff_f000_0000 - thread * (8 << 20) - 0x1a0) as usize,
                };
                slot_of(cache_key(caller).unwrap())
            })
            .collect();
        assert!(slots.len() >= 60, "64 threads share {} slots", slots.len());
    }

    #[test]
    fn a_site_is_described_once_until_forgotten() {
        let site = 0xfeed_0000_0000_0001;
        assert!(first_sighting(site));
        assert!(!first_sighting(site));
        forget_all();
        assert!(first_sighting(site));
    }

    #[test]
    fn capture_hashes_the_call_path() {
        let mut frames = Frames::new();
        let here = capture(16, &mut frames);
        assert_ne!(here, 0);
        assert!(frames.len > 0 && frames.len <= 16);
        // The daemon recomputes ids from frames (warm start): the same frames, the same id.
        let ips: Vec<u64> = frames.ips[..frames.len]
            .iter()
            .map(|&ip| ip as u64)
            .collect();
        assert_eq!(site_id::of(&ips), here);
        let mut shallow = Frames::new();
        assert_eq!(capture(0, &mut shallow), 0);
        assert_eq!(shallow.len, 0);
    }
}
