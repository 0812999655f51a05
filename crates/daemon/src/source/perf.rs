//! perf address sampling as an access source: one sampling event per CPU, system-wide (the
//! paper's setup; per-process events were reported to sample unevenly across cores), each
//! sample's data address kept when its process is attached. Samples are drained from the rings
//! at every wake-up of the daemon's loop, so a busy interval does not overflow them, and
//! counted per page until the interval ends. AMD IBS cannot be told to leave out the kernel, so
//! its samples taken there (instruction or data address in the kernel's half) are dropped here
//! and counted apart.
//!
//! Arm SPE is the exception: its packets name no process, so its event is opened per attached
//! process on each CPU the PMU covers (when [`Source::follow`] first sees the process, with its
//! existing threads joining the process's ring; the ones it creates later inherit the event),
//! and each AUX chunk is attributed to the task its `PERF_RECORD_AUX` names (see
//! `objtier_sys::perf::event::AddressFrom::SpeAux`). A chunk's packets are decoded by
//! `objtier_sys::perf::spe::decode` into (data address, load or store). An AUX truncation
//! (the area filled between two drains) counts as one lost sample: the kernel does not say how
//! many records it dropped.

use super::observation::{AccessKind, Observation, Source, Target};
use crate::config::DaemonConfig;
use objtier_sys::perf::datasrc::{self, DataSource};
use objtier_sys::perf::event::{AddressFrom, SampleEvent};
use objtier_sys::perf::ring::{PerfRing, Record};
use objtier_sys::perf::sample::{is_kernel_address, parse_ibs_op_raw, MemOp};
use objtier_sys::perf::spe;
use objtier_wire::PAGE_SIZE;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

pub struct PerfSource {
    events: Vec<SampleEvent>,
    /// The online CPUs each event covers.
    cpus: Vec<Vec<u32>>,
    /// System-wide rings: (event index, ring).
    rings: Vec<(usize, PerfRing)>,
    /// Arm SPE: each attached process's rings, (event index, ring) per CPU.
    spe: HashMap<u32, Vec<(usize, PerfRing)>>,
    /// Processes whose SPE events could not be opened (said once, not retried).
    spe_failed: HashSet<u32>,
    tally: Tally,
    /// Where the attached processes' threads are listed (`<proc_root>/PID/task`).
    proc_root: std::path::PathBuf,
}

/// What the drained records added up to.
#[derive(Default)]
struct Tally {
    pids: HashSet<u32>,
    /// (pid, page, is_store, data source) -> samples this interval, the latest one's time (0:
    /// the sample had none, it counts as seen when observed), and the samples' weights
    /// (latency) summed. A page's samples from different levels stay apart (a handful of keys
    /// at most: the level and the TLB bit).
    pending: HashMap<PageKey, (u32, u64, u64)>,
    lost: u64,
    /// Samples that had no data address, or a process not attached.
    ignored: u64,
    /// Samples taken in the kernel, dropped: those of a PMU that cannot leave them out (AMD
    /// IBS), and any with a kernel data address.
    kernel: u64,
}

/// Samples of one page are counted together when they agree on these: process, page, whether
/// a store, and data source.
type PageKey = (u32, u64, bool, Option<DataSource>);

/// What one sample says besides its process and address.
struct Counted {
    op: MemOp,
    time_ns: u64,
    /// Its latency, where the PMU weighs samples.
    weight: u64,
    /// Its data source, where the sample has one (`PERF_SAMPLE_DATA_SRC`).
    source: Option<DataSource>,
}

impl Tally {
    fn count(&mut self, pid: u32, addr: u64, sample: Counted) {
        if is_kernel_address(addr) {
            self.kernel += 1;
            return;
        }
        if addr == 0 || !self.pids.contains(&pid) {
            self.ignored += 1;
            return;
        }
        let page = addr & !(PAGE_SIZE as u64 - 1);
        let (samples, latest, weights) = self
            .pending
            .entry((pid, page, sample.op == MemOp::Store, sample.source))
            .or_default();
        *samples += 1;
        *latest = (*latest).max(sample.time_ns);
        *weights = weights.saturating_add(sample.weight);
    }

