//! One attached process: its ring, its objects, and the records the policy sees.
//!
//! Events arrive from shared memory the process controls, so each is validated; a bad one is
//! counted and skipped. Allocations are buffered until the end of the interval (section 3.2.1):
//! an object freed before then never becomes a record. Objects larger than the split size become
//! several records (section 3.2.2), so the hot part of a huge array can move without the rest.

use objtier_policy::split_ranges;
use objtier_wire::{event_flags, EventKind, RingHeader, PAGE_SIZE};
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Largest object the daemon believes (the whole 47-bit user address space).
const MAX_OBJECT_BYTES: u64 = 1 << 47;

/// A read-write mapping of a process's ring memfd.
pub struct RingMapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; the ring protocol is built from atomics.
unsafe impl Send for RingMapping {}

impl RingMapping {
    /// Maps and validates a ring passed by a process.
    pub fn map(memfd: &OwnedFd, claimed_len: u64) -> anyhow::Result<RingMapping> {
        // SAFETY: fstat on an fd we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(memfd.as_raw_fd(), &mut st) } != 0 {
            anyhow::bail!(
                "fstat of the ring memfd failed: {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: F_GET_SEALS on an fd we own.
        let seals = unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            anyhow::bail!(
                "the ring memfd is not sealed against shrinking (F_SEAL_SHRINK); a ring that \
                 can shrink under the daemon's mapping is refused"
            );
        }
        let len = st.st_size as usize;
        if claimed_len as usize != len || len < std::mem::size_of::<RingHeader>() {
            anyhow::bail!("ring memfd is {len} bytes, hello claimed {claimed_len}");
        }
        // SAFETY: mapping the whole memfd shared; we validate before interpreting it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            anyhow::bail!(
                "mmap of the ring failed: {}",
                std::io::Error::last_os_error()
            );
        }
        let mapping = RingMapping {
            ptr: ptr as *mut u8,
            len,
        };
        mapping
            .header()
            .validate(len)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(mapping)
    }

    pub fn header(&self) -> &RingHeader {
        // SAFETY: the mapping is at least a header long and page-aligned; fields are plain
        // integers and atomics, valid for any bit pattern.
        unsafe { &*(self.ptr as *const RingHeader) }
    }
}

impl Drop for RingMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// A tracked object as the library announced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Object {
    pub len: u64,
    pub site: u64,
    pub created_ns: u64,
}

/// What the daemon keeps per record (an object, or a split part of one).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub len: u64,
    pub object_start: u64,
    pub site: u64,
    pub created_ns: u64,
    pub last_access_ns: u64,
    pub ema_accesses: f64,
    /// Sampled accesses attributed during the current interval.
    pub interval_accesses: f64,
    /// Sampled accesses of the last completed interval.
    pub recent_accesses: f64,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ProcessStats {
    pub events: u64,
    pub invalid_events: u64,
    pub ephemeral_objects: u64,
    pub frees_of_unknown: u64,
}

pub struct Process {
    /// Unique per connection (pids can be reused; an exec re-attaches under the same pid).
    pub id: u64,
    pub pid: u32,
    pub uid: u32,
    pub priority: i32,
    pub fast_capacity_bytes: Option<u64>,
    pub socket: UnixStream,
    pub ring: RingMapping,
    pub attached_ns: u64,
    pub objects: BTreeMap<u64, Object>,
    pub records: BTreeMap<u64, Record>,
    /// Allocations of this interval not yet promoted to records.
    pub pending: HashMap<u64, Object>,
    pub stats: ProcessStats,
    /// Resident bytes per tier at the last placement query.
    pub resident_bytes_by_tier: Vec<u64>,
    pub split_bytes: u64,
}

impl Process {
    /// Consumes everything in the ring. Returns the number of events read.
    pub fn drain(&mut self) -> usize {
        let mut n = 0;
        // Bound the work per call so one flooding process cannot starve the others.
        while n < 1 << 20 {
            let Some(event) = self.ring.header().pop() else {
                break;
            };
            n += 1;
            self.stats.events += 1;
            let kind = EventKind::from_raw(event.kind);
            let valid_range = event.addr % PAGE_SIZE as u64 == 0
                && event.addr.checked_add(event.len).is_some()
                && event.len <= MAX_OBJECT_BYTES;
            match kind {
                Some(EventKind::Alloc)
                    if valid_range && event.len > 0 && event.len % PAGE_SIZE as u64 == 0 =>
                {
                    let object = Object {
                        len: event.len,
                        site: event.site,
                        created_ns: event.time_ns,
                    };
                    // An address can only hold one object: a new one replaces the old.
                    self.remove_object(event.addr);
                    if event.flags & event_flags::SNAPSHOT != 0 {
                        self.insert_object(event.addr, object);
                    } else {
                        self.pending.insert(event.addr, object);
                    }
                }
                Some(EventKind::Free) if valid_range => {
                    if self.pending.remove(&event.addr).is_some() {
                        self.stats.ephemeral_objects += 1;
                    } else if !self.remove_object(event.addr) {
                        self.stats.frees_of_unknown += 1;
                    }
                }
                // Small-object blocks are not tracked yet; accepted and ignored.
                Some(EventKind::BlockMap) | Some(EventKind::BlockUnmap) => {}
                _ => self.stats.invalid_events += 1,
            }
        }
        n
    }

    fn insert_object(&mut self, start: u64, object: Object) {
        for (record_start, len) in split_ranges(start, object.len, self.split_bytes) {
            self.records.insert(
                record_start,
                Record {
                    len,
                    object_start: start,
                    site: object.site,
                    created_ns: object.created_ns,
                    last_access_ns: 0,
                    ema_accesses: 0.0,
                    interval_accesses: 0.0,
                    recent_accesses: 0.0,
                },
            );
        }
        self.objects.insert(start, object);
    }

