//! Which sampling event to use: discovered from `/sys/bus/event_source/devices` (the PMUs the
//! kernel registered, their named events and their config formats), or named with `--event`.
//!
//! - Intel PEBS: the `cpu` PMU's `mem-loads` event (precise, with a load latency threshold) and
//!   `mem-stores`, sampling the data address, latency and data source. Hybrid parts have one
//!   core PMU per core type (`cpu_core` for P-cores, `cpu_atom` for E-cores), each listing its
//!   CPUs in its `cpus` file: each one's events are opened on its own CPUs only, so that E-cores
//!   are sampled too.
//!   Where the PMU has a `mem-loads-aux` event (Sapphire Rapids and later, hybrid P-cores), the
//!   kernel refuses a `mem-loads` that asks for the data source unless that event leads its
//!   group ([`GroupLeader`]).
//! - AMD IBS: the `ibs_op` PMU; the data address comes in the raw IBS registers.
//! - Arm SPE: the `arm_spe_*` PMU (one per CPU type on heterogeneous machines), sampling loads
//!   and stores (`load_filter`, `store_filter`, `jitter` from its `format/` files; no physical
//!   addresses, no timestamps) at least every `caps/min_interval` operations, on the CPUs of its
//!   `cpumask`. Its records go to the perf AUX area, not to `PERF_RECORD_SAMPLE`s: the event is
//!   opened per attached process ([`AddressFrom::SpeAux`] says why), its AUX area read by
//!   [`super::aux`] and decoded by [`super::spe`].
//! - `page-faults`: the kernel's software event, whose samples carry the faulting address. No
//!   hardware needed, so it proves the whole path on machines without a PMU (coarse: it sees
//!   first touches and refaults only).

use perf_event_open_sys::bindings::{
    PERF_COUNT_SW_PAGE_FAULTS, PERF_SAMPLE_ADDR, PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_PERIOD,
    PERF_SAMPLE_RAW, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_WEIGHT, PERF_TYPE_SOFTWARE,
};
use std::path::Path;

/// The paper's sampling period.
pub const DEFAULT_PERIOD: u64 = 4096;

/// The load-latency threshold of `mem-loads`, in core cycles (`--ldlat`): only loads that took
/// at least this long are sampled. The kernel's alias says `ldlat=3`, which samples nearly
/// every load (L1 hits take about 5 cycles: from memory of Intel's optimization manual, not
/// checked here); 30 is `perf mem`'s default (`perf_mem_events__loads_ldlat` in
/// tools/perf/util/mem-events.c, read), past the L1 and most L2 hits, so that samples go to
/// the loads that reach the caches and memory objtier's tiers differ in.
pub const DEFAULT_LDLAT: u64 = 30;

/// Where a sample's data address comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressFrom {
    /// `PERF_SAMPLE_ADDR`.
    SampleAddr,
    /// AMD IBS: the raw IBS registers.
    IbsRaw,
    /// Arm SPE: packets in the event's AUX area ([`super::aux`], decoded by [`super::spe`]).
    ///
    /// SPE packets carry no process id (a Context packet holds CONTEXTIDR, which is the pid
    /// only on kernels built with `CONFIG_PID_IN_CONTEXTIDR`, for openers with `CAP_PERFMON`,
    /// and not across pid namespaces). So an SPE event is opened per attached process, on each
    /// CPU, inherited by the threads it creates (and once more for each thread it already
    /// has, writing into the same buffer), never system-wide: the kernel schedules a task's
    /// event in and out with the task and closes the AUX transaction when it is switched out,
    /// so each `PERF_RECORD_AUX` chunk holds one task's records, and the record's
    /// `sample_id_all` trailer (`PERF_SAMPLE_TID`) names that task. A system-wide SPE event
    /// stays on across context switches: its chunks mix processes, and the trailer names
    /// whoever ran when the chunk happened to end.
    SpeAux,
}

/// An event of the sampling event's PMU opened first on each CPU, as the leader of the sampling
/// event's group: counting only (no period, no PEBS), its count never read.
///
/// Intel's `mem-loads-aux` (`event=0x03,umask=0x82`): from Sapphire Rapids on, and on hybrid
/// P-cores (that `require_mem_loads_aux_event` limits it to `cpu_core` on hybrid parts is
/// from memory; objtier simply follows sysfs: a PMU that lists `mem-loads-aux` gets the
/// group), the load-latency event reports its data source correctly only while this auxiliary
/// event is scheduled with it, so `intel_pmu_hw_config` (arch/x86/events/intel/core.c) fails a
/// `mem-loads` that samples `PERF_SAMPLE_DATA_SRC` with `ENODATA` unless the aux event is its
/// group leader or a sibling before it. `perf mem` opens `{mem-loads-aux,mem-loads}` for the
/// same reason (tools/perf/arch/x86/util/mem-events.c). It must not be precise:
/// `x86_pmu_hw_config` refuses PEBS on an event that does not sample (`EINVAL`).
#[derive(Clone, Debug, PartialEq)]
pub struct GroupLeader {
    /// Its sysfs name, for messages: `mem-loads-aux`.
    pub name: String,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
}