    /// One record of a ring of an event whose addresses come `from` there.
    fn record(&mut self, from: AddressFrom, record: Record<'_>) {
        match record {
            Record::Lost(n) => self.lost += n,
            Record::Sample(s) => {
                let (addr, op) = match from {
                    AddressFrom::SampleAddr => (s.addr, s.mem_op()),
                    AddressFrom::IbsRaw => match parse_ibs_op_raw(&s.raw) {
                        // IBS samples the kernel too (it takes no exclude flag).
                        Some(ibs) if ibs.in_kernel() => {
                            self.kernel += 1;
                            return;
                        }
                        Some(ibs) => (ibs.addr, ibs.op),
                        None => (0, MemOp::Unknown),
                    },
                    // SPE writes no samples; its data comes as AUX chunks.
                    AddressFrom::SpeAux => (0, MemOp::Unknown),
                };
                self.count(
                    s.pid,
                    addr,
                    Counted {
                        op,
                        time_ns: s.time,
                        weight: s.weight,
                        source: s.data_src.map(datasrc::decode),
                    },
                );
            }
            Record::Aux { pid, record, data } => {
                if record.truncated() {
                    self.lost += 1;
                }
                let accesses = spe::decode(data);
                match pid {
                    Some(pid) => {
                        for a in accesses {
                            // SPE packets carry no time on the daemon's clock.
                            self.count(
                                pid,
                                a.addr,
                                Counted {
                                    op: a.op,
                                    time_ns: 0,
                                    weight: 0,
                                    source: None,
                                },
                            );
                        }
                    }
                    None => self.ignored += accesses.len() as u64,
                }
            }
        }
    }
}

fn explain(proc_root: &Path, event: &SampleEvent, cpu: u32, e: std::io::Error) -> anyhow::Error {
    let paranoid = objtier_sys::perf::paranoid_setting(proc_root);
    let (why, remedy) = objtier_sys::perf::ring::explain_refusal(event, &e);
    anyhow::anyhow!(
        "cannot sample {} on CPU {cpu}: {e}: {why}; {remedy} (kernel.perf_event_paranoid is \
         {paranoid})",
        event.name
    )
}

/// The threads of process `pid` other than its main one, from `<proc_root>/PID/task`.
fn other_threads(proc_root: &Path, pid: u32) -> Vec<u32> {
    let mut tids: Vec<u32> = std::fs::read_dir(proc_root.join(pid.to_string()).join("task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|&tid| tid != pid)
                .collect()
        })
        .unwrap_or_default();
    tids.sort_unstable();
    tids
}

