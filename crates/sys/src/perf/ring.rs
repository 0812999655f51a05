//! One sampling event per CPU, and its mmap'ed ring buffer.
//!
//! The kernel writes records at `data_head`; we read from `data_tail` up to it and then
//! publish the new tail, so the kernel may reuse the space. When the ring is full the kernel
//! drops samples and later writes a `PERF_RECORD_LOST` with their count, which we add up.
//!
//! An Arm SPE ring ([`PerfRing::open_process`]) belongs to one process on one CPU and has an
//! AUX area besides, where the PMU writes its packets; its ordinary ring only carries the
//! `PERF_RECORD_AUX`s that announce them, read by [`super::aux::AuxReader`]. Why per process:
//! [`AddressFrom::SpeAux`].
//!
//! An event with a [`GroupLeader`] (Intel's `mem-loads` with `mem-loads-aux`) is opened as a
//! group on each CPU: the leader first, counting, then the sampling event in its group. The
//! ring is the sampling event's: its overflows write their samples there.

use super::aux::{parse_aux_record, AuxArea, AuxReader, AuxRecord};
use super::event::{AddressFrom, GroupLeader, SampleEvent};
use super::sample::{parse_sample, Sample};
use perf_event_open_sys::bindings::{
    perf_event_attr, perf_event_header, perf_event_mmap_page, PERF_RECORD_AUX, PERF_RECORD_LOST,
    PERF_RECORD_SAMPLE, PERF_SAMPLE_TIME,
};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

/// Data pages per CPU ring (must be a power of two): 512 KiB, about 10,000 samples.
pub const RING_DATA_PAGES: usize = 128;

/// Data pages of an SPE ring, which carries only `PERF_RECORD_AUX`s (48 bytes each).
pub const SPE_DATA_PAGES: usize = 8;

/// Bytes of an SPE ring's AUX area (a power of two of pages): 1 MiB, about 16,000 SPE
/// records (64 bytes each), some 60 ms of a core's accesses sampled every 4096 operations at
/// 10^9 a second, against a daemon that drains every few milliseconds. Locked memory: one per
/// attached process and CPU (root has no `perf_event_mlock_kb` limit).
pub const SPE_AUX_BYTES: usize = 1 << 20;

struct AuxMap {
    base: *mut u8,
    len: usize,
    reader: AuxReader,
}

pub struct PerfRing {
    fd: OwnedFd,
    /// The leader of `fd`'s group, where the event needs one ([`GroupLeader`]).
    leader: Option<OwnedFd>,
    /// Events of the owner's other threads, writing into this ring (`PERF_EVENT_IOC_SET_OUTPUT`).
    followers: Vec<OwnedFd>,
    cpu: u32,
    /// The process an SPE ring was opened for; `None` system-wide.
    owner: Option<u32>,
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    sample_type: u64,
    sample_id_all: bool,
    aux: Option<AuxMap>,
}

// SAFETY: the mappings are owned by this value and only touched through &mut self.
unsafe impl Send for PerfRing {}

/// What one record said.
pub enum Record<'a> {
    Sample(Sample),
    /// The kernel dropped this many samples.
    Lost(u64),
    /// A chunk of the AUX area (SPE packets), and the process it belongs to: the
    /// `PERF_RECORD_AUX`'s trailer, else the ring's owner.
    Aux {
        pid: Option<u32>,
        record: AuxRecord,
        data: &'a [u8],
    },
}

/// Attributes naming an event of PMU `pmu_type`, everything else zero (the default).
fn base_attr(pmu_type: u32, config: u64, config1: u64, config2: u64) -> perf_event_attr {
    // SAFETY: perf_event_attr is plain data; all zero is its documented default.
    let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = pmu_type;
    attr.size = std::mem::size_of::<perf_event_attr>() as u32;
    attr.config = config;
    attr.__bindgen_anon_3.config1 = config1;
    attr.__bindgen_anon_4.config2 = config2;
    attr
}

