//! The wire format shared by `libobjtier.so` (the producer) and the objtier daemon (the consumer).
//!
//! Two channels connect a process to the daemon:
//!
//! 1. **A Unix stream socket**, used once per attach: the library connects, sends a fixed-size
//!    [`Hello`] and, as `SCM_RIGHTS` ancillary data, a memfd holding the event ring. The daemon
//!    authenticates the peer with `SO_PEERCRED` (the pid in the hello is only a hint; the kernel's
//!    word wins). The socket then stays open for the life of the process: its hang-up is how the
//!    daemon learns the process is gone, and how the library learns the daemon is gone. After the
//!    hello the library writes only single doorbell bytes ([`RingHeader::doorbell_due`]): each
//!    asks the daemon to drain the ring now, so that the daemon can sleep while the ring is
//!    quiet instead of polling it. The daemon reads and discards them. The same
//!    socket path serves control clients (`objtier status`), which open with [`CONTROL_MAGIC`]
//!    and speak JSON lines.
//! 2. **A shared-memory ring** ([`RingHeader`] followed by `capacity` [`Slot`]s): a bounded
//!    multi-producer, single-consumer queue in the style of Vyukov's bounded MPMC queue. Producers
//!    (application threads) never block: a full ring drops the event and counts it in
//!    [`RingHeader::dropped`]; the daemon then asks for a resync (every live object re-announced,
//!    range by range, between [`EventKind::ResyncBegin`] and [`EventKind::ResyncEnd`]), so a lost
//!    event costs precision for a while, never correctness. A producer may take back an event
//!    the daemon has not consumed yet ([`RingHeader::cancel`]): an object freed while its
//!    allocation still waits in the ring is never heard of, and its free is not sent. The
//!    daemon would have dropped it anyway (an object that dies within an interval never becomes
//!    a record), after reading both events. Zeroed memory is an empty ring: the memfd's pages
//!    are only touched as events fill them.
//! 3. **A control area** ([`Control`]) in the same memfd, after the ring, page-aligned: the way
//!    back, written by the daemon and read lock-free by the library: which NUMA nodes make up
//!    each tier, which tier new objects of a given allocation site should start in (a small
//!    open-addressing table, one writer, readers never wait), and resync requests.
//!
//! Everything here is `#[repr(C)]`, fixed-width and versioned; layout is pinned by compile-time
//! assertions so that a library and a daemon from different builds either agree byte for byte or
//! refuse each other with a clear error. The daemon treats the ring as untrusted input: a process
//! can scribble anything into its own shared memory, and [`RingHeader::validate`] plus per-event
//! checks keep that from hurting anyone but the scribbler. The daemon keeps the capacity it
//! validated and passes it to the `*_with` accessors: the header's field may change later.

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod emulate;

use core::mem::{align_of, size_of};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// First eight bytes of a ring and of a [`Hello`]: "OBJTIER1" little-endian.
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"OBJTIER1");
/// First eight bytes a control client sends: "OBJTCTL1".
pub const CONTROL_MAGIC: u64 = u64::from_le_bytes(*b"OBJTCTL1");
/// Bumped on any incompatible change to the ring, the slots or the hello.
pub const WIRE_VERSION: u32 = 4;
/// Page size the wire format assumes for page-granular objects (x86_64, aarch64 4K kernels).
pub const PAGE_SIZE: usize = 4096;
/// Default number of slots in a ring (48 B each: 3 MiB of shared memory, touched as events
/// fill it).
pub const DEFAULT_RING_CAPACITY: u32 = 1 << 16;
/// Largest ring a daemon accepts (guards against a process asking it to map something silly).
pub const MAX_RING_CAPACITY: u32 = 1 << 22;

/// What happened to an object.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A tracked object now occupies `[addr, addr + len)`, page-aligned.
    Alloc = 1,
    /// The tracked object starting at `addr` was freed.
    Free = 2,
    /// A block of small-object memory (allocator segment) now occupies `[addr, addr + len)`.
    BlockMap = 3,
    /// The small-object block starting at `addr` was returned to the OS.
    BlockUnmap = 4,
    /// Describes one frame of a new allocation site, once per site: `site`, `addr` = the
    /// frame's return address, `len` = `frame index << 32 | frame count`. The daemon turns
    /// addresses into `module+offset` with the process's memory map.
    SiteFrame = 5,
    /// The program set its priority (`objtier_set_priority`): `addr` = the priority as `i64`.
    Priority = 6,
    /// The program advised on `[addr, addr + len)` (`objtier_advise`): `flags` = [`advice`] bits.
    Advise = 7,
    /// One step of a resync: every live object whose start is in `[addr, end)` follows (with
    /// [`event_flags::SNAPSHOT`]), where `end` is the `addr` of the matching
    /// [`EventKind::ResyncEnd`]; `len` = the [`Control::resync_request`] being served. The
    /// library is done with a request when it stores it in [`Control::resync_served`].
    ResyncBegin = 8,
    /// Ends a resync step: `addr` = the end of the range it covered, `len` as in its Begin.
    ResyncEnd = 9,
    /// `realloc` moved or resized a tracked object: it now occupies `[addr, addr + len)`, and
    /// continues the object that started at `site` (the same start when it grew in place), which
    /// is gone. The daemon carries the object's history over, so a grown array keeps its rank
    /// instead of starting cold as a new object would.
    Moved = 10,
    /// The program entered phase `addr` (`objtier_phase`): with per-phase guidance the daemon
    /// moves each arena to its tier for that phase.
    Phase = 11,
}

impl EventKind {
    /// Decodes a kind read from untrusted shared memory.
    pub fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            1 => Some(Self::Alloc),
            2 => Some(Self::Free),
            3 => Some(Self::BlockMap),
            4 => Some(Self::BlockUnmap),
            5 => Some(Self::SiteFrame),
            6 => Some(Self::Priority),
            7 => Some(Self::Advise),
            8 => Some(Self::ResyncBegin),
            9 => Some(Self::ResyncEnd),
            10 => Some(Self::Moved),
            11 => Some(Self::Phase),
            _ => None,
        }
    }
}