/// A sampling event, ready for `perf_event_open`.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleEvent {
    /// What it is, for logs and doctor: "Intel PEBS mem-loads (cpu)".
    pub name: String,
    pub pmu_type: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    pub precise_ip: u8,
    /// Ask the PMU to leave out samples taken in the kernel (`exclude_kernel`).
    pub exclude_kernel: bool,
    /// Ask the PMU to leave out the hypervisor (`exclude_hv`). False, with `exclude_kernel`,
    /// where the PMU refuses every exclude flag (AMD IBS); the perf source then drops kernel
    /// samples itself.
    pub exclude_hv: bool,
    pub sample_type: u64,
    pub period: u64,
    /// The smallest period the PMU takes (Arm SPE's `caps/min_interval`); 1 elsewhere.
    pub min_period: u64,
    /// The CPUs the PMU covers, where it says ([`pmu_cpus`]: hybrid Intel's `cpu_core` and
    /// `cpu_atom` each cover one type of core, as may Arm SPE); `None` for every online CPU.
    pub cpus: Option<Vec<u32>>,
    pub address_from: AddressFrom,
    /// The event to open before this one on each CPU, leading its group; this one samples.
    pub group_leader: Option<GroupLeader>,
    /// The PMU's `format/ldlat` spec (`config1:0-15`), where the load-latency threshold is the
    /// event's to set ([`SampleEvent::set_load_latency`]): an alias that carries `ldlat`, as
    /// `mem-loads` does. `None` elsewhere, and for `PMU/TERMS/`, whose `ldlat` is the user's.
    pub ldlat_format: Option<String>,
}

impl SampleEvent {
    /// Whether the event's PMU covers `cpu` (every CPU when it does not say).
    pub fn covers(&self, cpu: u32) -> bool {
        self.cpus
            .as_ref()
            .is_none_or(|covered| covered.contains(&cpu))
    }

    /// Sets the load-latency threshold to `cycles`, overriding what the alias said. Returns
    /// whether the event has one (false: nothing changed); an error for 0, or a value that
    /// does not fit the PMU's term.
    pub fn set_load_latency(&mut self, cycles: u64) -> Result<bool, String> {
        let Some(spec) = &self.ldlat_format else {
            return Ok(false);
        };
        if cycles == 0 {
            return Err("the load latency threshold must be at least 1 cycle".into());
        }
        let mut words = [self.config, self.config1, self.config2];
        Format::parse(spec)?
            .replace(cycles, &mut words)
            .map_err(|e| format!("load latency threshold: {e}"))?;
        [self.config, self.config1, self.config2] = words;
        Ok(true)
    }
}

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// A PMU format spec (`<pmu>/format/<term>`) parsed: which config word a term goes to, and
/// its bit ranges as (lowest bit, width), the value's low bits going to the first.
struct Format {
    slot: usize,
    ranges: Vec<(u32, u32)>,
}

impl Format {
    /// Parses `config:0-7`, `config1:0-15`, `config:0-7,32-35`, `config2:63`.
    fn parse(format: &str) -> Result<Format, String> {
        let bad = || format!("bad format {format:?}");
        let (word, ranges) = format.split_once(':').ok_or_else(bad)?;
        let slot = match word {
            "config" => 0,
            "config1" => 1,
            "config2" => 2,
            _ => return Err(format!("unsupported format word {word:?}")),
        };
        let ranges = ranges
            .split(',')
            .map(|range| {
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                let (lo, hi) = (
                    lo.parse::<u32>().map_err(|_| bad())?,
                    hi.parse::<u32>().map_err(|_| bad())?,
                );
                if lo > hi || hi > 63 {
                    return Err(bad());
                }
                Ok((lo, hi - lo + 1))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Format { slot, ranges })
    }

    /// How many bits of a value the term holds.
    fn width(&self) -> u32 {
        self.ranges.iter().map(|&(_, width)| width).sum()
    }

    fn mask(width: u32) -> u64 {
        u64::MAX.checked_shr(64 - width).unwrap_or(0)
    }

    /// ORs `value` into the term's bits.
    fn encode(&self, value: u64, words: &mut [u64; 3]) {
        let mut shift = 0;
        for &(lo, width) in &self.ranges {
            words[self.slot] |= (value.checked_shr(shift).unwrap_or(0) & Self::mask(width)) << lo;
            shift += width;
        }
    }

    /// Sets the term's bits to `value`, whatever they held; an error if it does not fit.
    fn replace(&self, value: u64, words: &mut [u64; 3]) -> Result<(), String> {
        if value & !Self::mask(self.width()) != 0 {
            return Err(format!(
                "{value} does not fit the term's {} bits",
                self.width()
            ));
        }
        for &(lo, width) in &self.ranges {
            words[self.slot] &= !(Self::mask(width) << lo);
        }
        self.encode(value, words);
        Ok(())
    }
}

/// Sets `value` into the bits a format spec names, e.g. `config:0-7`, `config1:0-15`,
/// `config:0-7,32-35` (low bits of the value go to the first range).
fn encode_term(format: &str, value: u64, words: &mut [u64; 3]) -> Result<(), String> {
    Format::parse(format)?.encode(value, words);
    Ok(())
}

/// Encodes `event=0xcd,umask=0x1,ldlat=3` with the PMU's format files.
pub fn encode_terms(pmu_dir: &Path, terms: &str) -> Result<[u64; 3], String> {
    let mut words = [0u64; 3];
    for term in terms.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (name, value) = term.split_once('=').unwrap_or((term, "1"));
        let value = match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => value.parse(),
        }
        .map_err(|_| format!("{term:?}: the value is not a number"))?;
        let format = read_trim(&pmu_dir.join("format").join(name)).ok_or_else(|| {
            format!(
                "{term:?}: {} has no format term {name:?}",
                pmu_dir.display()
            )
        })?;
        encode_term(&format, value, &mut words)?;
    }
    Ok(words)
}