/// The attributes of `event`, disabled until [`PerfRing::enable`].
fn attr_for(event: &SampleEvent) -> perf_event_attr {
    let mut attr = base_attr(event.pmu_type, event.config, event.config1, event.config2);
    attr.__bindgen_anon_1.sample_period = event.period.max(event.min_period).max(1);
    attr.sample_type = event.sample_type;
    attr.set_precise_ip(event.precise_ip as u64);
    attr.set_exclude_kernel(event.exclude_kernel as u64);
    attr.set_exclude_hv(event.exclude_hv as u64);
    attr.set_disabled(1);
    if event.sample_type & PERF_SAMPLE_TIME as u64 != 0 {
        // Sample times on CLOCK_MONOTONIC, the daemon's clock, rather than perf's own: an
        // observation's time then compares with the daemon's (a record's last access).
        attr.set_use_clockid(1);
        attr.clockid = libc::CLOCK_MONOTONIC;
    }
    if event.address_from == AddressFrom::SpeAux {
        // Per process: the threads it creates from now on write into the same ring, and each
        // PERF_RECORD_AUX names the task whose chunk it announces.
        attr.set_inherit(1);
        attr.set_sample_id_all(1);
    }
    attr
}

/// The attributes of `event`'s group leader: its PMU and privilege filters, but counting only
/// (no period, no sample fields, not precise: see [`GroupLeader`]), disabled until
/// [`PerfRing::enable`].
fn leader_attr(event: &SampleEvent, leader: &GroupLeader) -> perf_event_attr {
    let mut attr = base_attr(
        event.pmu_type,
        leader.config,
        leader.config1,
        leader.config2,
    );
    attr.set_exclude_kernel(event.exclude_kernel as u64);
    attr.set_exclude_hv(event.exclude_hv as u64);
    attr.set_disabled(1);
    attr
}

/// Opens `event` for `pid` (-1: every process) on `cpu`: its group leader first, where it has
/// one, then the event itself in that group. Returns (leader, event).
fn open_group(
    event: &SampleEvent,
    pid: libc::pid_t,
    cpu: u32,
) -> io::Result<(Option<OwnedFd>, OwnedFd)> {
    let leader = match &event.group_leader {
        Some(l) => Some(super::open_event(
            &mut leader_attr(event, l),
            pid,
            cpu,
            None,
        )?),
        None => None,
    };
    let fd = super::open_event(&mut attr_for(event), pid, cpu, leader.as_ref())?;
    Ok((leader, fd))
}

/// Why the kernel refused to open `event` (`perf_event_open`'s error `e`) and what to do, as
/// `(why, remedy)`: the one explanation `objtier doctor` and the daemon give.
pub fn explain_refusal(event: &SampleEvent, e: &io::Error) -> (String, String) {
    let spe = event.address_from == AddressFrom::SpeAux;
    let other = "use another event (--event PMU/TERMS/), a newer kernel, or --source damon";
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => (
            "not allowed".into(),
            if spe {
                format!(
                    "sampling other users' processes needs root or CAP_PERFMON, and the AUX area \
                     locks {} KiB per process and CPU (beyond kernel.perf_event_mlock_kb without \
                     CAP_IPC_LOCK)",
                    SPE_AUX_BYTES / 1024
                )
            } else {
                "system-wide sampling needs root or CAP_PERFMON, or sysctl \
                 kernel.perf_event_paranoid=0; if the daemon has them, a security module \
                 (SELinux, kernel lockdown) refuses it"
                    .into()
            },
        ),
        Some(libc::ENODATA) => (
            "the PMU or this kernel does not support it as objtier opens it (the kernel wants \
             mem-loads in a group led by mem-loads-aux, and this PMU lists no mem-loads-aux)"
                .into(),
            "use another event (--event mem-stores, or PMU/TERMS/), or --source damon".into(),
        ),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => (
            format!(
                "this machine's PMU does not offer {} (a VM without PMU passthrough?)",
                event.name
            ),
            other.into(),
        ),
        Some(libc::EINVAL) => (
            format!(
                "the kernel refused {}'s attributes as objtier sets them (wrong --event terms, \
                 or a kernel too old for them?)",
                event.name
            ),
            other.into(),
        ),
        _ => (
            "see perf_event_open(2)".into(),
            "use --source damon until this is fixed".into(),
        ),
    }
}

/// Opens `event` on `cpu` as the daemon does (its group leader first, the same attributes;
/// an Arm SPE event for this process, as the daemon checks at start-up) and closes it at once:
/// whether this kernel, PMU and user allow it, with the kernel's errno when not. Maps nothing:
/// the ring's (and SPE's AUX area's) locked memory is not tried.
pub fn try_open(event: &SampleEvent, cpu: u32) -> io::Result<()> {
    let pid = if event.address_from == AddressFrom::SpeAux {
        std::process::id() as libc::pid_t
    } else {
        -1
    };
    open_group(event, pid, cpu).map(drop)
}

