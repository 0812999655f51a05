//! The perf AUX area: where PMUs that trace rather than sample (Arm SPE, Intel PT) write their
//! data, next to the event's ordinary ring.
//!
//! The AUX area is a second ring, mapped from the same fd at the `aux_offset` (past the data
//! area) and of the `aux_size` (a power of two of pages) written into the ordinary ring's
//! `perf_event_mmap_page` before the mapping. Its positions are free-running byte counts: the
//! kernel publishes `aux_head`, we publish `aux_tail`, and a position's byte is at
//! `position % aux_size`. Mapped writable, the area is not overwritten: when it is full the
//! PMU stops, and the kernel reports a truncation and disables the event until it is enabled
//! again.
//!
//! Each time the PMU ends an AUX transaction (its buffer-full interrupt, or the task being
//! switched out), the kernel writes a `PERF_RECORD_AUX` into the ordinary ring: where the new
//! data is (`aux_offset`, `aux_size`: a chunk), flags (`TRUNCATED`: data was lost;
//! `COLLISION`: the PMU dropped samples that collided; `PARTIAL`), and, with `sample_id_all`,
//! the trailer that names the task that was running. Bytes between chunks are padding the
//! driver skipped over (SPE aligns records and never lets one straddle the end of the area).
//!
//! [`AuxReader`] queues the chunks the ordinary ring announced and hands each one over, copied
//! out across the wrap, once `aux_head` has passed its end; then it moves `aux_tail` past the
//! last chunk handed over (a release store, after our reads of the data). A chunk's bytes are
//! decoded alone, so a record cut by a truncation cannot spoil the chunks after it.
//!
//! Pure over memory: [`AuxArea`] takes the metadata page and the area as pointers, so the tests
//! drive the same code over a fake page and a `Vec`.

use super::sample::SampleError;
use perf_event_open_sys::bindings::{
    perf_event_mmap_page, PERF_AUX_FLAG_COLLISION, PERF_AUX_FLAG_TRUNCATED, PERF_SAMPLE_CPU,
    PERF_SAMPLE_ID, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID,
    PERF_SAMPLE_TIME,
};
use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};

/// One `PERF_RECORD_AUX`: a chunk of new AUX data, and whose it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuxRecord {
    /// Free-running position of the chunk's first byte.
    pub offset: u64,
    pub size: u64,
    pub flags: u64,
    /// The task running when the chunk ended, from the `sample_id_all` trailer (`PERF_SAMPLE_TID`).
    pub pid: Option<u32>,
    pub tid: Option<u32>,
}

impl AuxRecord {
    /// The PMU lost data: the area was full (the kernel then disabled the event), or the
    /// hardware said so.
    pub fn truncated(&self) -> bool {
        self.flags & PERF_AUX_FLAG_TRUNCATED as u64 != 0
    }
    /// The PMU dropped samples that collided with one in flight (SPE: informational).
    pub fn collision(&self) -> bool {
        self.flags & PERF_AUX_FLAG_COLLISION as u64 != 0
    }
    fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }
}

fn word(bytes: &[u8], at: usize) -> Result<u64, SampleError> {
    bytes
        .get(at..at + 8)
        .map(|b| u64::from_ne_bytes(b.try_into().unwrap()))
        .ok_or(SampleError::Truncated(at))
}

/// The (pid, tid) of a `sample_id_all` trailer laid out for `sample_type`: pid and tid first
/// when `PERF_SAMPLE_TID` is set, then time, id, stream id, cpu and identifier, each present
/// when set. `None` without `PERF_SAMPLE_TID`.
pub fn parse_sample_id(
    trailer: &[u8],
    sample_type: u64,
) -> Result<Option<(u32, u32)>, SampleError> {
    let has = |flag: u32| sample_type & flag as u64 != 0;
    let words = [
        PERF_SAMPLE_TID,
        PERF_SAMPLE_TIME,
        PERF_SAMPLE_ID,
        PERF_SAMPLE_STREAM_ID,
        PERF_SAMPLE_CPU,
        PERF_SAMPLE_IDENTIFIER,
    ]
    .into_iter()
    .filter(|&f| has(f))
    .count();
    if trailer.len() < words * 8 {
        return Err(SampleError::Truncated(trailer.len()));
    }
    if !has(PERF_SAMPLE_TID) {
        return Ok(None);
    }
    let pid_tid = word(trailer, 0)?.to_ne_bytes();
    Ok(Some((
        u32::from_ne_bytes(pid_tid[0..4].try_into().unwrap()),
        u32::from_ne_bytes(pid_tid[4..8].try_into().unwrap()),
    )))
}

