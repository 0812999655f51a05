//! One sampling event per CPU, and its mmap'ed ring buffer.
//!
//! The kernel writes records at `data_head`; we read from `data_tail` up to it and then
//! publish the new tail, so the kernel may reuse the space. When the ring is full the kernel
//! drops samples and later writes a `PERF_RECORD_LOST` with their count, which we add up.

use super::event::SampleEvent;
use super::sample::{parse_sample, Sample};
use perf_event_open_sys::bindings::{
    perf_event_attr, perf_event_header, perf_event_mmap_page, PERF_RECORD_LOST, PERF_RECORD_SAMPLE,
};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

/// Data pages per CPU ring (must be a power of two): 512 KiB, about 10,000 samples.
pub const RING_DATA_PAGES: usize = 128;

pub struct PerfRing {
    fd: OwnedFd,
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    sample_type: u64,
}

// SAFETY: the mapping is owned by this value and only touched through &mut self.
unsafe impl Send for PerfRing {}

/// What one record said.
pub enum Record {
    Sample(Sample),
    /// The kernel dropped this many samples.
    Lost(u64),
}

impl PerfRing {
    /// Opens `event` on `cpu`, counting every process (the daemon filters by pid), and maps
    /// its ring.
    pub fn open(event: &SampleEvent, cpu: u32) -> io::Result<PerfRing> {
        // SAFETY: perf_event_attr is plain data; all zero is its documented default.
        let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
        attr.type_ = event.pmu_type;
        attr.size = std::mem::size_of::<perf_event_attr>() as u32;
        attr.config = event.config;
        attr.__bindgen_anon_3.config1 = event.config1;
        attr.__bindgen_anon_1.sample_period = event.period.max(1);
        attr.sample_type = event.sample_type;
        attr.set_precise_ip(event.precise_ip as u64);
        attr.set_exclude_kernel(event.exclude_kernel as u64);
        attr.set_exclude_hv(1);
        attr.set_disabled(1);
        let fd = super::open_on_cpu(&mut attr, cpu)?;
        let page = crate::PAGE_SIZE;
        let map_len = (1 + RING_DATA_PAGES) * page;
        // SAFETY: mapping the event's ring as the kernel expects (1 + 2^n pages, shared).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut ring = PerfRing {
            fd,
            base: base as *mut u8,
            map_len,
            data_offset: page,
            data_size: RING_DATA_PAGES * page,
            sample_type: event.sample_type,
        };
        // Kernels since 4.1 say where the data area is.
        let meta = ring.meta();
        // SAFETY: the metadata page is mapped for the ring's lifetime.
        let (offset, size) = unsafe { ((*meta).data_offset, (*meta).data_size) };
        if size != 0 {
            ring.data_offset = offset as usize;
            ring.data_size = size as usize;
        }
        Ok(ring)
    }

    fn meta(&self) -> *mut perf_event_mmap_page {
        self.base as *mut perf_event_mmap_page
    }

    /// Starts sampling.
    pub fn enable(&self) -> io::Result<()> {
        // SAFETY: PERF_EVENT_IOC_ENABLE on our own event fd.
        let rc = unsafe { perf_event_open_sys::ioctls::ENABLE(self.fd.as_raw_fd(), 0) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads every complete record the kernel has written, and frees their space.
    pub fn drain(&mut self, mut on_record: impl FnMut(Record)) {
        let meta = self.meta();
        // SAFETY: data_head is written by the kernel; read it, then fence before reading data.
        let head = unsafe { std::ptr::read_volatile(&(*meta).data_head) };
        fence(Ordering::Acquire);
        // SAFETY: data_tail is ours to read and write.
        let mut tail = unsafe { std::ptr::read_volatile(&(*meta).data_tail) };
        let mut record = Vec::new();
        while tail < head {
            let header_bytes = self.copy_out(tail, std::mem::size_of::<perf_event_header>());
            let kind = u32::from_ne_bytes(header_bytes[0..4].try_into().unwrap());
            let size = u16::from_ne_bytes(header_bytes[6..8].try_into().unwrap()) as u64;
            if size < 8 || tail + size > head {
                break; // malformed or incomplete: wait for the kernel
            }
            record.clear();
            record.extend(self.copy_out(tail + 8, size as usize - 8));
            match kind {
                PERF_RECORD_SAMPLE => {
                    if let Ok(sample) = parse_sample(&record, self.sample_type) {
                        on_record(Record::Sample(sample));
                    }
                }
                PERF_RECORD_LOST if record.len() >= 16 => {
                    let lost = u64::from_ne_bytes(record[8..16].try_into().unwrap());
                    on_record(Record::Lost(lost));
                }
                _ => {}
            }
            tail += size;
        }
        fence(Ordering::Release);
        // SAFETY: publishing the new tail tells the kernel the space is free.
        unsafe { std::ptr::write_volatile(&mut (*meta).data_tail, tail) };
    }

    /// `len` bytes of the data area from ring position `at`, across the wrap.
    fn copy_out(&self, at: u64, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        let mut position = (at % self.data_size as u64) as usize;
        let mut left = len;
        while left > 0 {
            let chunk = left.min(self.data_size - position);
            // SAFETY: position..position+chunk lies inside the mapped data area.
            let src = unsafe {
                std::slice::from_raw_parts(self.base.add(self.data_offset + position), chunk)
            };
            out.extend_from_slice(src);
            left -= chunk;
            position = 0;
        }
        out
    }
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
    }
}