/// The CPUs a PMU covers: its `cpus` file (hybrid Intel core PMUs), else its `cpumask` (Arm
/// SPE), in the kernel's list format ("0-7,16-23"); `None` when it has neither, which means
/// every CPU (the `cpu` PMU of a non-hybrid part, `ibs_op`).
pub fn pmu_cpus(pmu_dir: &Path) -> Result<Option<Vec<u32>>, String> {
    for file in ["cpus", "cpumask"] {
        let path = pmu_dir.join(file);
        if let Some(text) = read_trim(&path) {
            return crate::topology::parse_list(&text)
                .map(Some)
                .ok_or_else(|| format!("{} is not a CPU list: {text:?}", path.display()));
        }
    }
    Ok(None)
}

fn pmu_type(pmu_dir: &Path) -> Result<u32, String> {
    read_trim(&pmu_dir.join("type"))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("cannot read {}", pmu_dir.join("type").display()))
}

/// The name of the event that must lead a `mem-loads` group where the PMU has it.
pub const MEM_LOADS_AUX: &str = "mem-loads-aux";

/// `mem-loads-aux` of the PMU in `pmu_dir`, when it has one and `name` is the event that needs
/// it (`mem-loads`; stores do not).
fn mem_loads_leader(pmu_dir: &Path, name: &str) -> Result<Option<GroupLeader>, String> {
    if name != "mem-loads" {
        return Ok(None);
    }
    let Some(terms) = read_trim(&pmu_dir.join("events").join(MEM_LOADS_AUX)) else {
        return Ok(None);
    };
    let [config, config1, config2] = encode_terms(pmu_dir, &terms)?;
    Ok(Some(GroupLeader {
        name: MEM_LOADS_AUX.into(),
        config,
        config1,
        config2,
    }))
}

/// A named event of a PMU (`<pmu>/events/<name>`), e.g. `mem-loads` of `cpu`.
fn named_event(devices: &Path, pmu: &str, name: &str) -> Result<SampleEvent, String> {
    let dir = devices.join(pmu);
    let terms = read_trim(&dir.join("events").join(name))
        .ok_or_else(|| format!("the {pmu} PMU has no {name} event"))?;
    let [config, config1, config2] = encode_terms(&dir, &terms)?;
    let group_leader = mem_loads_leader(&dir, name)?;
    let ldlat_format = if has_term(&terms, "ldlat") {
        read_trim(&dir.join("format/ldlat"))
    } else {
        None
    };
    let mut event = SampleEvent {
        name: format!("Intel PEBS {name} ({pmu})"),
        pmu_type: pmu_type(&dir)?,
        config,
        config1,
        config2,
        precise_ip: 2,
        exclude_kernel: true,
        exclude_hv: true,
        sample_type: (PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_ADDR
            | PERF_SAMPLE_WEIGHT
            | PERF_SAMPLE_DATA_SRC) as u64,
        period: DEFAULT_PERIOD,
        min_period: 1,
        cpus: pmu_cpus(&dir)?,
        address_from: AddressFrom::SampleAddr,
        group_leader,
        ldlat_format,
    };
    event.set_load_latency(DEFAULT_LDLAT)?;
    Ok(event)
}

/// Whether `terms` (`event=0xcd,umask=0x1,ldlat=3`) name `term`.
fn has_term(terms: &str, term: &str) -> bool {
    terms
        .split(',')
        .any(|t| t.split_once('=').map_or(t, |(name, _)| name).trim() == term)
}