/// Allocation-site ids: a hash of a call path's return addresses, innermost first, never 0 (0
/// means unknown). The library computes it while it unwinds; the daemon computes it again from a
/// call path remembered from an earlier run (warm start), once that path's modules are mapped,
/// so that it can place the site before the library first describes it. Both sides must agree
/// bit for bit, so both use these functions.
pub mod site_id {
    /// The hash of an empty call path, before [`finish`].
    pub const SEED: u64 = 0x243F_6A88_85A3_08D3;

    /// Folds one return address into the hash.
    #[inline]
    pub const fn step(hash: u64, ip: u64) -> u64 {
        (hash.rotate_left(23) ^ ip).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }

    /// The site id of a hash after its last [`step`].
    #[inline]
    pub const fn finish(hash: u64) -> u64 {
        let h = hash ^ (hash >> 29);
        if h == 0 {
            1
        } else {
            h
        }
    }

    /// The site id of a whole call path.
    pub fn of(ips: &[u64]) -> u64 {
        finish(ips.iter().fold(SEED, |h, &ip| step(h, ip)))
    }
}

/// Flags carried by an [`Event`].
pub mod event_flags {
    /// The event re-announces an object that was live before the ring was attached (a snapshot
    /// sent at attach time, after a fork or a daemon restart), not a fresh allocation.
    pub const SNAPSHOT: u32 = 1 << 0;
    /// The object is of a site the daemon found short-lived
    /// ([`crate::SiteAdvice::short_lived`]): the library reports one in
    /// [`crate::SHORT_LIVED_SAMPLE`] of its objects, and this is one of them.
    pub const SAMPLED: u32 = 1 << 1;
}

/// Of the new objects of a short-lived site, the library reports one in this many (the others
/// it allocates unreported): enough for the daemon to see that the site has changed, when one
/// of them lives on.
pub const SHORT_LIVED_SAMPLE: u32 = 64;

/// Advice a program gives about its memory with `objtier_advise` (bits of an [`EventKind::Advise`]
/// event's `flags`), in the spirit of the hints in Soft2LM's application-guided interface. The
/// same values are spelled `OBJTIER_ADVICE_*` in `include/objtier.h`. 0 clears earlier advice.
pub mod advice {
    /// Keep in the fastest tier if its budget allows.
    pub const PREFER_FAST: u32 = 1 << 0;
    /// Keep in the fastest tier, ahead of every unadvised object.
    pub const REQUIRE_FAST: u32 = 1 << 1;
    /// Keep out of the fast tiers unless there is room to spare.
    pub const PREFER_SLOW: u32 = 1 << 2;
    /// Keep in the slowest tier.
    pub const REQUIRE_SLOW: u32 = 1 << 3;
    /// Will be accessed often: rank as hot before samples show it.
    pub const HOT: u32 = 1 << 4;
    /// Will be accessed rarely: rank as cold before samples show it.
    pub const COLD: u32 = 1 << 5;
    /// Mostly read (migration is cheap to redo: no dirty data to copy twice).
    pub const READ_MOSTLY: u32 = 1 << 6;
    /// Mostly written.
    pub const WRITE_MOSTLY: u32 = 1 << 7;
    /// Short-lived scratch memory: not worth migrating.
    pub const SCRATCH: u32 = 1 << 8;
    /// Latency-sensitive: treated like PREFER_FAST.
    pub const LATENCY_SENSITIVE: u32 = 1 << 9;
    /// Every bit above; anything else in an event is refused.
    pub const ALL: u32 = (1 << 10) - 1;
}

/// One allocation or free, as the library reports it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// An [`EventKind`] as `u32`.
    pub kind: u32,
    /// [`event_flags`].
    pub flags: u32,
    /// Start address of the object (page-aligned for tracked objects).
    pub addr: u64,
    /// Length in bytes of the memory the object occupies (a whole number of pages); 0 for frees.
    pub len: u64,
    /// `CLOCK_MONOTONIC` time of the event, in nanoseconds.
    pub time_ns: u64,
    /// Allocation-site id (hash of the call path); 0 when unknown. For [`EventKind::Moved`], the
    /// start of the object moved from.
    pub site: u64,
}

/// A ring slot: the sequence number that synchronises producer and consumer, then the event.
#[repr(C)]
pub struct Slot {
    /// The slot's sequence number less its index in the ring (so that zeroed memory is an empty
    /// ring): `pos` when free for the producer at position `pos`, `pos + 1` once published,
    /// and that with [`CANCELLED`] set once the producer took it back.
    pub seq: AtomicU64,
    pub event: core::cell::UnsafeCell<Event>,
}

/// Set in a published slot's sequence number when its producer took the event back
/// ([`RingHeader::cancel`]); positions never reach it.
pub const CANCELLED: u64 = 1 << 63;

/// Header at offset 0 of the shared memory. Producer and consumer cursors sit on separate cache
/// lines so that application threads and the daemon do not false-share.
#[repr(C, align(64))]
pub struct RingHeader {
    pub magic: u64,
    pub version: u32,
    /// `size_of::<RingHeader>()` as the producer saw it.
    pub header_size: u32,
    /// `size_of::<Slot>()` as the producer saw it.
    pub slot_size: u32,
    /// Number of slots; a power of two.
    pub capacity: u32,
    /// Pid of the producing process (informational; the daemon trusts `SO_PEERCRED`).
    pub pid: u32,
    _reserved0: u32,
    /// Events the producer dropped because the ring was full.
    pub dropped: AtomicU64,
    /// Unused (was a count of published events, which `enqueue_pos` already is: one atomic
    /// increment per event saved). Kept so the layout does not change.
    _reserved1: u64,
    _pad0: [u8; 16],
    /// Next position a producer claims.
    pub enqueue_pos: CacheLine,
    /// Next position the consumer reads.
    pub dequeue_pos: CacheLine,
    /// Daemon-written generation counter bumped each time a daemon starts consuming this ring.
    pub consumer_generation: AtomicU32,
    _pad1: [u8; 60],
}

/// A `u64` alone on its cache line.
#[repr(C, align(64))]
pub struct CacheLine {
    pub value: AtomicU64,
    _pad: [u8; 56],
}

const _: () = {
    assert!(size_of::<Event>() == 40);
    assert!(size_of::<Slot>() == 48);
    assert!(align_of::<Slot>() == 8);
    assert!(size_of::<CacheLine>() == 64);
    assert!(size_of::<RingHeader>() == 256);
    assert!(size_of::<Hello>() == 64);
};