impl PerfRing {
    /// Opens `event` on `cpu` (with its group leader), counting every process (the daemon
    /// filters by pid), and maps its ring.
    pub fn open(event: &SampleEvent, cpu: u32) -> io::Result<PerfRing> {
        let (leader, fd) = open_group(event, -1, cpu)?;
        let mut ring = PerfRing::map(fd, event, cpu, None, RING_DATA_PAGES, 0)?;
        ring.leader = leader;
        Ok(ring)
    }

    /// Opens an Arm SPE `event` for process `pid` (its main thread, inherited by the threads
    /// it creates) on `cpu`, and maps its ring and AUX area. The threads it already has join
    /// with [`PerfRing::add_thread`].
    pub fn open_process(event: &SampleEvent, pid: u32, cpu: u32) -> io::Result<PerfRing> {
        let (leader, fd) = open_group(event, pid as libc::pid_t, cpu)?;
        let mut ring = PerfRing::map(fd, event, cpu, Some(pid), SPE_DATA_PAGES, SPE_AUX_BYTES)?;
        ring.leader = leader;
        Ok(ring)
    }

    /// Opens `event` for another thread `tid` of the ring's process, on the ring's CPU, and
    /// sends its output to this ring.
    pub fn add_thread(&mut self, event: &SampleEvent, tid: u32) -> io::Result<()> {
        let mut attr = attr_for(event);
        let fd = super::open_event(&mut attr, tid as libc::pid_t, self.cpu, None)?;
        // SAFETY: PERF_EVENT_IOC_SET_OUTPUT from our new event to our ring's event.
        let rc =
            unsafe { perf_event_open_sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), self.fd.as_raw_fd()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.followers.push(fd);
        Ok(())
    }

    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// The AUX reader's counters (truncations, collisions), for SPE rings.
    pub fn aux_reader(&self) -> Option<&AuxReader> {
        self.aux.as_ref().map(|a| &a.reader)
    }

    fn map(
        fd: OwnedFd,
        event: &SampleEvent,
        cpu: u32,
        owner: Option<u32>,
        data_pages: usize,
        aux_bytes: usize,
    ) -> io::Result<PerfRing> {
        let page = crate::PAGE_SIZE;
        let map_len = (1 + data_pages) * page;
        // The event's ring as the kernel expects it: 1 + 2^n pages.
        let base = map_shared(&fd, map_len, 0)?;
        let mut ring = PerfRing {
            fd,
            leader: None,
            followers: Vec::new(),
            cpu,
            owner,
            base,
            map_len,
            data_offset: page,
            data_size: data_pages * page,
            sample_type: event.sample_type,
            sample_id_all: event.address_from == AddressFrom::SpeAux,
            aux: None,
        };
        // Kernels since 4.1 say where the data area is.
        let meta = ring.meta();
        // SAFETY: the metadata page is mapped for the ring's lifetime.
        let (offset, size) = unsafe { ((*meta).data_offset, (*meta).data_size) };
        if size != 0 {
            ring.data_offset = offset as usize;
            ring.data_size = size as usize;
        }
        if aux_bytes > 0 {
            // The AUX area goes right after the data area: say where and how large in the
            // metadata page, then map exactly that from the same fd. Writable, so that the
            // kernel never overwrites what we have not read (and aux_tail is ours to move).
            let aux_offset = (ring.data_offset + ring.data_size).next_multiple_of(page);
            // SAFETY: the metadata page is mapped and these fields are ours to set.
            unsafe {
                (*meta).aux_offset = aux_offset as u64;
                (*meta).aux_size = aux_bytes as u64;
            }
            // On failure ring's Drop unmaps the ordinary ring.
            let aux = map_shared(&ring.fd, aux_bytes, aux_offset)?;
            ring.aux = Some(AuxMap {
                base: aux,
                len: aux_bytes,
                reader: AuxReader::default(),
            });
        }
        Ok(ring)
    }

    fn meta(&self) -> *mut perf_event_mmap_page {
        self.base as *mut perf_event_mmap_page
    }

    /// Starts sampling (again, after an AUX truncation disabled the event), with the events
    /// of the owner's other threads, and the group leader last: a group member only runs
    /// while its leader does, so the whole group starts together.
    pub fn enable(&self) -> io::Result<()> {
        enable(&self.fd)?;
        for fd in &self.followers {
            // A thread that has exited since is no loss.
            let _ = enable(fd);
        }
        if let Some(leader) = &self.leader {
            enable(leader)?;
        }
        Ok(())
    }