/// AMD IBS op sampling, with no exclude flag: IBS does not filter by privilege level in
/// hardware, and the kernel refuses `exclude_kernel`, `exclude_user` and `exclude_hv` on it
/// with `EINVAL`: for years the IBS PMUs had `PERF_PMU_CAP_NO_EXCLUDE`, and the software filter
/// added in 2025 (`perf_ibs_init` in arch/x86/events/amd/ibs.c) still refuses them unless
/// `config2` bit 0 (`swfilt=1`) asks for it, a bit older kernels reject in turn (`config2` must
/// be 0 there). So every sample comes, and the perf source drops those taken in the kernel
/// ([`crate::perf::sample::IbsOp::in_kernel`]).
fn ibs_op(devices: &Path) -> Result<SampleEvent, String> {
    let dir = devices.join("ibs_op");
    Ok(SampleEvent {
        name: "AMD IBS op (ibs_op)".into(),
        pmu_type: pmu_type(&dir)?,
        config: 0,
        config1: 0,
        config2: 0,
        precise_ip: 0,
        exclude_kernel: false,
        exclude_hv: false,
        sample_type: (PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD | PERF_SAMPLE_RAW)
            as u64,
        period: DEFAULT_PERIOD,
        min_period: 1,
        cpus: pmu_cpus(&dir)?,
        address_from: AddressFrom::IbsRaw,
        group_leader: None,
        ldlat_format: None,
    })
}

/// The terms objtier sets on an Arm SPE event: sample loads and stores only, and randomise the
/// interval a little so that it does not beat with a loop. `ts_enable`, `pa_enable` and
/// `pct_enable` stay 0: attribution needs no timestamps (see [`AddressFrom::SpeAux`]),
/// records are shorter without them, and physical addresses need `CAP_PERFMON` for nothing
/// objtier uses.
pub const SPE_TERMS: &str = "load_filter=1,store_filter=1,jitter=1";

/// An Arm SPE PMU (`arm_spe_0`, ...) with `terms` encoded by its `format/` files, its
/// `caps/min_interval` as the smallest period, and its `cpumask`.
fn arm_spe(devices: &Path, pmu: &str, terms: &str) -> Result<SampleEvent, String> {
    let dir = devices.join(pmu);
    let [config, config1, config2] = encode_terms(&dir, terms)?;
    let min_period = read_trim(&dir.join("caps/min_interval"))
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1);
    let cpus = pmu_cpus(&dir)?;
    Ok(SampleEvent {
        name: format!("Arm SPE loads and stores ({pmu})"),
        pmu_type: pmu_type(&dir)?,
        config,
        config1,
        config2,
        precise_ip: 0,
        exclude_kernel: true,
        exclude_hv: true,
        // No PERF_RECORD_SAMPLEs: the TID is for the sample_id_all trailer of PERF_RECORD_AUX.
        sample_type: PERF_SAMPLE_TID as u64,
        period: DEFAULT_PERIOD.max(min_period),
        min_period,
        cpus,
        address_from: AddressFrom::SpeAux,
        group_leader: None,
        ldlat_format: None,
    })
}

pub(crate) fn page_faults() -> SampleEvent {
    SampleEvent {
        name: "software page-faults".into(),
        pmu_type: PERF_TYPE_SOFTWARE,
        config: PERF_COUNT_SW_PAGE_FAULTS as u64,
        config1: 0,
        config2: 0,
        precise_ip: 0,
        exclude_kernel: false,
        exclude_hv: true,
        sample_type: (PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR) as u64,
        // Every fault: they are rare next to memory accesses.
        period: 1,
        min_period: 1,
        cpus: None,
        address_from: AddressFrom::SampleAddr,
        group_leader: None,
        ldlat_format: None,
    }
}

fn pmus(devices: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(devices)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Intel's core PMUs: `cpu`, or on hybrid parts one per core type (P-cores first).
const INTEL_CORE_PMUS: [&str; 3] = ["cpu_core", "cpu_atom", "cpu"];

/// The core PMUs that have event `name` and cover at least one CPU (a hybrid part with its
/// E-cores switched off keeps a `cpu_atom` with an empty `cpus`).
fn core_pmus_with(devices: &Path, name: &str) -> Vec<&'static str> {
    INTEL_CORE_PMUS
        .into_iter()
        .filter(|pmu| devices.join(pmu).join("events").join(name).exists())
        .filter(|pmu| !matches!(pmu_cpus(&devices.join(pmu)), Ok(Some(cpus)) if cpus.is_empty()))
        .collect()
}

/// Event `name` (`mem-loads`, `mem-stores`) of every core PMU that has it, each on its CPUs.
fn named_on_every_core_pmu(devices: &Path, name: &str) -> Result<Vec<SampleEvent>, String> {
    let pmus = core_pmus_with(devices, name);
    if pmus.is_empty() {
        return Err(format!(
            "no CPU PMU has a {name} event (looked for {} in {})",
            INTEL_CORE_PMUS.join(", "),
            devices.display()
        ));
    }
    pmus.into_iter()
        .map(|pmu| named_event(devices, pmu, name))
        .collect()
}