/// Why a ring (or hello) was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    BadMagic,
    VersionMismatch { ours: u32, theirs: u32 },
    LayoutMismatch,
    BadCapacity(u32),
    TooSmall { needed: usize, have: usize },
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::BadMagic => write!(f, "not an objtier ring (bad magic)"),
            Self::VersionMismatch { ours, theirs } => write!(
                f,
                "wire version {theirs} from the library, daemon speaks {ours}: \
                 use libobjtier.so and objtier from the same build"
            ),
            Self::LayoutMismatch => write!(f, "ring layout differs from this daemon's build"),
            Self::BadCapacity(c) => write!(f, "ring capacity {c} is not a power of two in range"),
            Self::TooSmall { needed, have } => {
                write!(f, "shared memory is {have} bytes, ring needs {needed}")
            }
        }
    }
}

/// Bytes of shared memory a ring of `capacity` slots needs.
pub const fn ring_bytes(capacity: u32) -> usize {
    size_of::<RingHeader>() + capacity as usize * size_of::<Slot>()
}

/// Offset of the [`Control`] area in the shared memory of a ring of `capacity` slots.
pub const fn control_offset(capacity: u32) -> usize {
    ring_bytes(capacity).next_multiple_of(PAGE_SIZE)
}

/// Bytes of the whole shared memory (ring, then control area) for `capacity` slots.
pub const fn shared_bytes(capacity: u32) -> usize {
    control_offset(capacity) + size_of::<Control>()
}

/// Most tiers the control area describes.
pub const MAX_TIERS: usize = 8;
/// Slots in the site placement table (a power of two).
pub const SITE_TABLE_SLOTS: usize = 4096;
/// Longest probe sequence in the site table, for both the writer and the readers.
pub const SITE_TABLE_MAX_PROBES: usize = 32;

/// One entry of the site table.
#[repr(C)]
pub struct SiteSlot {
    /// The site id; 0 marks an empty slot. Written once, after `advice`.
    pub site: AtomicU64,
    /// The daemon's advice on new objects of this site: in the low 32 bits the tier they start
    /// in, plus one (0: no tier); [`SHORT_LIVED_BIT`] if they are short-lived. 0: no advice.
    pub advice: AtomicU64,
}

/// In [`SiteSlot::advice`]: the site's objects die young (see [`SiteAdvice::short_lived`]).
pub const SHORT_LIVED_BIT: u64 = 1 << 32;
/// In [`SiteSlot::advice`]: the site's budget in its tier, in pages, in the bits from here up
/// (31 bits: 8 TiB); 0 for no budget.
const BUDGET_SHIFT: u32 = 33;
/// The largest budget the site table holds, in pages.
pub const MAX_BUDGET_PAGES: u64 = (1 << (64 - BUDGET_SHIFT)) - 1;

/// Bits of [`Control::flags`].
pub mod control_flags {
    /// The process is profiled: report every free, never taking an allocation back, so that
    /// every object's lifetime is known (`RingHeader::cancel` is not used).
    pub const PROFILING: u32 = 1 << 0;
}

/// What the daemon advises about the new objects of a site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteAdvice {
    /// The tier they start in.
    pub tier: Option<u32>,
    /// They die young: so many of the site's objects died within half an interval, and none
    /// lived longer, that reporting them costs the program and the daemon for nothing (an
    /// object that dies within an interval never becomes a record). The library still gives
    /// each its own pages, but reports only one in [`SHORT_LIVED_SAMPLE`] of them (with
    /// [`event_flags::SAMPLED`]), and neither the allocation nor the free of the others.
    pub short_lived: bool,
    /// How many pages of the site's live objects `tier` may hold at once (a placement's
    /// budget); beyond them new objects, and the tail of the object that crosses the budget,
    /// start one tier down. 0: no budget.
    pub budget_pages: u64,
}

impl SiteAdvice {
    fn from_raw(raw: u64) -> SiteAdvice {
        let t = raw & 0xffff_ffff;
        SiteAdvice {
            tier: (t != 0 && t <= MAX_TIERS as u64).then(|| t as u32 - 1),
            short_lived: raw & SHORT_LIVED_BIT != 0,
            budget_pages: raw >> BUDGET_SHIFT,
        }
    }

    fn to_raw(self) -> u64 {
        self.tier.map_or(0, |t| t as u64 + 1)
            | if self.short_lived { SHORT_LIVED_BIT } else { 0 }
            | self.budget_pages.min(MAX_BUDGET_PAGES) << BUDGET_SHIFT
    }
}

/// The daemon-to-library half of the shared memory, at [`control_offset`]. The daemon is the
/// only writer of everything but `resync_served`; the library reads it without locks and
/// treats what it finds as advice (an out-of-range tier or an empty node mask is ignored).
#[repr(C, align(64))]
pub struct Control {
    /// Bumped by the daemon when it wants every live object re-announced (it saw drops).
    pub resync_request: AtomicU32,
    /// The last `resync_request` the library served (written by the library).
    pub resync_served: AtomicU32,
    /// Number of valid entries in `tier_nodes`; 0 until the daemon has written them. Written
    /// last at attach, after the site table and everything below: a library that sees the tiers
    /// sees the placement too.
    pub tier_count: AtomicU32,
    /// Where objects of sites the site table does not place start: a tier plus one, or 0 for
    /// wherever first touch puts them (a placement's fallback tier).
    pub default_tier: AtomicU32,
    /// NUMA nodes of each tier, fastest first, as a bit mask of node ids below 64.
    pub tier_nodes: [AtomicU64; MAX_TIERS],
    /// The tier the small-object allocator's memory is bound to, plus one (0: none).
    pub small_objects_tier: AtomicU32,
    /// [`control_flags`].
    pub flags: AtomicU32,
    _pad0: [u8; 168],
    /// Site id -> starting tier.
    pub sites: [SiteSlot; SITE_TABLE_SLOTS],
}

const _: () = {
    assert!(size_of::<SiteSlot>() == 16);
    assert!(size_of::<Control>() == 256 + SITE_TABLE_SLOTS * 16);
    assert!(SITE_TABLE_SLOTS.is_power_of_two());
};