/// Sets `--ldlat` on the events that have a load-latency threshold (Intel's `mem-loads`); says
/// so when none has one and the setting is not the default.
fn set_load_latency(events: &mut [SampleEvent], cycles: u64) -> anyhow::Result<()> {
    let mut applied = false;
    for event in events.iter_mut() {
        applied |= event
            .set_load_latency(cycles)
            .map_err(|e| anyhow::anyhow!("--ldlat {cycles}: {}: {e}", event.name))?;
    }
    if !applied && cycles != objtier_sys::perf::event::DEFAULT_LDLAT {
        tracing::warn!(
            "--ldlat {cycles} has no effect: it applies to Intel's mem-loads, and the events are {}",
            events
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// The online CPUs to open `event` on: those its PMU covers (a hybrid Intel part's `cpu_core`
/// and `cpu_atom` each cover one type of core; an event opened on a CPU of the other type
/// would sample nothing there, or be refused), else all of them.
fn cpus_to_open(event: &SampleEvent, online: &[u32]) -> Vec<u32> {
    online
        .iter()
        .copied()
        .filter(|&cpu| event.covers(cpu))
        .collect()
}

/// Opens the configured event (`--event`), or the best hardware one this machine has.
pub fn open(config: &DaemonConfig) -> anyhow::Result<PerfSource> {
    let mut events = match &config.perf_event {
        Some(spec) => objtier_sys::perf::event::parse_event(&config.sys_root, spec)
            .map_err(|e| anyhow::anyhow!("--event {spec}: {e}"))?,
        None => objtier_sys::perf::event::discover(&config.sys_root)
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    };
    if let Some(period) = config.perf_period {
        for e in &mut events {
            if period < e.min_period {
                tracing::warn!(
                    "{}: period {period} is below the PMU's minimum, using {}",
                    e.name,
                    e.min_period
                );
            }
            e.period = period.max(e.min_period);
        }
    }
    set_load_latency(&mut events, config.perf_ldlat)?;
    let online = objtier_sys::perf::online_cpus(&config.sys_root)?;
    let cpus: Vec<Vec<u32>> = events.iter().map(|e| cpus_to_open(e, &online)).collect();
    let mut rings = Vec::new();
    for (i, event) in events.iter().enumerate() {
        if event.address_from == AddressFrom::SpeAux {
            // Opened per process as processes attach; try it on the daemon itself now, so
            // that what cannot work (privileges, locked memory) is said at the start.
            let cpu = *cpus[i]
                .first()
                .ok_or_else(|| anyhow::anyhow!("{}: none of its CPUs is online", event.name))?;
            PerfRing::open_process(event, std::process::id(), cpu)
                .map_err(|e| explain(&config.proc_root, event, cpu, e))?;
            continue;
        }
        for &cpu in &cpus[i] {
            let ring = PerfRing::open(event, cpu)
                .map_err(|e| explain(&config.proc_root, event, cpu, e))?;
            rings.push((i, ring));
        }
    }
    for (_, ring) in &rings {
        ring.enable()?;
    }
    Ok(PerfSource {
        proc_root: config.proc_root.clone(),
        events,
        cpus,
        rings,
        spe: HashMap::new(),
        spe_failed: HashSet::new(),
        tally: Tally::default(),
    })
}

impl PerfSource {
    /// Samples that had no data address, or a process not attached.
    pub fn ignored(&self) -> u64 {
        self.tally.ignored
    }

    /// Samples taken in the kernel, dropped (see `Tally::kernel`).
    pub fn kernel_samples(&self) -> u64 {
        self.tally.kernel
    }

    fn drain(&mut self) {
        let spe_rings = self.spe.values_mut().flatten();
        for (i, ring) in self.rings.iter_mut().chain(spe_rings) {
            let from = self.events[*i].address_from;
            let tally = &mut self.tally;
            ring.drain(|record| tally.record(from, record));
        }
    }

    /// Opens the SPE events for process `pid`: on each CPU, one for its main thread (inherited
    /// by the threads it creates) with the ring and AUX area, one more for each thread it
    /// already has, sending its output there.
    fn open_spe(&self, proc_root: &Path, pid: u32) -> anyhow::Result<Vec<(usize, PerfRing)>> {
        let threads = other_threads(proc_root, pid);
        let mut rings = Vec::new();
        for (i, event) in self.events.iter().enumerate() {
            if event.address_from != AddressFrom::SpeAux {
                continue;
            }
            for &cpu in &self.cpus[i] {
                let mut ring = PerfRing::open_process(event, pid, cpu)
                    .map_err(|e| explain(proc_root, event, cpu, e))?;
                for &tid in &threads {
                    match ring.add_thread(event, tid) {
                        Ok(()) => {}
                        // Exited since we listed it.
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => return Err(explain(proc_root, event, cpu, e)),
                    }
                }
                ring.enable()?;
                rings.push((i, ring));
            }
        }
        Ok(rings)
    }
}

impl Source for PerfSource {
    fn name(&self) -> &'static str {
        "perf"
    }

    fn describe(&self) -> String {
        let names: Vec<&str> = self.events.iter().map(|e| e.name.as_str()).collect();
        let rings = if self.rings.is_empty() && !self.events.is_empty() {
            format!(
                "per attached process, {} ring(s) now",
                self.spe.values().map(Vec::len).sum::<usize>()
            )
        } else {
            format!("{} CPU ring(s)", self.rings.len())
        };
        format!(
            "perf ({}, period {}, {rings})",
            names.join(" + "),
            self.events.first().map_or(0, |e| e.period),
        )
    }

    fn follow(&mut self, targets: &[Target]) -> anyhow::Result<()> {
        self.tally.pids = targets.iter().map(|t| t.pid).collect();
        if !self
            .events
            .iter()
            .any(|e| e.address_from == AddressFrom::SpeAux)
        {
            return Ok(());
        }
        // What detached processes' rings still hold counts; then their events close.
        self.drain();
        let pids = &self.tally.pids;
        self.spe.retain(|pid, _| pids.contains(pid));
        self.spe_failed.retain(|pid| pids.contains(pid));
        let mut errors = Vec::new();
        for t in targets {
            if self.spe.contains_key(&t.pid) || self.spe_failed.contains(&t.pid) {
                continue;
            }
            match self.open_spe(&self.proc_root, t.pid) {
                Ok(rings) => {
                    self.spe.insert(t.pid, rings);
                }
                Err(e) => {
                    self.spe_failed.insert(t.pid);
                    errors.push(format!("pid {}: {e:#}", t.pid));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(anyhow::anyhow!(
                "Arm SPE not sampling {}",
                errors.join("; ")
            ))
        }
    }

    fn poll_every(&self) -> Option<Duration> {
        // The sample rings hold a few milliseconds of samples at the highest rates.
        Some(Duration::from_millis(10))
    }

    fn poll(&mut self) {
        self.drain();
    }

    fn observe(&mut self) -> anyhow::Result<Vec<Observation>> {
        self.drain();
        let now = crate::clock::monotonic_ns();
        Ok(self
            .tally
            .pending
            .drain()
            .map(
                |((pid, page, store, source), (samples, latest, weights))| Observation {
                    pid,
                    start: page,
                    end: page + PAGE_SIZE as u64,
                    weight: samples as f64,
                    latency: (weights > 0).then_some(weights as f64),
                    data_source: source,
                    kind: if store {
                        AccessKind::Store
                    } else {
                        AccessKind::Load
                    },
                    time_ns: if latest == 0 { now } else { latest },
                },
            )
            .collect())
    }

    fn lost(&self) -> u64 {
        self.tally.lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use objtier_sys::perf::aux::{parse_aux_record, AuxArea, AuxReader};
    use objtier_sys::perf::sample::Sample;
    use perf_event_open_sys::bindings::{
        perf_event_mmap_page, PERF_AUX_FLAG_TRUNCATED, PERF_SAMPLE_TID,
    };

    fn spe_event() -> SampleEvent {
        SampleEvent {
            name: "Arm SPE loads and stores (arm_spe_0)".into(),
            pmu_type: 10,
            config: (1 << 33) | (1 << 34) | (1 << 16),
            config1: 0,
            config2: 0,
            precise_ip: 0,
            exclude_kernel: true,
            exclude_hv: true,
            sample_type: PERF_SAMPLE_TID as u64,
            period: 4096,
            min_period: 256,
            cpus: Some(vec![0]),
            address_from: AddressFrom::SpeAux,
            group_leader: None,
            ldlat_format: None,
        }
    }

    /// A source with no rings open: records are fed to it as its rings would.
    fn source(pids: &[u32]) -> PerfSource {
        PerfSource {
            events: vec![spe_event()],
            cpus: vec![vec![0]],
            rings: Vec::new(),
            spe: HashMap::new(),
            spe_failed: HashSet::new(),
            tally: Tally {
                pids: pids.iter().copied().collect(),
                ..Tally::default()
            },
            proc_root: "/proc".into(),
        }
    }

    /// One SPE record as the PMU writes it (see objtier_sys::perf::spe): PC address, operation
    /// type (load/store class), data virtual address (index 2), End.
    fn spe_record(data_va: u64, store: bool) -> Vec<u8> {
        let mut r = vec![0xb0];
        r.extend(0x40_1000u64.to_le_bytes());
        r.extend([0x49, store as u8]);
        r.push(0xb2);
        r.extend(data_va.to_le_bytes());
        r.push(0x01);
        r
    }

    /// A PERF_RECORD_AUX body with a sample_id_all trailer naming pid (and tid pid + 1).
    fn aux_record_body(offset: u64, size: u64, flags: u64, pid: u32) -> Vec<u8> {
        let pid_tid = ((pid as u64 + 1) << 32) | pid as u64;
        [offset, size, flags, pid_tid]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect()
    }

    /// Two processes' chunks in one (fake) AUX area, the second across its wrap, read the way
    /// PerfRing::drain reads them and counted by the source: each access goes to the process
    /// the chunk's PERF_RECORD_AUX names, per page, loads apart from stores.
    #[test]
    fn spe_aux_chunks_become_observations_of_the_right_process() {
        let (a, b, stranger) = (100u32, 200u32, 300u32);
        // SAFETY: plain data; zero is a fresh ring.
        let mut meta: Box<perf_event_mmap_page> = Box::new(unsafe { std::mem::zeroed() });
        let mut area_bytes = [0u8; 128];
        // Start near the end, as after a while of sampling: the second chunk wraps.
        meta.aux_head = 1000 * 128 + 60;
        meta.aux_tail = meta.aux_head;
        let mut chunks = Vec::new();
        let mut write = |meta: &mut perf_event_mmap_page, bytes: &[u8], flags: u64, pid: u32| {
            let offset = meta.aux_head;
            for (i, byte) in bytes.iter().enumerate() {
                area_bytes[((offset + i as u64) % 128) as usize] = *byte;
            }
            meta.aux_head += bytes.len() as u64;
            chunks.push(aux_record_body(offset, bytes.len() as u64, flags, pid));
        };
        let mut first = spe_record(0x7f00_0000_1040, false);
        first.extend(spe_record(0x7f00_0000_1ff8, false)); // the same page
        first.extend(spe_record(0x7f00_0000_2000, true));
        write(&mut meta, &first, 0, a);
        let second = spe_record(0x5555_0000_3000, true);
        write(&mut meta, &second, 0, b);
        write(&mut meta, &spe_record(0x1000, false), 0, stranger);
        // The area filled later: the kernel said so with an empty, truncated chunk.
        write(&mut meta, &[], PERF_AUX_FLAG_TRUNCATED as u64, a);
        let second_chunk = parse_aux_record(&chunks[1], true, 0).unwrap();
        assert!(
            second_chunk.offset % 128 + second_chunk.size > 128,
            "the second chunk wraps around the area"
        );

        let mut reader = AuxReader::default();
        for body in &chunks {
            reader.push(parse_aux_record(body, true, PERF_SAMPLE_TID as u64).unwrap());
        }
        let mut perf = source(&[a, b]);
        // SAFETY: meta and area_bytes outlive the area.
        let area = unsafe { AuxArea::new(&mut *meta, area_bytes.as_ptr(), area_bytes.len()) };
        let owner = Some(a); // the ring's process, had the records no trailer
        let done = reader.consume(&area, |record, data| {
            perf.tally.record(
                AddressFrom::SpeAux,
                Record::Aux {
                    pid: record.pid.or(owner),
                    record: *record,
                    data,
                },
            )
        });
        assert!(done.truncated);
        assert_eq!(area.tail(), meta.aux_head, "every chunk freed");

        let mut observed = perf.observe().unwrap();
        observed.sort_by_key(|o| (o.pid, o.start));
        let page = PAGE_SIZE as u64;
        let seen: Vec<(u32, u64, f64, AccessKind)> = observed
            .iter()
            .map(|o| {
                assert_eq!(o.end - o.start, page);
                (o.pid, o.start, o.weight, o.kind)
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (a, 0x7f00_0000_1000, 2.0, AccessKind::Load),
                (a, 0x7f00_0000_2000, 1.0, AccessKind::Store),
                (b, 0x5555_0000_3000, 1.0, AccessKind::Store),
            ]
        );
        assert_eq!(perf.ignored(), 1, "the unattached process's access");
        assert_eq!(perf.lost(), 1, "one truncation");
        assert!(
            perf.observe().unwrap().is_empty(),
            "observations are handed over once"
        );
    }

    /// Without a trailer the chunk goes to the ring's process; with neither, nowhere.
    #[test]
    fn spe_chunks_without_a_task_are_ignored() {
        let mut perf = source(&[7]);
        let data = spe_record(0x9000, false);
        let record = Default::default();
        perf.tally.record(
            AddressFrom::SpeAux,
            Record::Aux {
                pid: Some(7),
                record,
                data: &data,
            },
        );
        perf.tally.record(
            AddressFrom::SpeAux,
            Record::Aux {
                pid: None,
                record,
                data: &data,
            },
        );
        assert_eq!(perf.observe().unwrap().len(), 1);
        assert_eq!(perf.ignored(), 1);
    }

    /// An AMD IBS op sample as the ring hands it over: TID, then RAW (caps + IBS MSRs).
    fn ibs_sample(pid: u32, ip: u64, data_addr: u64) -> Sample {
        let load_with_valid_address = 1u64 | (1 << 17);
        let mut raw = 0u32.to_ne_bytes().to_vec();
        for msr in [0, ip, 0, 0, load_with_valid_address, data_addr, 0] {
            raw.extend(msr.to_ne_bytes());
        }
        Sample {
            pid,
            tid: pid,
            raw,
            ..Sample::default()
        }
    }

    /// IBS is opened without exclude flags, so kernel samples arrive: an op whose instruction
    /// or data is in the kernel is dropped and counted, never observed.
    #[test]
    fn ibs_kernel_samples_are_dropped_and_counted() {
        let mut perf = source(&[5]);
        let user_ip = 0x5555_0000_1000;
        for sample in [
            ibs_sample(5, user_ip, 0x7f00_0000_3008),
            // A syscall of the attached process, touching kernel data.
            ibs_sample(5, 0xffff_ffff_8100_1234, 0xffff_8880_1234_5000),
            // The kernel copying from the process's memory (copy_from_user).
            ibs_sample(5, 0xffff_ffff_8100_1234, 0x7f00_0000_3010),
        ] {
            perf.tally
                .record(AddressFrom::IbsRaw, Record::Sample(sample));
        }
        let observed = perf.observe().unwrap();
        assert_eq!(observed.len(), 1, "{observed:?}");
        assert_eq!(
            (observed[0].start, observed[0].weight),
            (0x7f00_0000_3000, 1.0)
        );
        assert_eq!(perf.kernel_samples(), 2);
        assert_eq!(perf.ignored(), 0, "kernel samples are counted apart");
        // PEBS never samples the kernel, but a kernel data address is never a page to move.
        let pebs = Sample {
            pid: 5,
            addr: 0xffff_8880_0000_0040,
            ..Sample::default()
        };
        perf.tally
            .record(AddressFrom::SampleAddr, Record::Sample(pebs));
        assert!(perf.observe().unwrap().is_empty());
        assert_eq!(perf.kernel_samples(), 3);
    }

    /// A page's PEBS samples are kept apart by data source (decoded: the level, the TLB miss),
    /// each group with its latency summed; a sample without one has none.
    #[test]
    fn samples_keep_their_data_source_and_latency() {
        use objtier_sys::perf::datasrc::MemLevel;
        let mut perf = source(&[5]);
        // Two loads from the real capture's L3 word (one after a TLB miss) and one from
        // local DRAM, on one page; one sample with no data source.
        for (data_src, weight) in [
            (Some(0x106_6810_0842), 70),
            (Some(0x106_6810_0842), 80),
            (Some(0x106_5010_0842), 240),
            (Some(0x2 | (0x80 | 0x2) << 5), 400),
            (None, 0),
        ] {
            let sample = Sample {
                pid: 5,
                addr: 0x7f00_0000_3008,
                weight,
                data_src,
                ..Sample::default()
            };
            perf.tally
                .record(AddressFrom::SampleAddr, Record::Sample(sample));
        }
        type Seen = (Option<(MemLevel, bool)>, f64, Option<f64>);
        let mut observed: Vec<Seen> = perf
            .observe()
            .unwrap()
            .into_iter()
            .map(|o| {
                (
                    o.data_source.map(|d| (d.level, d.tlb_miss)),
                    o.weight,
                    o.latency,
                )
            })
            .collect();
        observed.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
        assert_eq!(
            observed,
            [
                (None, 1.0, None),
                (Some((MemLevel::L3, false)), 2.0, Some(150.0)),
                (Some((MemLevel::L3, true)), 1.0, Some(240.0)),
                (Some((MemLevel::Ram, false)), 1.0, Some(400.0)),
            ]
        );
    }

    /// An observation carries its latest sample's time (on the daemon's clock: the events ask
    /// for CLOCK_MONOTONIC); samples with no time count as seen when observed.
    #[test]
    fn observations_carry_the_latest_sample_time() {
        let mut perf = source(&[5]);
        for (addr, time) in [(0x7f00_0000_3008, 2_000), (0x7f00_0000_3010, 9_000)] {
            let sample = Sample {
                pid: 5,
                addr,
                time,
                ..Sample::default()
            };
            perf.tally
                .record(AddressFrom::SampleAddr, Record::Sample(sample));
        }
        let observed = perf.observe().unwrap();
        assert_eq!(
            (observed.len(), observed[0].weight, observed[0].time_ns),
            (1, 2.0, 9_000)
        );
        let before = crate::clock::monotonic_ns();
        let untimed = Sample {
            pid: 5,
            addr: 0x7f00_0000_3008,
            ..Sample::default()
        };
        perf.tally
            .record(AddressFrom::SampleAddr, Record::Sample(untimed));
        assert!(perf.observe().unwrap()[0].time_ns >= before);
    }

    #[test]
    fn a_process_s_other_threads_come_from_its_task_directory() {
        let dir = tempfile::tempdir().unwrap();
        for tid in [42, 43, 45] {
            std::fs::create_dir_all(dir.path().join(format!("42/task/{tid}"))).unwrap();
        }
        assert_eq!(other_threads(dir.path(), 42), vec![43, 45]);
        assert!(other_threads(dir.path(), 7).is_empty(), "gone: none");
    }

    /// Hybrid Intel: each core PMU's events go on that PMU's online CPUs only, so the P-cores
    /// and the E-cores are both sampled, each by its own PMU.
    #[test]
    fn each_event_is_opened_on_the_online_cpus_its_pmu_covers() {
        let event = |cpus: Option<Vec<u32>>| SampleEvent {
            cpus,
            ..spe_event()
        };
        let online: Vec<u32> = (0..20).collect(); // CPUs 20-23 offline
        let core = event(Some((0..8).chain(16..24).collect()));
        let atom = event(Some((8..16).collect()));
        assert_eq!(
            cpus_to_open(&core, &online),
            (0..8).chain(16..20).collect::<Vec<u32>>()
        );
        assert_eq!(cpus_to_open(&atom, &online), (8..16).collect::<Vec<u32>>());
        assert_eq!(cpus_to_open(&event(None), &online), online);
    }

    #[test]
    fn ldlat_is_set_on_the_events_that_have_one() {
        let loads = SampleEvent {
            name: "Intel PEBS mem-loads (cpu)".into(),
            config1: 30,
            ldlat_format: Some("config1:0-15".into()),
            ..spe_event()
        };
        let mut events = vec![loads, spe_event()];
        set_load_latency(&mut events, 64).unwrap();
        assert_eq!((events[0].config1, events[1].config1), (64, 0));
        let err = set_load_latency(&mut events, 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--ldlat") && err.contains("mem-loads"),
            "{err}"
        );
    }

    #[test]
    fn spe_sources_say_they_sample_per_process() {
        let perf = source(&[]);
        let d = perf.describe();
        assert!(
            d.contains("Arm SPE") && d.contains("per attached process"),
            "{d}"
        );
    }
}