/// The best hardware address-sampling events this machine offers (loads, and stores where
/// separate, of every core PMU that has them), or why there are none.
pub fn discover(sys_root: &Path) -> Result<Vec<SampleEvent>, String> {
    let devices = sys_root.join("bus/event_source/devices");
    let names = pmus(&devices);
    let load_pmus = core_pmus_with(&devices, "mem-loads");
    if !load_pmus.is_empty() {
        let mut events = Vec::new();
        for pmu in load_pmus {
            events.push(named_event(&devices, pmu, "mem-loads")?);
            if let Ok(stores) = named_event(&devices, pmu, "mem-stores") {
                events.push(stores);
            }
        }
        return Ok(events);
    }
    if names.iter().any(|n| n == "ibs_op") {
        return Ok(vec![ibs_op(&devices)?]);
    }
    let spe: Vec<&String> = names.iter().filter(|n| n.starts_with("arm_spe")).collect();
    if !spe.is_empty() {
        // One per CPU type on heterogeneous machines, each covering its own cpumask.
        return spe
            .into_iter()
            .map(|pmu| arm_spe(&devices, pmu, SPE_TERMS))
            .collect();
    }
    Err(format!(
        "no PMU with address sampling (event sources: {}); usual in VMs without PMU passthrough",
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    ))
}

/// The events given with `--event`: `page-faults`, `mem-loads`, `mem-stores` (one per core PMU
/// that has it, on hybrid parts), `ibs-op`, `spe`, or `PMU/TERMS/` (e.g.
/// `cpu/event=0xd1,umask=0x20/` for a raw PEBS event, terms encoded with the PMU's format files;
/// `arm_spe_0/load_filter=1,min_latency=64/` for SPE with other filters).
pub fn parse_event(sys_root: &Path, spec: &str) -> Result<Vec<SampleEvent>, String> {
    let devices = sys_root.join("bus/event_source/devices");
    match spec.trim() {
        "mem-loads" | "mem-stores" => named_on_every_core_pmu(&devices, spec.trim()),
        other => parse_one_event(&devices, other).map(|e| vec![e]),
    }
}

