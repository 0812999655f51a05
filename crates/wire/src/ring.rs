//! The shared-memory ring: a bounded multi-producer, single-consumer queue of [`Event`]s in
//! the style of Vyukov's bounded MPMC queue, which the daemon validates before it believes it.

use crate::{Control, Event, Hello, MAX_RING_CAPACITY, PAGE_SIZE, RING_MAGIC, WIRE_VERSION};
use core::mem::{align_of, size_of};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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

#[cfg(test)]
pub(crate) mod tests {
    extern crate std;
    use super::*;
    use crate::EventKind;
    use std::vec;

    pub(crate) fn ring(capacity: u32) -> (std::vec::Vec<u64>, &'static RingHeader) {
        let words = shared_bytes(capacity).div_ceil(8) + 8;
        let mut mem = vec![0u64; words];
        let base = mem.as_mut_ptr() as *mut u8;
        let aligned = base.wrapping_add(base.align_offset(64));
        // SAFETY: the vector outlives every use in these tests, and is zeroed and large enough.
        let header = unsafe { RingHeader::init(aligned, capacity, 42) };
        (mem, header)
    }

    pub(crate) fn ev(addr: u64) -> Event {
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
}