#[inline]
fn site_slot_index(site: u64, probe: usize) -> usize {
    // Site ids are already hashes; fold the high bits in so that ids differing only there spread.
    ((site ^ (site >> 32)) as usize).wrapping_add(probe) & (SITE_TABLE_SLOTS - 1)
}

impl Control {
    /// What the daemon advises about new objects of `site` (nothing for an unknown site).
    /// Lock-free.
    #[inline]
    pub fn site_advice(&self, site: u64) -> SiteAdvice {
        if site == 0 {
            return SiteAdvice::default();
        }
        for probe in 0..SITE_TABLE_MAX_PROBES {
            let slot = &self.sites[site_slot_index(site, probe)];
            match slot.site.load(Ordering::Acquire) {
                0 => break,
                s if s == site => return SiteAdvice::from_raw(slot.advice.load(Ordering::Relaxed)),
                _ => {}
            }
        }
        SiteAdvice::default()
    }

    /// The tier the daemon wants new objects of `site` to start in, if any. Lock-free.
    #[inline]
    pub fn site_tier(&self, site: u64) -> Option<u32> {
        self.site_advice(site).tier
    }

    /// Sets (or with `None` clears) the starting tier of `site`, keeping whether it is
    /// short-lived; any budget is cleared. Only one writer (the daemon) may call this. Returns
    /// false when the table has no room for a new site.
    pub fn set_site_tier(&self, site: u64, tier: Option<u32>) -> bool {
        self.set_site_placement(site, tier, 0)
    }

    /// Sets the starting tier of `site` and its budget there in pages (0: none; see
    /// [`SiteAdvice::budget_pages`]), keeping whether it is short-lived. Only one writer (the
    /// daemon) may call this. Returns false when the table has no room for a new site.
    pub fn set_site_placement(&self, site: u64, tier: Option<u32>, budget_pages: u64) -> bool {
        let budget_pages = if tier.is_some() { budget_pages } else { 0 };
        self.update_site_advice(site, |advice| SiteAdvice {
            tier,
            budget_pages,
            ..advice
        })
    }

    /// The index of `site`'s slot in the table, if it has one: stable for as long as the
    /// control area lives (slots are never reused), so the library keys its per-site counters
    /// by it.
    pub fn site_slot(&self, site: u64) -> Option<usize> {
        if site == 0 {
            return None;
        }
        (0..SITE_TABLE_MAX_PROBES)
            .map(|probe| site_slot_index(site, probe))
            .take_while(|&i| self.sites[i].site.load(Ordering::Acquire) != 0)
            .find(|&i| self.sites[i].site.load(Ordering::Acquire) == site)
    }

    /// The fallback tier of unplaced sites, if the daemon set one.
    #[inline]
    pub fn default_tier(&self) -> Option<u32> {
        tier_plus_one(self.default_tier.load(Ordering::Acquire))
    }

    /// The tier small-object memory is bound to, if the daemon set one.
    #[inline]
    pub fn small_objects_tier(&self) -> Option<u32> {
        tier_plus_one(self.small_objects_tier.load(Ordering::Acquire))
    }

    /// Whether a [`control_flags`] bit is set.
    #[inline]
    pub fn has_flag(&self, flag: u32) -> bool {
        self.flags.load(Ordering::Relaxed) & flag != 0
    }

    /// Marks (or unmarks) `site` short-lived ([`SiteAdvice::short_lived`]), keeping its tier.
    /// Only one writer (the daemon) may call this. Returns false when the table has no room for
    /// a new site.
    pub fn set_site_short_lived(&self, site: u64, short_lived: bool) -> bool {
        self.update_site_advice(site, |advice| SiteAdvice {
            short_lived,
            ..advice
        })
    }

    fn update_site_advice(&self, site: u64, change: impl FnOnce(SiteAdvice) -> SiteAdvice) -> bool {
        if site == 0 {
            return false;
        }
        for probe in 0..SITE_TABLE_MAX_PROBES {
            let slot = &self.sites[site_slot_index(site, probe)];
            match slot.site.load(Ordering::Acquire) {
                0 => {
                    let value = change(SiteAdvice::default()).to_raw();
                    if value == 0 {
                        return true;
                    }
                    slot.advice.store(value, Ordering::Relaxed);
                    slot.site.store(site, Ordering::Release);
                    return true;
                }
                s if s == site => {
                    let old = SiteAdvice::from_raw(slot.advice.load(Ordering::Relaxed));
                    slot.advice.store(change(old).to_raw(), Ordering::Relaxed);
                    return true;
                }
                _ => {}
            }
        }
        false
    }

    /// NUMA node mask of `tier`, if the daemon described it.
    #[inline]
    pub fn tier_nodes(&self, tier: u32) -> Option<u64> {
        let count = self.tier_count.load(Ordering::Acquire) as usize;
        if tier as usize >= count.min(MAX_TIERS) {
            return None;
        }
        let mask = self.tier_nodes[tier as usize].load(Ordering::Relaxed);
        (mask != 0).then_some(mask)
    }

    /// Tier of NUMA `node`, if the daemon described it.
    pub fn tier_of_node(&self, node: u32) -> Option<u32> {
        if node >= 64 {
            return None;
        }
        let count = (self.tier_count.load(Ordering::Acquire) as usize).min(MAX_TIERS);
        (0..count)
            .find(|&t| self.tier_nodes[t].load(Ordering::Relaxed) & (1 << node) != 0)
            .map(|t| t as u32)
    }

    /// Publishes the tiers (daemon side). Node ids of 64 and above cannot be described.
    pub fn set_tiers(&self, tiers: &[u64]) {
        let count = tiers.len().min(MAX_TIERS);
        self.tier_count.store(0, Ordering::Release);
        for (slot, &mask) in self.tier_nodes.iter().zip(&tiers[..count]) {
            slot.store(mask, Ordering::Relaxed);
        }
        self.tier_count.store(count as u32, Ordering::Release);
    }
}

/// A stored tier plus one (0 and out-of-range values: none).
fn tier_plus_one(raw: u32) -> Option<u32> {
    (raw != 0 && raw as usize <= MAX_TIERS).then(|| raw - 1)
}

// SAFETY: all fields are atomics.
unsafe impl Sync for Control {}