    fn remove_object(&mut self, start: u64) -> bool {
        let Some(object) = self.objects.remove(&start) else {
            return false;
        };
        let doomed: Vec<u64> = self
            .records
            .range(start..start + object.len)
            .map(|(k, _)| *k)
            .collect();
        for k in doomed {
            self.records.remove(&k);
        }
        true
    }

    /// End of interval: buffered allocations that survived become records.
    pub fn commit_pending(&mut self) {
        let pending: Vec<(u64, Object)> = self.pending.drain().collect();
        for (start, object) in pending {
            self.insert_object(start, object);
        }
    }

    /// Adds `weight` sampled accesses spread over `[start, end)` to the overlapping records,
    /// in proportion to overlap. Returns the weight that landed on records.
    pub fn attribute(&mut self, start: u64, end: u64, weight: f64) -> f64 {
        if end <= start || weight <= 0.0 {
            return 0.0;
        }
        let span = (end - start) as f64;
        let mut attributed = 0.0;
        // The first record that may overlap starts at or before `start`.
        let first = self
            .records
            .range(..=start)
            .next_back()
            .map_or(start, |(k, _)| *k);
        for (&record_start, record) in self.records.range_mut(first..end) {
            let overlap_start = record_start.max(start);
            let overlap_end = (record_start + record.len).min(end);
            if overlap_end > overlap_start {
                let share = weight * (overlap_end - overlap_start) as f64 / span;
                record.interval_accesses += share;
                attributed += share;
            }
        }
        attributed
    }

    /// Tracked bytes (records).
    pub fn tracked_bytes(&self) -> u64 {
        self.objects.values().map(|o| o.len).sum()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use objtier_wire::{ring_bytes, Event};

    /// A process with a real ring and socket pair, as the daemon would have after a hello.
    pub(crate) fn process() -> (Process, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        let capacity = 64;
        // SAFETY: memfd + truncate + map in-test; the ring is initialised before use.
        let memfd = unsafe {
            use std::os::fd::FromRawFd;
            let fd = libc::memfd_create(c"test".as_ptr(), libc::MFD_ALLOW_SEALING);
            assert!(fd >= 0);
            libc::ftruncate(fd, ring_bytes(capacity) as i64);
            libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK);
            OwnedFd::from_raw_fd(fd)
        };
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes(capacity),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        unsafe { RingHeader::init(mem as *mut u8, capacity, 1) };
        let ring = RingMapping::map(&memfd, ring_bytes(capacity) as u64).unwrap();
        let p = Process {
            id: 1,
            pid: 1,
            uid: 0,
            priority: 0,
            fast_capacity_bytes: None,
            socket: a,
            ring,
            attached_ns: 0,
            objects: BTreeMap::new(),
            records: BTreeMap::new(),
            pending: HashMap::new(),
            stats: ProcessStats::default(),
            resident_bytes_by_tier: vec![],
            split_bytes: 64 << 20,
        };
        (p, b)
    }

    pub(crate) fn push(p: &Process, kind: EventKind, addr: u64, len: u64, flags: u32) {
        assert!(p.ring.header().push(&Event {
            kind: kind as u32,
            flags,
            addr,
            len,
            time_ns: 5,
            site: 9,
        }));
    }

    #[test]
    fn ephemeral_objects_never_become_records() {
        let (mut p, _peer) = process();
        push(&p, EventKind::Alloc, 0x10000, 8192, 0);
        push(&p, EventKind::Alloc, 0x20000, 4096, 0);
        push(&p, EventKind::Free, 0x10000, 0, 0);
        assert_eq!(p.drain(), 3);
        p.commit_pending();
        assert_eq!(p.records.len(), 1);
        assert_eq!(p.stats.ephemeral_objects, 1);
        push(&p, EventKind::Free, 0x20000, 0, 0);
        push(&p, EventKind::Free, 0x30000, 0, 0);
        p.drain();
        assert!(p.records.is_empty());
        assert_eq!(p.stats.frees_of_unknown, 1);
    }

    #[test]
    fn large_objects_split_and_snapshots_are_immediate() {
        let (mut p, _peer) = process();
        push(
            &p,
            EventKind::Alloc,
            0x4000_0000,
            96 << 20,
            event_flags::SNAPSHOT,
        );
        p.drain();
        assert_eq!(p.records.len(), 2, "96 MiB at 64 MiB split = 2 records");
        // Accesses over the second half land on the second record only.
        let second = 0x4000_0000 + (64 << 20);
        let got = p.attribute(second, second + (32 << 20), 10.0);
        assert!((got - 10.0).abs() < 1e-9);
        assert_eq!(p.records[&second].interval_accesses, 10.0);
        assert_eq!(p.records[&0x4000_0000].interval_accesses, 0.0);
        // A region half outside every record attributes half.
        assert!((p.attribute(second - 4096 * 4, second - 4096 * 2, 2.0) - 2.0).abs() < 1e-9);
        assert_eq!(p.attribute(0x1000, 0x2000, 1.0), 0.0);
    }

    #[test]
    fn malformed_events_are_counted_not_trusted() {
        let (mut p, _peer) = process();
        push(&p, EventKind::Alloc, 0x1001, 4096, 0); // unaligned
        push(&p, EventKind::Alloc, u64::MAX - 4095, 8192, 0); // wraps
        push(&p, EventKind::Alloc, 0x1000, 0, 0); // empty
        assert!(p.ring.header().push(&Event {
            kind: 77,
            ..Event::default()
        }));
        p.drain();
        p.commit_pending();
        assert_eq!(p.stats.invalid_events, 4);
        assert!(p.records.is_empty());
    }
}