    /// Reads every complete record the kernel has written, and frees their space; then, for
    /// an SPE ring, the AUX chunks those records announced (see [`super::aux`]).
    pub fn drain(&mut self, mut on_record: impl FnMut(Record<'_>)) {
        let meta = self.meta();
        // SAFETY: data_head is written by the kernel; read it, then fence before reading data.
        let head = unsafe { std::ptr::read_volatile(&(*meta).data_head) };
        fence(Ordering::Acquire);
        // SAFETY: data_tail is ours to read and write.
        let tail = unsafe { std::ptr::read_volatile(&(*meta).data_tail) };
        // SAFETY: the data area is mapped for the ring's lifetime; the kernel writes only past
        // `head`, which we do not read.
        let data =
            unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) };
        let (sample_type, sample_id_all) = (self.sample_type, self.sample_id_all);
        let aux = &mut self.aux;
        let tail = walk_records(data, tail, head, |kind, record| match kind {
            PERF_RECORD_SAMPLE => {
                if let Ok(sample) = parse_sample(record, sample_type) {
                    on_record(Record::Sample(sample));
                }
            }
            PERF_RECORD_LOST => {
                if let Some(lost) = lost_count(record) {
                    on_record(Record::Lost(lost));
                }
            }
            PERF_RECORD_AUX => {
                if let (Some(aux), Ok(chunk)) = (
                    aux.as_mut(),
                    parse_aux_record(record, sample_id_all, sample_type),
                ) {
                    aux.reader.push(chunk);
                }
            }
            _ => {}
        });
        fence(Ordering::Release);
        // SAFETY: publishing the new tail tells the kernel the space is free.
        unsafe { std::ptr::write_volatile(&mut (*meta).data_tail, tail) };
        let owner = self.owner;
        if let Some(aux) = &mut self.aux {
            // SAFETY: the metadata page and the AUX area stay mapped while self lives.
            let area = unsafe { AuxArea::new(meta, aux.base, aux.len) };
            let done = aux.reader.consume(&area, |record, data| {
                on_record(Record::Aux {
                    pid: record.pid.or(owner),
                    record: *record,
                    data,
                })
            });
            if done.truncated {
                // The kernel disabled the event when the area filled; there is room now.
                let _ = self.enable();
            }
        }
    }
}

/// Calls `each(kind, body)` for every complete record of a perf data area (`data`, a ring of
/// `data.len()` bytes) from ring position `tail` up to `head`, bodies copied out across the
/// wrap; returns the position after the last one. A record that is malformed (shorter than its
/// header) or not yet complete ends the walk: the kernel is still writing it.
fn walk_records(data: &[u8], mut tail: u64, head: u64, mut each: impl FnMut(u32, &[u8])) -> u64 {
    let header = std::mem::size_of::<perf_event_header>();
    let mut body = Vec::new();
    while tail < head {
        let bytes = copy_out(data, tail, header);
        let kind = u32::from_ne_bytes(bytes[0..4].try_into().unwrap());
        let size = u16::from_ne_bytes(bytes[6..8].try_into().unwrap()) as u64;
        if size < header as u64 || tail + size > head {
            break;
        }
        body.clear();
        body.extend(copy_out(data, tail + header as u64, size as usize - header));
        each(kind, &body);
        tail += size;
    }
    tail
}

/// `len` bytes of the ring `data` from ring position `at`, across the wrap.
fn copy_out(data: &[u8], at: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut position = (at % data.len() as u64) as usize;
    let mut left = len;
    while left > 0 {
        let chunk = left.min(data.len() - position);
        out.extend_from_slice(&data[position..position + chunk]);
        left -= chunk;
        position = 0;
    }
    out
}