/// An `--event` that is one event everywhere.
fn parse_one_event(devices: &Path, spec: &str) -> Result<SampleEvent, String> {
    match spec {
        "page-faults" | "faults" => Ok(page_faults()),
        "ibs-op" | "ibs_op" => ibs_op(devices),
        "spe" | "arm-spe" | "arm_spe" => {
            let names = pmus(devices);
            let pmu = names
                .iter()
                .find(|n| n.starts_with("arm_spe"))
                .ok_or_else(|| "this machine has no Arm SPE PMU (no arm_spe_*)".to_string())?;
            arm_spe(devices, pmu, SPE_TERMS)
        }
        other => {
            let inner = other
                .strip_suffix('/')
                .and_then(|s| s.split_once('/'))
                .ok_or_else(|| {
                    format!(
                        "unknown event {other:?}: use page-faults, mem-loads, mem-stores, \
                         ibs-op, spe, or PMU/TERMS/ such as cpu/event=0xd1,umask=0x20/"
                    )
                })?;
            let (pmu, terms) = inner;
            let dir = devices.join(pmu);
            if !dir.exists() {
                return Err(format!(
                    "no PMU named {pmu:?} (event sources: {})",
                    pmus(devices).join(", ")
                ));
            }
            if pmu == "ibs_op" {
                // Other IBS op terms (l3missonly, ...), with the same no-exclude attributes.
                let mut event = ibs_op(devices)?;
                [event.config, event.config1, event.config2] = encode_terms(&dir, terms)?;
                event.name = format!("{pmu}/{terms}/");
                return Ok(event);
            }
            if pmu.starts_with("arm_spe") {
                let mut event = arm_spe(devices, pmu, terms)?;
                event.name = format!("{pmu}/{terms}/");
                return Ok(event);
            }
            let [config, config1, config2] = encode_terms(&dir, terms)?;
            Ok(SampleEvent {
                name: format!("{pmu}/{terms}/"),
                pmu_type: pmu_type(&dir)?,
                config,
                config1,
                config2,
                precise_ip: if pmu.starts_with("cpu") { 2 } else { 0 },
                exclude_kernel: true,
                exclude_hv: true,
                sample_type: (PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR) as u64,
                period: DEFAULT_PERIOD,
                min_period: 1,
                cpus: pmu_cpus(&dir)?,
                address_from: AddressFrom::SampleAddr,
                group_leader: None,
                ldlat_format: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Intel-like event_source tree, as the kernel lays it out.
    fn intel_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let cpu = dir.path().join("bus/event_source/devices/cpu");
        std::fs::create_dir_all(cpu.join("events")).unwrap();
        std::fs::create_dir_all(cpu.join("format")).unwrap();
        std::fs::create_dir_all(dir.path().join("bus/event_source/devices/software")).unwrap();
        std::fs::write(cpu.join("type"), "4\n").unwrap();
        std::fs::write(
            cpu.join("events/mem-loads"),
            "event=0xcd,umask=0x1,ldlat=3\n",
        )
        .unwrap();
        std::fs::write(cpu.join("events/mem-stores"), "event=0xd0,umask=0x82\n").unwrap();
        std::fs::write(cpu.join("format/event"), "config:0-7\n").unwrap();
        std::fs::write(cpu.join("format/umask"), "config:8-15\n").unwrap();
        std::fs::write(cpu.join("format/ldlat"), "config1:0-15\n").unwrap();
        dir
    }

    #[test]
    fn discovers_pebs_loads_and_stores() {
        let tree = intel_tree();
        let events = discover(tree.path()).unwrap();
        assert_eq!(events.len(), 2);
        let loads = &events[0];
        assert_eq!(loads.pmu_type, 4);
        assert_eq!(loads.config, 0x01cd);
        assert_eq!(
            loads.config1, 30,
            "the alias's ldlat=3 gives way to perf mem's 30"
        );
        assert_eq!(loads.precise_ip, 2);
        assert!(loads.name.contains("mem-loads"));
        assert_eq!(events[1].config, 0x82d0);
        let raw = parse_event(tree.path(), "cpu/event=0xd1,umask=0x20/").unwrap();
        assert_eq!(raw.len(), 1);
        assert_eq!(raw[0].config, 0x20d1);
        assert_eq!(loads.cpus, None, "a non-hybrid cpu PMU covers every CPU");
        assert_eq!(
            loads.group_leader, None,
            "no mem-loads-aux before Sapphire Rapids"
        );
    }

    /// Sapphire Rapids: `cpu` has `mem-loads-aux` (`EVENT_ATTR_STR(mem-loads-aux, ...,
    /// "event=0x03,umask=0x82")` in arch/x86/events/intel/core.c), which must lead mem-loads.
    #[test]
    fn mem_loads_is_led_by_mem_loads_aux_where_the_pmu_has_it() {
        let tree = intel_tree();
        let cpu = tree.path().join("bus/event_source/devices/cpu");
        std::fs::write(cpu.join("events/mem-loads-aux"), "event=0x03,umask=0x82\n").unwrap();
        let events = discover(tree.path()).unwrap();
        let loads = &events[0];
        assert_eq!(
            loads.group_leader,
            Some(GroupLeader {
                name: "mem-loads-aux".into(),
                config: 0x8203,
                config1: 0,
                config2: 0,
            })
        );
        assert_ne!(
            loads.sample_type & PERF_SAMPLE_DATA_SRC as u64,
            0,
            "the data source is why the group is needed, and kept"
        );
        assert_eq!(events[1].group_leader, None, "mem-stores stands alone");
        let named = parse_event(tree.path(), "mem-loads").unwrap();
        assert_eq!(named[0].group_leader, loads.group_leader);
    }

    #[test]
    fn discovery_says_why_there_is_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for pmu in ["software", "tracepoint", "breakpoint"] {
            std::fs::create_dir_all(dir.path().join("bus/event_source/devices").join(pmu)).unwrap();
        }
        let err = discover(dir.path()).unwrap_err();
        assert!(err.contains("breakpoint, software, tracepoint"), "{err}");
        // An SPE PMU without its format files is named, not guessed at.
        std::fs::create_dir_all(dir.path().join("bus/event_source/devices/arm_spe_0")).unwrap();
        let err = discover(dir.path()).unwrap_err();
        assert!(
            err.contains("arm_spe_0") && err.contains("load_filter"),
            "{err}"
        );
        assert_eq!(
            parse_event(dir.path(), "page-faults").unwrap()[0].pmu_type,
            PERF_TYPE_SOFTWARE
        );
        assert!(parse_event(dir.path(), "mem-loads")
            .unwrap_err()
            .contains("no CPU PMU"));
        assert!(parse_event(dir.path(), "sometimes")
            .unwrap_err()
            .contains("page-faults, mem-loads"));
        assert!(parse_event(dir.path(), "nope/event=1/")
            .unwrap_err()
            .contains("no PMU named"));
    }

    /// An Arm SPE PMU as `drivers/perf/arm_spe_pmu.c` lays it out: type, cpumask, caps/ and the
    /// format/ files of its user ABI (`config:0` ts_enable, `config:1` pa_enable, `config:16`
    /// jitter, `config:32..34` branch/load/store filters, `config2:0-11` min_latency).
    fn spe_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let spe = dir.path().join("bus/event_source/devices/arm_spe_0");
        std::fs::create_dir_all(spe.join("format")).unwrap();
        std::fs::create_dir_all(spe.join("caps")).unwrap();
        std::fs::create_dir_all(dir.path().join("bus/event_source/devices/armv8_pmuv3_0")).unwrap();
        std::fs::write(spe.join("type"), "10\n").unwrap();
        std::fs::write(spe.join("cpumask"), "0-3\n").unwrap();
        std::fs::write(spe.join("caps/min_interval"), "256\n").unwrap();
        for (term, format) in [
            ("ts_enable", "config:0"),
            ("pa_enable", "config:1"),
            ("pct_enable", "config:2"),
            ("jitter", "config:16"),
            ("branch_filter", "config:32"),
            ("load_filter", "config:33"),
            ("store_filter", "config:34"),
            ("event_filter", "config1:0-63"),
            ("min_latency", "config2:0-11"),
        ] {
            std::fs::write(spe.join("format").join(term), format!("{format}\n")).unwrap();
        }
        dir
    }

    #[test]
    fn discovers_arm_spe_from_its_format_and_caps() {
        let tree = spe_tree();
        let events = discover(tree.path()).unwrap();
        assert_eq!(events.len(), 1);
        let spe = &events[0];
        assert_eq!(spe.pmu_type, 10);
        assert_eq!(
            spe.config,
            (1 << 33) | (1 << 34) | (1 << 16),
            "load_filter, store_filter and jitter; no ts_enable, pa_enable, pct_enable"
        );
        assert_eq!(spe.config1, 0);
        assert_eq!(spe.address_from, AddressFrom::SpeAux);
        assert_eq!(
            spe.sample_type, PERF_SAMPLE_TID as u64,
            "for the AUX record's pid"
        );
        assert_eq!((spe.period, spe.min_period), (DEFAULT_PERIOD, 256));
        assert_eq!(spe.cpus, Some(vec![0, 1, 2, 3]));
        assert!(spe.exclude_kernel);
        assert!(spe.name.contains("Arm SPE") && spe.name.contains("arm_spe_0"));
        // A minimum interval above the paper's period wins.
        let caps = tree.path().join("bus/event_source/devices/arm_spe_0/caps");
        std::fs::write(caps.join("min_interval"), "8192\n").unwrap();
        assert_eq!(discover(tree.path()).unwrap()[0].period, 8192);
        // Named, or with other terms (the format files encode them).
        assert_eq!(
            parse_event(tree.path(), "spe").unwrap()[0].config,
            spe.config
        );
        let custom = parse_event(
            tree.path(),
            "arm_spe_0/load_filter=1,ts_enable=1,min_latency=64/",
        )
        .unwrap()
        .remove(0);
        assert_eq!((custom.config, custom.config2), ((1 << 33) | 1, 64));
        assert_eq!(custom.address_from, AddressFrom::SpeAux);
        assert!(parse_event(tree.path(), "arm_spe_0/nonsense=1/")
            .unwrap_err()
            .contains("no format term"));
        assert!(parse_event(intel_tree().path(), "spe")
            .unwrap_err()
            .contains("no Arm SPE"));
    }

    /// A hybrid Intel tree (Alder Lake and later): `cpu_core` for the P-cores and `cpu_atom`
    /// for the E-cores, each with its own type, events, formats and `cpus` list.
    fn hybrid_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let devices = dir.path().join("bus/event_source/devices");
        for (pmu, ty, cpus, loads, stores) in [
            (
                "cpu_core",
                "4",
                "0-7,16-23\n",
                "event=0xcd,umask=0x1,ldlat=3\n",
                "event=0xcd,umask=0x2\n",
            ),
            (
                "cpu_atom",
                "10",
                "8-15\n",
                "event=0xd0,umask=0x5,ldlat=3\n",
                "event=0xd0,umask=0x6\n",
            ),
        ] {
            let d = devices.join(pmu);
            std::fs::create_dir_all(d.join("events")).unwrap();
            std::fs::create_dir_all(d.join("format")).unwrap();
            std::fs::write(d.join("type"), ty).unwrap();
            std::fs::write(d.join("cpus"), cpus).unwrap();
            std::fs::write(d.join("events/mem-loads"), loads).unwrap();
            std::fs::write(d.join("events/mem-stores"), stores).unwrap();
            std::fs::write(d.join("format/event"), "config:0-7\n").unwrap();
            std::fs::write(d.join("format/umask"), "config:8-15\n").unwrap();
            std::fs::write(d.join("format/ldlat"), "config1:0-15\n").unwrap();
        }
        std::fs::create_dir_all(devices.join("software")).unwrap();
        dir
    }

    #[test]
    fn hybrid_intel_samples_p_and_e_cores_each_on_its_own_cpus() {
        let tree = hybrid_tree();
        let events = discover(tree.path()).unwrap();
        let seen: Vec<(&str, u32, Option<Vec<u32>>)> = events
            .iter()
            .map(|e| (e.name.as_str(), e.pmu_type, e.cpus.clone()))
            .collect();
        let core_cpus: Vec<u32> = (0..8).chain(16..24).collect();
        let atom_cpus: Vec<u32> = (8..16).collect();
        assert_eq!(
            seen,
            vec![
                (
                    "Intel PEBS mem-loads (cpu_core)",
                    4,
                    Some(core_cpus.clone())
                ),
                (
                    "Intel PEBS mem-stores (cpu_core)",
                    4,
                    Some(core_cpus.clone())
                ),
                (
                    "Intel PEBS mem-loads (cpu_atom)",
                    10,
                    Some(atom_cpus.clone())
                ),
                (
                    "Intel PEBS mem-stores (cpu_atom)",
                    10,
                    Some(atom_cpus.clone())
                ),
            ]
        );
        // Named, mem-loads is both PMUs' too.
        let named = parse_event(tree.path(), "mem-loads").unwrap();
        let pmus: Vec<(u32, Option<Vec<u32>>)> =
            named.iter().map(|e| (e.pmu_type, e.cpus.clone())).collect();
        assert_eq!(pmus, vec![(4, Some(core_cpus)), (10, Some(atom_cpus))]);
        // E-cores switched off: cpu_atom stays, with no CPUs; it is left out.
        let atom = tree.path().join("bus/event_source/devices/cpu_atom");
        std::fs::write(atom.join("cpus"), "\n").unwrap();
        let events = discover(tree.path()).unwrap();
        assert!(events.iter().all(|e| e.pmu_type == 4), "{events:?}");
        // A list the kernel would not write is an error, not every CPU.
        std::fs::write(atom.join("cpus"), "8-x\n").unwrap();
        assert!(discover(tree.path())
            .unwrap_err()
            .contains("not a CPU list"));
    }

    /// AMD IBS (`ibs_op`, with Zen 4's `l3missonly` format): no exclude flag, whether found
    /// or named with other terms, since the kernel refuses them (see `ibs_op`).
    #[test]
    fn ibs_events_ask_the_pmu_for_no_exclusion() {
        let dir = tempfile::tempdir().unwrap();
        let ibs = dir.path().join("bus/event_source/devices/ibs_op");
        std::fs::create_dir_all(ibs.join("format")).unwrap();
        std::fs::write(ibs.join("type"), "11\n").unwrap();
        std::fs::write(ibs.join("format/l3missonly"), "config:16\n").unwrap();
        let found = discover(dir.path()).unwrap().remove(0);
        let named = parse_event(dir.path(), "ibs_op/l3missonly=1/")
            .unwrap()
            .remove(0);
        for event in [&found, &named] {
            assert_eq!(event.address_from, AddressFrom::IbsRaw);
            assert!(!event.exclude_kernel && !event.exclude_hv, "{event:?}");
            assert_eq!(event.config2, 0, "no swfilt, which older kernels refuse");
        }
        assert_eq!((found.config, named.config), (0, 1 << 16));
    }

    #[test]
    fn pmu_cpus_reads_cpus_then_cpumask() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(pmu_cpus(dir.path()), Ok(None));
        std::fs::write(dir.path().join("cpumask"), "0-3\n").unwrap();
        assert_eq!(pmu_cpus(dir.path()), Ok(Some(vec![0, 1, 2, 3])));
        std::fs::write(dir.path().join("cpus"), "4,6-7\n").unwrap();
        assert_eq!(pmu_cpus(dir.path()), Ok(Some(vec![4, 6, 7])));
    }

    /// `--ldlat`: overrides the `ldlat` of an alias that carries one (mem-loads), in the bits
    /// the PMU's format says, and nothing else.
    #[test]
    fn the_load_latency_threshold_is_a_setting() {
        let tree = intel_tree();
        let mut events = discover(tree.path()).unwrap();
        let loads = &mut events[0];
        assert_eq!(loads.ldlat_format.as_deref(), Some("config1:0-15"));
        assert_eq!(loads.set_load_latency(128), Ok(true));
        assert_eq!((loads.config, loads.config1), (0x01cd, 128));
        assert!(loads
            .set_load_latency(0)
            .unwrap_err()
            .contains("at least 1"));
        let too_big = loads.set_load_latency(1 << 16).unwrap_err();
        assert!(too_big.contains("16 bits"), "{too_big}");
        assert_eq!(loads.config1, 128, "a refused value changes nothing");
        let stores = &mut events[1];
        assert_eq!(
            stores.set_load_latency(128),
            Ok(false),
            "stores have no ldlat"
        );
        assert_eq!(stores.config1, 0);
        // Terms the user wrote keep the ldlat they name.
        let mut raw = parse_event(tree.path(), "cpu/event=0xcd,umask=0x1,ldlat=50/")
            .unwrap()
            .remove(0);
        assert_eq!(raw.set_load_latency(128), Ok(false));
        assert_eq!(raw.config1, 50);
    }

    #[test]
    fn format_terms_are_replaced_across_split_ranges() {
        let format = Format::parse("config:0-3,8-11").unwrap();
        assert_eq!(format.width(), 8);
        let mut w = [0xffff_0000_0000_0000u64, 7, 0];
        format.replace(0xab, &mut w).unwrap();
        assert_eq!(w, [0xffff_0000_0000_0a0b, 7, 0]);
        format.replace(0x12, &mut w).unwrap();
        assert_eq!(w[0], 0xffff_0000_0000_0102, "the old bits cleared");
        assert!(format.replace(0x100, &mut w).is_err());
        let whole = Format::parse("config2:0-63").unwrap();
        whole.replace(u64::MAX, &mut w).unwrap();
        assert_eq!(w[2], u64::MAX);
    }

    #[test]
    fn format_terms_scatter_bits() {
        let mut w = [0u64; 3];
        encode_term("config:0-7,32-35", 0x5ab, &mut w).unwrap();
        assert_eq!(w[0], 0xab | (0x5 << 32));
        encode_term("config2:63", 1, &mut w).unwrap();
        assert_eq!(w[2], 1 << 63);
        assert!(encode_term("config:9-3", 1, &mut w).is_err());
        assert!(encode_term("config7:1", 1, &mut w).is_err());
    }
}