impl RingHeader {
    /// Initialises a ring (and its control area) in freshly zeroed memory of at least
    /// `shared_bytes(capacity)` bytes. Only the header is written: zeroed slots are free ones.
    ///
    /// # Safety
    /// `mem` must be valid for writes of `shared_bytes(capacity)` bytes, aligned to 64, zeroed, and
    /// not yet shared with any other thread or process.
    pub unsafe fn init(mem: *mut u8, capacity: u32, pid: u32) -> &'static RingHeader {
        debug_assert!(capacity.is_power_of_two());
        let header = mem as *mut RingHeader;
        // SAFETY: the caller guarantees `mem` is writable, aligned and zeroed; an all-zero bit
        // pattern is a valid RingHeader (atomics and integers), so writing fields is sound.
        unsafe {
            (*header).magic = RING_MAGIC;
            (*header).version = WIRE_VERSION;
            (*header).header_size = size_of::<RingHeader>() as u32;
            (*header).slot_size = size_of::<Slot>() as u32;
            (*header).capacity = capacity;
            (*header).pid = pid;
            &*header
        }
    }

    /// The control area that follows this ring in the same shared memory (producer side: the
    /// header's capacity is the library's own).
    pub fn control(&self) -> &Control {
        self.control_with(self.capacity)
    }

    /// The control area of a ring of `capacity` slots as validated (consumer side).
    pub fn control_with(&self, capacity: u32) -> &Control {
        // SAFETY: `init` and `validate` establish that the whole `shared_bytes(capacity)`
        // mapping follows the header, and `control_offset` is 64-aligned.
        unsafe {
            &*((self as *const RingHeader as *const u8).add(control_offset(capacity))
                as *const Control)
        }
    }

    /// Checks a ring found in `len` bytes of shared memory before the daemon uses it, and
    /// returns its capacity as checked (read once), for the daemon to keep.
    pub fn validate(&self, len: usize) -> Result<u32, WireError> {
        if self.magic != RING_MAGIC {
            return Err(WireError::BadMagic);
        }
        if self.version != WIRE_VERSION {
            return Err(WireError::VersionMismatch {
                ours: WIRE_VERSION,
                theirs: self.version,
            });
        }
        if self.header_size as usize != size_of::<RingHeader>()
            || self.slot_size as usize != size_of::<Slot>()
        {
            return Err(WireError::LayoutMismatch);
        }
        let capacity = self.capacity;
        if !capacity.is_power_of_two() || capacity > MAX_RING_CAPACITY {
            return Err(WireError::BadCapacity(capacity));
        }
        let needed = shared_bytes(capacity);
        if len < needed {
            return Err(WireError::TooSmall { needed, have: len });
        }
        Ok(capacity)
    }

    /// The slot of `pos` in a ring of `capacity` slots, and its index.
    fn slot(&self, capacity: u32, pos: u64) -> (&Slot, u64) {
        let index = pos & (capacity as u64 - 1);
        // SAFETY: rings are only reachable through `init` or a successful `validate`, both of
        // which establish that `capacity` slots follow the header in the same mapping.
        unsafe {
            let slots = (self as *const RingHeader as *const u8).add(size_of::<RingHeader>())
                as *const Slot;
            (&*slots.add(index as usize), index)
        }
    }

    /// Publishes `event` without ever blocking. Returns false (and counts a drop) when full.
    pub fn push(&self, event: &Event) -> bool {
        self.push_at(event).is_some()
    }

    /// As [`push`](Self::push), returning the position the event took (None when full).
    pub fn push_at(&self, event: &Event) -> Option<u64> {
        let capacity = self.capacity;
        let mut pos = self.enqueue_pos.value.load(Ordering::Relaxed);
        loop {
            let (slot, index) = self.slot(capacity, pos);
            // A cancelled slot the consumer has not passed yet is as taken as a published one.
            let seq = (slot.seq.load(Ordering::Acquire) & !CANCELLED).wrapping_add(index);
            let diff = seq.wrapping_sub(pos) as i64;
            if diff == 0 {
                match self.enqueue_pos.value.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the CAS for `pos` gives this thread exclusive use of
                        // the slot until it publishes `pos + 1`.
                        unsafe { *slot.event.get() = *event };
                        let published = pos.wrapping_add(1).wrapping_sub(index);
                        slot.seq.store(published, Ordering::Release);
                        return Some(pos);
                    }
                    Err(current) => pos = current,
                }
            } else if diff < 0 {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return None;
            } else {
                pos = self.enqueue_pos.value.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes back the event this producer published at `pos`, if the consumer has not taken it
    /// yet: true if it never will. Any thread may cancel, but only an event it knows to be its
    /// own at `pos` (the library: an object's allocation, under the lock that orders every
    /// event about the object).
    pub fn cancel(&self, pos: u64) -> bool {
        let (slot, index) = self.slot(self.capacity, pos);
        let published = pos.wrapping_add(1).wrapping_sub(index);
        slot.seq
            .compare_exchange(
                published,
                published | CANCELLED,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Takes the next published event, if any, passing over cancelled ones. Only one consumer
    /// may call this at a time.
    pub fn pop(&self) -> Option<Event> {
        self.pop_with(self.capacity, |_| {})
    }

    /// As [`pop`](Self::pop), for a ring of `capacity` slots as validated (consumer side),
    /// calling `taken_back` with each cancelled event it passes over (its contents stay as
    /// published: the producer writes a slot again only after the consumer has freed it).
    /// Passes over at most a ring's worth of them per call (a producer that kept cancelling
    /// could otherwise hold it).
    pub fn pop_with(&self, capacity: u32, mut taken_back: impl FnMut(&Event)) -> Option<Event> {
        for _ in 0..capacity {
            let pos = self.dequeue_pos.value.load(Ordering::Relaxed);
            let (slot, index) = self.slot(capacity, pos);
            let published = pos.wrapping_add(1).wrapping_sub(index);
            let free = pos.wrapping_add(capacity as u64).wrapping_sub(index);
            let seq = slot.seq.load(Ordering::Acquire);
            if seq != published && seq != published | CANCELLED {
                return None;
            }
            // SAFETY: published (or published, then cancelled): the producer finished writing
            // and released the slot to the (single) consumer. A hostile producer can only make
            // us read garbage values, which callers validate; the read stays inside the mapping.
            let event = unsafe { core::ptr::read_volatile(slot.event.get()) };
            // Taken for good only if the producer did not cancel it, before or meanwhile.
            let taken = seq == published
                && slot
                    .seq
                    .compare_exchange(published, free, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
            if !taken {
                // Cancelled: free the slot for the next lap and look at the next one.
                taken_back(&event);
                slot.seq.store(free, Ordering::Release);
            }
            self.dequeue_pos
                .value
                .store(pos.wrapping_add(1), Ordering::Relaxed);
            if taken {
                return Some(event);
            }
        }
        None
    }

    /// Whether the producer that pushed at `pos` should ring the doorbell (write one byte to
    /// the socket): once every eighth of the ring, so that a daemon asleep while the ring was
    /// quiet wakes up and drains it long before it fills, at the cost of one `send` per
    /// `capacity / 8` events.
    pub fn doorbell_due(&self, pos: u64) -> bool {
        // A mask, not a division: capacities are powers of two (`init`, `validate`).
        pos & ((self.capacity as u64 / 8).max(1) - 1) == 0
    }

    /// Events published but not yet consumed (approximate while producers run).
    pub fn backlog(&self) -> u64 {
        self.enqueue_pos
            .value
            .load(Ordering::Relaxed)
            .wrapping_sub(self.dequeue_pos.value.load(Ordering::Relaxed))
    }
}

// SAFETY: all shared mutation goes through atomics or is serialised by the slot protocol.
unsafe impl Sync for RingHeader {}
unsafe impl Sync for Slot {}

/// What kind of client opened the connection.
pub mod hello_kind {
    /// A process running libobjtier.so, attaching its ring.
    pub const PRELOAD: u32 = 1;
}

/// Sent once by the library right after connecting, with the ring memfd as `SCM_RIGHTS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hello {
    pub magic: u64,
    pub version: u32,
    pub kind: u32,
    /// The sender's idea of its pid (the daemon uses `SO_PEERCRED` instead).
    pub pid: u32,
    /// Application priority (`OBJTIER_PRIORITY`); higher wins the fast tier. 0 is the default.
    pub priority: i32,
    /// Cap on fast-tier bytes for this process (`OBJTIER_FAST_CAPACITY`); 0 means no cap.
    pub fast_capacity_bytes: u64,
    /// Bytes of the memfd the daemon should map ([`shared_bytes`]).
    pub shared_bytes: u64,
    /// Objects at least this large are tracked (`OBJTIER_TRACK_MIN`).
    pub track_min_bytes: u64,
    /// The profile session this process belongs to (`OBJTIER_PROFILE`, from `objtier
    /// profile`); 0 for none.
    pub profile_token: u64,
    /// [`hello_flags`].
    pub flags: u64,
}

/// Bits of [`Hello::flags`].
pub mod hello_flags {
    /// The daemon must never move this process's pages (`objtier run --no-migrate`, `objtier
    /// profile --observe-only`): it places new objects only, as the process's placement says.
    pub const NO_MIGRATE: u64 = 1 << 0;
    /// A second descriptor follows the ring's in the hello's `SCM_RIGHTS`: the placement file
    /// (`OBJTIER_PLACEMENT`), opened by the process, which the daemon reads and applies.
    pub const PLACEMENT: u64 = 1 << 1;
    /// Every flag this build knows; a hello with others is refused.
    pub const ALL: u64 = NO_MIGRATE | PLACEMENT;
}

impl Hello {
    pub fn as_bytes(&self) -> &[u8; size_of::<Hello>()] {
        // SAFETY: Hello is repr(C), has no padding (asserted size 64 = sum of fields) and is
        // plain old data.
        unsafe { &*(self as *const Hello as *const [u8; size_of::<Hello>()]) }
    }

    pub fn from_bytes(bytes: &[u8; size_of::<Hello>()]) -> Result<Hello, WireError> {
        // SAFETY: any 64 bytes form a valid Hello (integers only); read_unaligned copes with
        // the buffer's alignment.
        let hello = unsafe { core::ptr::read_unaligned(bytes.as_ptr() as *const Hello) };
        if hello.magic != RING_MAGIC {
            return Err(WireError::BadMagic);
        }
        if hello.version != WIRE_VERSION {
            return Err(WireError::VersionMismatch {
                ours: WIRE_VERSION,
                theirs: hello.version,
            });
        }
        Ok(hello)
    }
}

/// Size of a [`Hello`] on the wire.
pub const HELLO_BYTES: usize = size_of::<Hello>();

/// Environment variable naming the daemon's socket; overrides every default.
pub const SOCKET_ENV: &str = "OBJTIER_SOCKET";
/// Socket of a system-wide (root) daemon.
pub const SYSTEM_SOCKET_PATH: &str = "/run/objtier/objtier.sock";

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;

    fn ring(capacity: u32) -> (std::vec::Vec<u64>, &'static RingHeader) {
        let words = shared_bytes(capacity).div_ceil(8) + 8;
        let mut mem = vec![0u64; words];
        let base = mem.as_mut_ptr() as *mut u8;
        let aligned = base.wrapping_add(base.align_offset(64));
        // SAFETY: the vector outlives every use in these tests, and is zeroed and large enough.
        let header = unsafe { RingHeader::init(aligned, capacity, 42) };
        (mem, header)
    }

    fn ev(addr: u64) -> Event {
        Event {
            kind: EventKind::Alloc as u32,
            addr,
            len: 4096,
            ..Event::default()
        }
    }

    #[test]
    fn fifo_and_full_ring_drops() {
        let (_mem, r) = ring(4);
        assert!(r.validate(shared_bytes(4)).is_ok());
        for i in 0..4 {
            assert!(r.push(&ev(i)));
        }
        assert!(!r.push(&ev(99)), "a full ring must refuse, not block");
        assert_eq!(r.dropped.load(Ordering::Relaxed), 1);
        for i in 0..4 {
            assert_eq!(r.pop().map(|e| e.addr), Some(i));
        }
        assert_eq!(r.pop(), None);
        // Wraps around.
        for round in 0..10u64 {
            assert!(r.push(&ev(round)));
            assert_eq!(r.pop().map(|e| e.addr), Some(round));
        }
    }

    #[test]
    fn the_doorbell_rings_once_every_eighth_of_the_ring() {
        let (_mem, r) = ring(64);
        let mut rung = std::vec::Vec::new();
        for i in 0..40 {
            let pos = r.push_at(&ev(i)).expect("room");
            assert_eq!(pos, i, "positions count pushes");
            if r.doorbell_due(pos) {
                rung.push(pos);
            }
        }
        assert_eq!(rung, [0, 8, 16, 24, 32]);
        // Positions keep counting after the ring wraps; a full ring takes no position.
        while r.pop().is_some() {}
        for i in 40..104 {
            assert_eq!(r.push_at(&ev(i)), Some(i));
        }
        assert_eq!(r.push_at(&ev(0)), None);
        let (_mem, tiny) = ring(4);
        assert!(
            (0..4).all(|pos| tiny.doorbell_due(pos)),
            "at least every push"
        );
    }

    #[test]
    fn validate_rejects_bad_headers() {
        let (_mem, r) = ring(8);
        assert_eq!(
            r.validate(shared_bytes(8) - 1),
            Err(WireError::TooSmall {
                needed: shared_bytes(8),
                have: shared_bytes(8) - 1
            })
        );
        let hello = Hello {
            magic: RING_MAGIC,
            version: WIRE_VERSION + 1,
            ..Hello::default()
        };
        assert!(matches!(
            Hello::from_bytes(hello.as_bytes()),
            Err(WireError::VersionMismatch { .. })
        ));
    }

    #[test]
    fn concurrent_producers_lose_nothing_when_drained() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let (mem, r) = ring(1024);
        let done = Arc::new(AtomicBool::new(false));
        let per_thread = 20_000u64;
        let mut seen = vec![0u32; 4 * per_thread as usize];
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    for i in 0..per_thread {
                        while !r.push(&ev(t * per_thread + i)) {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let done = done.clone();
            let mut got = 0;
            while got < 4 * per_thread {
                if let Some(e) = r.pop() {
                    seen[e.addr as usize] += 1;
                    got += 1;
                }
            }
            done.store(true, Ordering::Relaxed);
        });
        drop(mem);
        assert!(seen.iter().all(|&c| c == 1));
    }

    #[test]
    fn a_cancelled_event_is_never_consumed_and_frees_its_slot() {
        let (_mem, r) = ring(4);
        let positions: std::vec::Vec<u64> = (0..4).map(|i| r.push_at(&ev(i)).unwrap()).collect();
        assert!(r.cancel(positions[1]));
        assert!(!r.cancel(positions[1]), "once");
        assert!(r.cancel(positions[3]));
        let mut cancelled = std::vec::Vec::new();
        let mut pop = || r.pop_with(4, |e| cancelled.push(e.addr)).map(|e| e.addr);
        assert_eq!(pop(), Some(0));
        assert!(!r.cancel(positions[0]), "too late: consumed");
        assert_eq!(pop(), Some(2));
        assert_eq!(pop(), None);
        assert_eq!(
            cancelled,
            [1, 3],
            "the consumer is shown what was taken back"
        );
        // Every slot is free again; a stale position from the last lap cancels nothing.
        for i in 4..8 {
            assert_eq!(r.push_at(&ev(i)), Some(i));
        }
        assert!(!r.cancel(positions[2]));
        assert!((4..8).all(|i| r.pop().map(|e| e.addr) == Some(i)));
        // A cancelled slot still waits for the consumer to pass it: a full ring drops (and
        // does not spin) until it has.
        for i in 8..12 {
            assert_eq!(r.push_at(&ev(i)), Some(i));
        }
        assert!(r.cancel(8));
        assert_eq!(r.push_at(&ev(12)), None);
        assert_eq!(r.pop().map(|e| e.addr), Some(9));
        assert_eq!(r.push_at(&ev(12)), Some(12));
        assert_eq!(r.dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn every_event_is_either_consumed_or_cancelled_never_both() {
        use std::sync::atomic::AtomicBool;
        let (mem, r) = ring(256);
        let total = 100_000u64;
        let done = AtomicBool::new(false);
        let mut popped = vec![false; total as usize];
        let cancelled_ok = std::thread::scope(|s| {
            let producer = s.spawn(|| {
                let mut cancelled = vec![false; total as usize];
                let mut recent = std::collections::VecDeque::new();
                for i in 0..total {
                    let pos = loop {
                        match r.push_at(&ev(i)) {
                            Some(pos) => break pos,
                            None => std::thread::yield_now(),
                        }
                    };
                    recent.push_back((i, pos));
                    // Take back every third event a few pushes later, as a free would.
                    if recent.len() > 3 {
                        let (j, pos) = recent.pop_front().unwrap();
                        if j % 3 == 0 && r.cancel(pos) {
                            cancelled[j as usize] = true;
                        }
                    }
                }
                done.store(true, Ordering::Release);
                cancelled
            });
            let mut skipped = vec![false; total as usize];
            loop {
                match r.pop_with(256, |e| skipped[e.addr as usize] = true) {
                    Some(e) => popped[e.addr as usize] = true,
                    None if done.load(Ordering::Acquire) && r.backlog() == 0 => break,
                    None => std::thread::yield_now(),
                }
            }
            let cancelled = producer.join().unwrap();
            assert_eq!(
                skipped, cancelled,
                "the consumer passes over exactly those taken back"
            );
            cancelled
        });
        drop(mem);
        for i in 0..total as usize {
            assert!(
                popped[i] != cancelled_ok[i],
                "event {i}: popped {}",
                popped[i]
            );
        }
        assert!(cancelled_ok.iter().any(|&c| c), "some cancels won the race");
    }

    #[test]
    fn site_table_sets_finds_and_clears() {
        let (_mem, r) = ring(8);
        let c = r.control();
        assert_eq!(c.site_tier(7), None);
        assert!(c.set_site_tier(7, Some(1)));
        assert_eq!(c.site_tier(7), Some(1));
        assert!(c.set_site_tier(7, Some(0)));
        assert_eq!(c.site_tier(7), Some(0));
        assert!(c.set_site_tier(7, None));
        assert_eq!(c.site_tier(7), None);
        assert!(
            !c.set_site_tier(0, Some(1)),
            "site 0 means unknown and is never placed"
        );
        // Colliding ids (same slot) all get entries, up to the probe limit.
        let (_mem, r) = ring(8);
        let c = r.control();
        let colliding = |i: u64| (i << 12) | (i << 44);
        for i in 1..=SITE_TABLE_MAX_PROBES as u64 {
            assert!(
                c.set_site_tier(colliding(i), Some(i as u32 % 3)),
                "entry {i}"
            );
        }
        assert!(
            !c.set_site_tier(colliding(1000), Some(1)),
            "probe limit reached"
        );
        for i in 1..=SITE_TABLE_MAX_PROBES as u64 {
            assert_eq!(c.site_tier(colliding(i)), Some(i as u32 % 3));
        }
        assert_eq!(c.site_tier(colliding(1000)), None);
    }

    #[test]
    fn a_site_is_short_lived_and_placed_independently() {
        let (_mem, r) = ring(8);
        let c = r.control();
        assert_eq!(c.site_advice(9), SiteAdvice::default());
        assert!(c.set_site_short_lived(9, true));
        assert_eq!(
            c.site_advice(9),
            SiteAdvice {
                tier: None,
                short_lived: true,
                budget_pages: 0
            }
        );
        assert!(c.set_site_tier(9, Some(2)));
        assert_eq!(
            c.site_advice(9),
            SiteAdvice {
                tier: Some(2),
                short_lived: true,
                budget_pages: 0
            },
            "placing keeps the mark"
        );
        assert!(c.set_site_short_lived(9, false));
        assert_eq!(c.site_tier(9), Some(2), "unmarking keeps the tier");
        assert!(!c.site_advice(9).short_lived);
        // Clearing advice a site never had adds no entry.
        assert!(c.set_site_short_lived(10, false));
        assert_eq!(
            c.sites
                .iter()
                .filter(|s| s.site.load(Ordering::Relaxed) == 10)
                .count(),
            0
        );
        // A value with the mark and an out-of-range tier: the mark still holds.
        c.sites[site_slot_index(9, 0)]
            .advice
            .store(SHORT_LIVED_BIT | 99, Ordering::Relaxed);
        assert_eq!(
            c.site_advice(9),
            SiteAdvice {
                tier: None,
                short_lived: true,
                budget_pages: 0
            }
        );
    }

    #[test]
    fn a_placement_has_a_budget_and_a_slot_that_stays() {
        let (_mem, r) = ring(8);
        let c = r.control();
        assert_eq!(c.site_slot(9), None);
        assert!(c.set_site_placement(9, Some(0), 1234));
        let slot = c.site_slot(9).unwrap();
        assert_eq!(c.site_advice(9).budget_pages, 1234);
        assert!(c.set_site_short_lived(9, true));
        assert_eq!(
            c.site_advice(9).budget_pages,
            1234,
            "marking keeps the budget"
        );
        assert!(c.set_site_placement(9, Some(1), MAX_BUDGET_PAGES + 5));
        assert_eq!(c.site_advice(9).budget_pages, MAX_BUDGET_PAGES, "clamped");
        assert!(c.set_site_tier(9, None));
        assert_eq!(c.site_advice(9).budget_pages, 0, "no tier, no budget");
        assert_eq!(c.site_slot(9), Some(slot), "a slot is never given up");
        assert_eq!(c.site_advice(9).tier, None);
        assert!(c.site_advice(9).short_lived);
        assert_eq!(c.default_tier(), None);
        c.default_tier.store(2, Ordering::Release);
        assert_eq!(c.default_tier(), Some(1));
        c.default_tier.store(99, Ordering::Release);
        assert_eq!(c.default_tier(), None, "out of range: none");
        assert!(!c.has_flag(control_flags::PROFILING));
        c.flags.store(control_flags::PROFILING, Ordering::Relaxed);
        assert!(c.has_flag(control_flags::PROFILING));
    }

    #[test]
    fn tiers_map_nodes() {
        let (_mem, r) = ring(8);
        let c = r.control();
        assert_eq!(c.tier_nodes(0), None, "nothing until the daemon writes");
        c.set_tiers(&[0b01, 0b110]);
        assert_eq!(c.tier_nodes(0), Some(1));
        assert_eq!(c.tier_nodes(1), Some(6));
        assert_eq!(c.tier_nodes(2), None);
        assert_eq!(c.tier_of_node(2), Some(1));
        assert_eq!(c.tier_of_node(3), None);
        assert_eq!(c.tier_of_node(99), None);
    }

    #[test]
    fn header_advice_matches_the_wire() {
        let header = include_str!("../../../include/objtier.h");
        let defined = |name: &str| -> u32 {
            let line = header
                .lines()
                .find(|l| l.split_whitespace().nth(1) == Some(name))
                .unwrap_or_else(|| panic!("{name} missing from include/objtier.h"));
            let expr = line.split_once(name).unwrap().1;
            let expr = expr.split("/*").next().unwrap().trim();
            let expr = expr
                .trim_start_matches('(')
                .trim_end_matches(')')
                .replace('u', "");
            let (one, shift) = expr.split_once("<<").expect("values are written 1u << N");
            assert_eq!(one.trim(), "1");
            1 << shift.trim().parse::<u32>().unwrap()
        };
        for (name, value) in [
            ("OBJTIER_ADVICE_PREFER_FAST", advice::PREFER_FAST),
            ("OBJTIER_ADVICE_REQUIRE_FAST", advice::REQUIRE_FAST),
            ("OBJTIER_ADVICE_PREFER_SLOW", advice::PREFER_SLOW),
            ("OBJTIER_ADVICE_REQUIRE_SLOW", advice::REQUIRE_SLOW),
            ("OBJTIER_ADVICE_HOT", advice::HOT),
            ("OBJTIER_ADVICE_COLD", advice::COLD),
            ("OBJTIER_ADVICE_READ_MOSTLY", advice::READ_MOSTLY),
            ("OBJTIER_ADVICE_WRITE_MOSTLY", advice::WRITE_MOSTLY),
            ("OBJTIER_ADVICE_SCRATCH", advice::SCRATCH),
            (
                "OBJTIER_ADVICE_LATENCY_SENSITIVE",
                advice::LATENCY_SENSITIVE,
            ),
        ] {
            assert_eq!(defined(name), value, "{name}");
        }
    }
}