/// The count of a `PERF_RECORD_LOST` body (`u64 id, u64 lost`).
fn lost_count(body: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(body.get(8..16)?.try_into().ok()?))
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        if let Some(aux) = &self.aux {
            // SAFETY: unmapping our own AUX mapping once, before the ring it belongs to.
            unsafe { libc::munmap(aux.base as *mut libc::c_void, aux.len) };
        }
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
    }
}
/// `PERF_EVENT_IOC_ENABLE` of one event.
fn enable(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: PERF_EVENT_IOC_ENABLE on our own event fd (and its inherited children).
    let rc = unsafe { perf_event_open_sys::ioctls::ENABLE(fd.as_raw_fd(), 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Maps `len` bytes of the perf event `fd` at `offset`, shared and writable (the ring's tails
/// are ours to move).
fn map_shared(fd: &OwnedFd, len: usize, offset: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh mapping of our own event fd, at an offset and length the kernel checks.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(base as *mut u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use perf_event_open_sys::bindings::{
        PERF_COUNT_SW_CPU_CLOCK, PERF_SAMPLE_ADDR, PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_TID,
    };

    /// Sapphire Rapids' mem-loads as discovery builds it: precise, data source, ldlat, and
    /// mem-loads-aux to lead it.
    fn spr_mem_loads() -> SampleEvent {
        SampleEvent {
            name: "Intel PEBS mem-loads (cpu)".into(),
            pmu_type: 4,
            config: 0x01cd,
            config1: 30,
            config2: 0,
            precise_ip: 2,
            exclude_kernel: true,
            exclude_hv: true,
            sample_type: (PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_DATA_SRC) as u64,
            period: 4096,
            min_period: 1,
            cpus: None,
            address_from: AddressFrom::SampleAddr,
            ldlat_format: None,
            group_leader: Some(GroupLeader {
                name: "mem-loads-aux".into(),
                config: 0x8203,
                config1: 0,
                config2: 0,
            }),
        }
    }

    /// The leader counts (no period: the kernel refuses PEBS on an event that does not
    /// sample) on the same PMU; the member samples, precise, with its data source.
    /// One record of `kind` with `body`, as the kernel lays it out (header, then body).
    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let size = (8 + body.len()) as u16;
        let mut out = kind.to_ne_bytes().to_vec();
        out.extend(0u16.to_ne_bytes()); // misc
        out.extend(size.to_ne_bytes());
        out.extend(body);
        out
    }

    /// Records are read across the ring's wrap, a LOST record's count is taken, and a record
    /// the kernel has not finished (or a malformed header) ends the walk where it starts.
    #[test]
    fn records_are_walked_across_the_wrap_up_to_the_incomplete_one() {
        let sample = record(PERF_RECORD_SAMPLE, &[7u8; 16]);
        let lost = record(
            PERF_RECORD_LOST,
            &[1, 0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0],
        );
        let next = record(PERF_RECORD_SAMPLE, &[9u8; 8]);
        // A 64-byte ring whose writer has wrapped: positions 40.. hold the sample (ending at
        // 64), then the LOST record from 0 (as position 64), then a 16-byte record of which
        // only 8 bytes are published.
        let mut data = vec![0u8; 64];
        let mut at = 40u64;
        for bytes in [&sample, &lost, &next] {
            for (i, b) in bytes.iter().enumerate() {
                data[(at as usize + i) % 64] = *b;
            }
            at += bytes.len() as u64;
        }
        let head = 40 + (sample.len() + lost.len() + 8) as u64;
        let mut seen = Vec::new();
        let tail = walk_records(&data, 40, head, |kind, body| {
            seen.push((kind, body.to_vec()))
        });
        assert_eq!(
            seen,
            vec![
                (PERF_RECORD_SAMPLE, vec![7u8; 16]),
                (PERF_RECORD_LOST, lost[8..].to_vec())
            ]
        );
        assert_eq!(
            tail,
            40 + (sample.len() + lost.len()) as u64,
            "stops before `next`"
        );
        assert_eq!(lost_count(&seen[1].1), Some(42));
        assert_eq!(
            lost_count(&[0u8; 12]),
            None,
            "a short LOST body counts nothing"
        );
        // A header claiming fewer bytes than itself is not walked past.
        let mut bad = vec![0u8; 64];
        bad[..8].copy_from_slice(&record(PERF_RECORD_SAMPLE, &[])[..8]);
        bad[6..8].copy_from_slice(&4u16.to_ne_bytes());
        assert_eq!(walk_records(&bad, 0, 64, |_, _| panic!("malformed")), 0);
    }

    #[test]
    fn a_mem_loads_aux_leader_counts_and_the_member_samples() {
        let event = spr_mem_loads();
        let leader = leader_attr(&event, event.group_leader.as_ref().unwrap());
        assert_eq!((leader.type_, leader.config), (4, 0x8203));
        // SAFETY: reading the union's sample_period member, the one we set (or not).
        assert_eq!(unsafe { leader.__bindgen_anon_1.sample_period }, 0);
        assert_eq!(leader.sample_type, 0);
        assert_eq!(leader.precise_ip(), 0);
        assert_eq!(leader.disabled(), 1, "enabled with the ring");
        assert_eq!(leader.exclude_kernel(), 1);
        let member = attr_for(&event);
        assert_eq!((member.type_, member.config), (4, 0x01cd));
        assert_eq!(unsafe { member.__bindgen_anon_3.config1 }, 30);
        assert_eq!(unsafe { member.__bindgen_anon_1.sample_period }, 4096);
        assert_eq!(member.precise_ip(), 2);
        assert_ne!(member.sample_type & PERF_SAMPLE_DATA_SRC as u64, 0);
    }

    /// AMD IBS refuses every exclude flag (EINVAL) on the kernels that do not filter in
    /// software: none is set, here or on a leader.
    #[test]
    fn ibs_is_opened_without_exclude_flags() {
        let dir = tempfile::tempdir().unwrap();
        let ibs = dir.path().join("bus/event_source/devices/ibs_op");
        std::fs::create_dir_all(&ibs).unwrap();
        std::fs::write(ibs.join("type"), "11\n").unwrap();
        let event = crate::perf::event::discover(dir.path()).unwrap().remove(0);
        let attr = attr_for(&event);
        assert_eq!(attr.type_, 11);
        assert_eq!(
            (
                attr.exclude_kernel(),
                attr.exclude_hv(),
                attr.exclude_user(),
                attr.exclude_idle()
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(unsafe { attr.__bindgen_anon_4.config2 }, 0, "no swfilt");
        // The PEBS events keep theirs.
        let pebs = attr_for(&spr_mem_loads());
        assert_eq!((pebs.exclude_kernel(), pebs.exclude_hv()), (1, 1));
    }

    /// Pins the calling thread to `cpu`; false where it may not run there.
    fn pin_to(cpu: u32) -> bool {
        // SAFETY: a zeroed cpu_set_t with one CPU set, for the calling thread (pid 0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    /// The group path on this machine's kernel, with software events standing in for the
    /// PMU's (there is no PMU here): a counting cpu-clock leads a page-faults event that
    /// samples. The faults this thread takes on CPU 0 come out of the member's ring, which
    /// only happens when the leader was opened, the member joined its group, and both were
    /// enabled.
    #[test]
    fn a_grouped_event_samples_into_its_own_ring() {
        let event = SampleEvent {
            name: "page-faults led by cpu-clock".into(),
            sample_type: (PERF_SAMPLE_TID | PERF_SAMPLE_ADDR) as u64,
            group_leader: Some(GroupLeader {
                name: "cpu-clock".into(),
                config: PERF_COUNT_SW_CPU_CLOCK as u64,
                config1: 0,
                config2: 0,
            }),
            ..super::super::event::page_faults()
        };
        let mut ring = match PerfRing::open(&event, 0) {
            Ok(ring) => ring,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                eprintln!("skipped: system-wide perf events not allowed here ({e})");
                return;
            }
            Err(e) => panic!("opening the group: {e}"),
        };
        assert!(ring.leader.is_some());
        ring.enable().unwrap();
        let pages = 64;
        let seen = std::thread::spawn(move || {
            assert!(pin_to(0));
            // Fresh pages of our own: malloc may hand back memory an earlier test touched.
            let len = pages * crate::PAGE_SIZE;
            // SAFETY: a new private anonymous mapping, unmapped below once counted.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            // Touch each page once: one fault each, on CPU 0.
            for page in 0..pages {
                // SAFETY: a byte inside the mapping, volatile so it is not elided.
                unsafe {
                    std::ptr::write_volatile(base.cast::<u8>().add(page * crate::PAGE_SIZE), 1)
                };
            }
            (base as u64..base as u64 + len as u64, base as usize, len)
        })
        .join()
        .unwrap();
        let (range, base, len) = seen;
        let me = std::process::id();
        let (mut ours, mut lost) = (0, 0);
        ring.drain(|record| match record {
            Record::Sample(s) if s.pid == me && range.contains(&s.addr) => ours += 1,
            Record::Lost(n) => lost += n,
            _ => {}
        });
        // A busy machine's own faults on CPU 0 can fill the ring first: the kernel says so.
        assert!(
            ours >= pages / 2 || lost > 0,
            "{ours} of {pages} faults sampled, none lost"
        );
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }
}