/// Decodes the body of a `PERF_RECORD_AUX` (after its 8-byte header): `aux_offset`,
/// `aux_size`, `flags`, then the `sample_id_all` trailer when the event asked for one.
pub fn parse_aux_record(
    body: &[u8],
    sample_id_all: bool,
    sample_type: u64,
) -> Result<AuxRecord, SampleError> {
    let mut record = AuxRecord {
        offset: word(body, 0)?,
        size: word(body, 8)?,
        flags: word(body, 16)?,
        ..AuxRecord::default()
    };
    if sample_id_all {
        if let Some((pid, tid)) = parse_sample_id(&body[24..], sample_type)? {
            record.pid = Some(pid);
            record.tid = Some(tid);
        }
    }
    Ok(record)
}

/// An AUX area as mapped: the ordinary ring's metadata page and the area itself.
pub struct AuxArea {
    meta: *mut perf_event_mmap_page,
    base: *const u8,
    size: u64,
}

impl AuxArea {
    /// # Safety
    /// `meta` must point to a `perf_event_mmap_page` and `base` to `size` readable bytes, both
    /// valid (and `meta` writable) for as long as the `AuxArea` is used; `size` must not be 0.
    pub unsafe fn new(meta: *mut perf_event_mmap_page, base: *const u8, size: usize) -> AuxArea {
        assert!(size > 0, "an empty AUX area");
        AuxArea {
            meta,
            base,
            size: size as u64,
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// What the kernel has published; our reads of the data come after (acquire).
    pub fn head(&self) -> u64 {
        // SAFETY: meta is valid (new's contract); the kernel writes aux_head concurrently.
        let head = unsafe { std::ptr::read_volatile(&raw const (*self.meta).aux_head) };
        fence(Ordering::Acquire);
        head
    }

    pub fn tail(&self) -> u64 {
        // SAFETY: meta is valid; aux_tail is ours.
        unsafe { std::ptr::read_volatile(&raw const (*self.meta).aux_tail) }
    }

    /// Frees the space before `tail` for the kernel; our reads of it come first (release).
    pub fn set_tail(&self, tail: u64) {
        fence(Ordering::Release);
        // SAFETY: meta is valid and writable; aux_tail is ours to write.
        unsafe { std::ptr::write_volatile(&raw mut (*self.meta).aux_tail, tail) };
    }

    /// Replaces `out` with the `len` bytes from position `at`, across the wrap.
    pub fn copy_out(&self, at: u64, len: usize, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(len);
        let mut position = at % self.size;
        let mut left = len as u64;
        while left > 0 {
            let chunk = left.min(self.size - position);
            // SAFETY: position..position + chunk lies inside the area (new's contract); these
            // bytes are before aux_head, so the kernel is done with them until we free them.
            let src = unsafe {
                std::slice::from_raw_parts(self.base.add(position as usize), chunk as usize)
            };
            out.extend_from_slice(src);
            left -= chunk;
            position = 0;
        }
    }
}

/// What one [`AuxReader::consume`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Consumed {
    pub chunks: u64,
    pub bytes: u64,
    /// A chunk said data was lost: the kernel disabled the event, enable it again.
    pub truncated: bool,
}

/// Chunks announced by `PERF_RECORD_AUX`, waiting for their bytes to be read. See the module
/// doc.
#[derive(Debug, Default)]
pub struct AuxReader {
    pending: VecDeque<AuxRecord>,
    buffer: Vec<u8>,
    /// Chunks that flagged lost data, since the start.
    pub truncations: u64,
    /// Chunks that flagged collisions, since the start.
    pub collisions: u64,
    /// Chunks whose bytes could not be read (before the tail, or larger than the area).
    pub skipped: u64,
}

impl AuxReader {
    /// Queues a chunk from a `PERF_RECORD_AUX`, in ring order.
    pub fn push(&mut self, record: AuxRecord) {
        self.pending.push_back(record);
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Hands over every queued chunk whose bytes the kernel has published (`aux_head` at or
    /// past its end), in order, with its bytes; then frees the area up to the end of the last
    /// one (padding before a chunk goes with it). A chunk not yet below `aux_head` waits, and
    /// so do the ones after it.
    pub fn consume(
        &mut self,
        area: &AuxArea,
        mut on_chunk: impl FnMut(&AuxRecord, &[u8]),
    ) -> Consumed {
        let head = area.head();
        let old_tail = area.tail();
        let mut tail = old_tail;
        let mut done = Consumed::default();
        while let Some(&chunk) = self.pending.front() {
            if chunk.end() > head {
                break;
            }
            self.pending.pop_front();
            done.chunks += 1;
            if chunk.truncated() {
                self.truncations += 1;
                done.truncated = true;
            }
            if chunk.collision() {
                self.collisions += 1;
            }
            if chunk.offset < tail || chunk.size > area.size() {
                // Already freed (the kernel may have reused it), or impossible: not ours to read.
                if chunk.size > 0 {
                    self.skipped += 1;
                }
                tail = tail.max(chunk.end().min(head));
                continue;
            }
            if chunk.size > 0 {
                area.copy_out(chunk.offset, chunk.size as usize, &mut self.buffer);
                done.bytes += chunk.size;
                on_chunk(&chunk, &self.buffer);
            } else {
                on_chunk(&chunk, &[]);
            }
            tail = chunk.end();
        }
        if tail != old_tail {
            area.set_tail(tail);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perf_event_open_sys::bindings::{PERF_AUX_FLAG_PARTIAL, PERF_SAMPLE_TIME};

    /// A metadata page and an AUX area in ordinary memory, written the way the kernel would.
    struct FakeAux {
        pub meta: Box<perf_event_mmap_page>,
        pub data: Vec<u8>,
    }

    impl FakeAux {
        pub fn new(size: usize) -> FakeAux {
            // SAFETY: the page is plain data; all zero is a fresh ring.
            let meta: Box<perf_event_mmap_page> = Box::new(unsafe { std::mem::zeroed() });
            FakeAux {
                meta,
                data: vec![0; size],
            }
        }
        /// The kernel writing `bytes` at the head, then publishing the head; returns the chunk's
        /// record (as `PERF_RECORD_AUX` would say it).
        pub fn write(&mut self, bytes: &[u8], flags: u64, pid: u32) -> AuxRecord {
            let offset = self.meta.aux_head;
            let size = self.data.len() as u64;
            for (i, b) in bytes.iter().enumerate() {
                self.data[((offset + i as u64) % size) as usize] = *b;
            }
            self.meta.aux_head += bytes.len() as u64;
            AuxRecord {
                offset,
                size: bytes.len() as u64,
                flags,
                pid: Some(pid),
                tid: Some(pid + 1),
            }
        }
        pub fn skip(&mut self, padding: u64) {
            self.meta.aux_head += padding;
        }
        pub fn area(&mut self) -> AuxArea {
            // SAFETY: both live as long as self, which the tests keep while using the area.
            unsafe { AuxArea::new(&mut *self.meta, self.data.as_ptr(), self.data.len()) }
        }
    }

    fn le(fields: &[u64]) -> Vec<u8> {
        fields.iter().flat_map(|f| f.to_ne_bytes()).collect()
    }

    #[test]
    fn aux_records_parse_with_and_without_the_sample_id_trailer() {
        let pid_tid = (4321u64 << 32) | 1234; // pid 1234, tid 4321
        let body = le(&[0x1_0000, 512, PERF_AUX_FLAG_TRUNCATED as u64, pid_tid]);
        let r = parse_aux_record(&body, true, PERF_SAMPLE_TID as u64).unwrap();
        assert_eq!((r.offset, r.size), (0x1_0000, 512));
        assert!(r.truncated() && !r.collision());
        assert_eq!((r.pid, r.tid), (Some(1234), Some(4321)));
        // Without sample_id_all, no trailer and no task.
        let r = parse_aux_record(&body[..24], false, PERF_SAMPLE_TID as u64).unwrap();
        assert_eq!(r.pid, None);
        // TIME and IDENTIFIER in the trailer too: pid/tid still come first.
        let st = (PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_IDENTIFIER) as u64;
        let body = le(&[0, 64, PERF_AUX_FLAG_COLLISION as u64, pid_tid, 99, 7]);
        let r = parse_aux_record(&body, true, st).unwrap();
        assert!(r.collision());
        assert_eq!(r.pid, Some(1234));
        // A trailer shorter than its layout, or a record cut short, is an error.
        assert!(parse_aux_record(&body[..40], true, st).is_err());
        assert!(parse_aux_record(&body[..20], false, 0).is_err());
        // A trailer without TID says nothing about the task.
        assert_eq!(
            parse_sample_id(&le(&[5]), PERF_SAMPLE_TIME as u64),
            Ok(None)
        );
    }

    #[test]
    fn chunks_are_handed_over_in_order_and_the_tail_follows() {
        let mut fake = FakeAux::new(64);
        let a = fake.write(&[1; 16], 0, 10);
        let b = fake.write(&[2; 8], 0, 11);
        let mut reader = AuxReader::default();
        reader.push(a);
        reader.push(b);
        let mut seen = Vec::new();
        let area = fake.area();
        let done = reader.consume(&area, |r, bytes| seen.push((r.pid, bytes.to_vec())));
        assert_eq!(seen, vec![(Some(10), vec![1; 16]), (Some(11), vec![2; 8])]);
        assert_eq!(
            done,
            Consumed {
                chunks: 2,
                bytes: 24,
                truncated: false
            }
        );
        assert_eq!(area.tail(), 24, "aux_tail freed both chunks");
        assert_eq!(reader.pending(), 0);
    }

    #[test]
    fn a_chunk_split_across_the_wrap_is_read_whole() {
        let mut fake = FakeAux::new(64);
        let mut reader = AuxReader::default();
        // Fill and consume 48 bytes, so the next chunk starts 16 bytes before the end.
        let first = fake.write(&[9; 48], 0, 1);
        reader.push(first);
        reader.consume(&fake.area(), |_, _| {});
        let bytes: Vec<u8> = (0..32).collect();
        let split = fake.write(&bytes, 0, 2);
        assert_eq!((split.offset, split.size), (48, 32));
        assert_eq!(&fake.data[48..64], &bytes[..16]);
        assert_eq!(&fake.data[0..16], &bytes[16..]);
        reader.push(split);
        let mut seen = Vec::new();
        let area = fake.area();
        reader.consume(&area, |_, b| seen.extend_from_slice(b));
        assert_eq!(seen, bytes);
        assert_eq!(area.tail(), 80, "positions run on past the area's size");
        assert_eq!(area.tail() % 64, 16);
    }

    #[test]
    fn chunks_wait_for_the_head_and_padding_is_freed_with_the_next_chunk() {
        let mut fake = FakeAux::new(64);
        let mut reader = AuxReader::default();
        let a = fake.write(&[1; 8], 0, 1);
        fake.skip(8); // the driver padded to an alignment boundary: no record for it
        let b = fake.write(&[2; 8], 0, 1);
        assert_eq!(b.offset, 16);
        // The record of a third chunk seen before the head that covers it was published.
        let c = AuxRecord {
            offset: 24,
            size: 8,
            ..AuxRecord::default()
        };
        for r in [a, b, c] {
            reader.push(r);
        }
        let mut seen = Vec::new();
        let area = fake.area();
        let done = reader.consume(&area, |r, _| seen.push(r.offset));
        assert_eq!(seen, vec![0, 16]);
        assert_eq!(done.chunks, 2);
        assert_eq!(area.tail(), 24, "padding freed with the chunk after it");
        assert_eq!(reader.pending(), 1, "the third chunk waits");
        fake.write(&[3; 8], 0, 1);
        let area = fake.area();
        let done = reader.consume(&area, |r, b| seen.push(r.offset + b[0] as u64));
        assert_eq!(done.chunks, 1);
        assert_eq!(seen, vec![0, 16, 27]);
        assert_eq!(area.tail(), 32);
    }

    #[test]
    fn truncation_is_reported_and_counted() {
        let mut fake = FakeAux::new(64);
        let mut reader = AuxReader::default();
        // The area filled: the last data, then an empty chunk flagged TRUNCATED after the
        // driver's padding (perf_aux_output_skip, then perf_aux_output_end with size 0).
        let full = fake.write(&[4; 40], PERF_AUX_FLAG_PARTIAL as u64, 3);
        fake.skip(24);
        let lost = AuxRecord {
            offset: fake.meta.aux_head,
            size: 0,
            flags: PERF_AUX_FLAG_TRUNCATED as u64,
            pid: Some(3),
            tid: Some(3),
        };
        reader.push(full);
        reader.push(lost);
        let mut sizes = Vec::new();
        let area = fake.area();
        let done = reader.consume(&area, |r, b| sizes.push((r.truncated(), b.len())));
        assert_eq!(sizes, vec![(false, 40), (true, 0)]);
        assert!(done.truncated);
        assert_eq!(reader.truncations, 1);
        assert_eq!(area.tail(), 64, "the whole area is free again");
        // A chunk the tail has already passed is not read (its bytes may be reused).
        reader.push(AuxRecord {
            offset: 8,
            size: 8,
            ..AuxRecord::default()
        });
        let mut called = false;
        reader.consume(&area, |_, _| called = true);
        assert!(!called);
        assert_eq!(reader.skipped, 1);
        assert_eq!(area.tail(), 64, "the tail never moves back");
    }
}
