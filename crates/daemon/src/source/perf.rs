//! perf address sampling as an access source: one sampling event per CPU, system-wide (the
//! paper's setup; per-process events were reported to sample unevenly across cores), each
//! sample's data address kept when its process is attached. Samples are drained from the rings
//! at every wake-up of the daemon's loop, so a busy interval does not overflow them, and
//! counted per page until the interval ends.

use super::{AccessKind, Observation, Source, Target};
use crate::config::DaemonConfig;
use objtier_sys::perf::event::{AddressFrom, SampleEvent};
use objtier_sys::perf::ring::{PerfRing, Record};
use objtier_sys::perf::sample::{parse_ibs_op_raw, MemOp};
use objtier_wire::PAGE_SIZE;
use std::collections::{HashMap, HashSet};

pub struct PerfSource {
    events: Vec<SampleEvent>,
    rings: Vec<(usize, PerfRing)>,
    pids: HashSet<u32>,
    /// (pid, page, is_store) -> samples this interval.
    pending: HashMap<(u32, u64, bool), u32>,
    lost: u64,
    /// Samples that had no data address, or a process not attached.
    pub ignored: u64,
}

fn explain(event: &SampleEvent, cpu: u32, e: std::io::Error) -> anyhow::Error {
    let paranoid = objtier_sys::perf::paranoid_setting(std::path::Path::new("/proc"));
    let hint = match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "system-wide sampling needs root or CAP_PERFMON (kernel.perf_event_paranoid is \
             {paranoid})"
        ),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            "this machine's PMU does not offer it (a VM without PMU passthrough?)".into()
        }
        Some(libc::EINVAL) => "the kernel refused its attributes (wrong --event terms?)".into(),
        _ => "see perf_event_open(2)".into(),
    };
    anyhow::anyhow!("cannot sample {} on CPU {cpu}: {e}; {hint}", event.name)
}

/// Opens the configured event (`--event`), or the best hardware one this machine has.
pub fn open(config: &DaemonConfig) -> anyhow::Result<PerfSource> {
    let mut events = match &config.perf_event {
        Some(spec) => vec![
            objtier_sys::perf::event::parse_event(&config.sys_root, spec)
                .map_err(|e| anyhow::anyhow!("--event {spec}: {e}"))?,
        ],
        None => objtier_sys::perf::event::discover(&config.sys_root)
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    };
    if let Some(period) = config.perf_period {
        for e in &mut events {
            e.period = period;
        }
    }
    let cpus = objtier_sys::perf::online_cpus(&config.sys_root)?;
    let mut rings = Vec::new();
    for (i, event) in events.iter().enumerate() {
        for &cpu in &cpus {
            let ring = PerfRing::open(event, cpu).map_err(|e| explain(event, cpu, e))?;
            rings.push((i, ring));
        }
    }
    for (_, ring) in &rings {
        ring.enable()?;
    }
    Ok(PerfSource {
        events,
        rings,
        pids: HashSet::new(),
        pending: HashMap::new(),
        lost: 0,
        ignored: 0,
    })
}

impl PerfSource {
    fn drain(&mut self) {
        let page_mask = !(PAGE_SIZE as u64 - 1);
        for (i, ring) in &mut self.rings {
            let from = self.events[*i].address_from;
            let (pids, pending, lost, ignored) = (
                &self.pids,
                &mut self.pending,
                &mut self.lost,
                &mut self.ignored,
            );
            ring.drain(|record| match record {
                Record::Lost(n) => *lost += n,
                Record::Sample(s) => {
                    let (addr, op) = match from {
                        AddressFrom::SampleAddr => (s.addr, s.mem_op()),
                        AddressFrom::IbsRaw => {
                            parse_ibs_op_raw(&s.raw).unwrap_or((0, MemOp::Unknown))
                        }
                    };
                    if addr == 0 || !pids.contains(&s.pid) {
                        *ignored += 1;
                        return;
                    }
                    *pending
                        .entry((s.pid, addr & page_mask, op == MemOp::Store))
                        .or_default() += 1;
                }
            });
        }
    }
}

impl Source for PerfSource {
    fn name(&self) -> &'static str {
        "perf"
    }

    fn describe(&self) -> String {
        let names: Vec<&str> = self.events.iter().map(|e| e.name.as_str()).collect();
        format!(
            "perf ({}, period {}, {} CPU ring(s))",
            names.join(" + "),
            self.events.first().map_or(0, |e| e.period),
            self.rings.len()
        )
    }

    fn follow(&mut self, targets: &[Target]) -> anyhow::Result<()> {
        self.pids = targets.iter().map(|t| t.pid).collect();
        Ok(())
    }

    fn poll(&mut self) {
        self.drain();
    }

    fn observe(&mut self) -> anyhow::Result<Vec<Observation>> {
        self.drain();
        Ok(self
            .pending
            .drain()
            .map(|((pid, page, store), samples)| Observation {
                pid,
                start: page,
                end: page + PAGE_SIZE as u64,
                weight: samples as f64,
                kind: if store {
                    AccessKind::Store
                } else {
                    AccessKind::Load
                },
            })
            .collect())
    }

    fn lost(&self) -> u64 {
        self.lost
    }
}
