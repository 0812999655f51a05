//! The events a process's library reports: what happened to an object, where, when, and from
//! which allocation site.

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
    /// [`EventKind::ResyncEnd`]; `len` = the [`Control::resync_request`](crate::Control::resync_request) being served. The
    /// library is done with a request when it stores it in [`Control::resync_served`](crate::Control::resync_served).
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
