//! Which sampling event to use: discovered from `/sys/bus/event_source/devices` (the PMUs the
//! kernel registered, their named events and their config formats), or named with `--event`.
//!
//! - Intel PEBS: the `cpu` (or hybrid `cpu_core`) PMU's `mem-loads` event (precise, with a load
//!   latency threshold) and `mem-stores`, sampling the data address, latency and data source.
//! - AMD IBS: the `ibs_op` PMU; the data address comes in the raw IBS registers.
//! - Arm SPE: the `arm_spe_*` PMU writes its records to an AUX buffer; objtier decodes them
//!   ([`super::spe`]) but does not capture that buffer yet.
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

/// Where a sample's data address comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressFrom {
    /// `PERF_SAMPLE_ADDR`.
    SampleAddr,
    /// AMD IBS: the raw IBS registers.
    IbsRaw,
}

/// A sampling event, ready for `perf_event_open`.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleEvent {
    /// What it is, for logs and doctor: "Intel PEBS mem-loads (cpu)".
    pub name: String,
    pub pmu_type: u32,
    pub config: u64,
    pub config1: u64,
    pub precise_ip: u8,
    pub exclude_kernel: bool,
    pub sample_type: u64,
    pub period: u64,
    pub address_from: AddressFrom,
}

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Sets `value` into the bits a format spec names, e.g. `config:0-7`, `config1:0-15`,
/// `config:0-7,32-35` (low bits of the value go to the first range). Returns which config word.
fn encode_term(format: &str, value: u64, words: &mut [u64; 3]) -> Result<(), String> {
    let (word, ranges) = format
        .split_once(':')
        .ok_or_else(|| format!("bad format {format:?}"))?;
    let slot = match word {
        "config" => 0,
        "config1" => 1,
        "config2" => 2,
        _ => return Err(format!("unsupported format word {word:?}")),
    };
    let mut shift = 0;
    for range in ranges.split(',') {
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (a.parse::<u32>(), b.parse::<u32>()),
            None => (range.parse::<u32>(), range.parse::<u32>()),
        };
        let (lo, hi) = (
            lo.map_err(|_| format!("bad format {format:?}"))?,
            hi.map_err(|_| format!("bad format {format:?}"))?,
        );
        if lo > hi || hi > 63 {
            return Err(format!("bad format {format:?}"));
        }
        let width = hi - lo + 1;
        let mask = if width == 64 {
            u64::MAX
        } else {
            (1 << width) - 1
        };
        words[slot] |= ((value >> shift) & mask) << lo;
        shift += width;
    }
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

fn pmu_type(pmu_dir: &Path) -> Result<u32, String> {
    read_trim(&pmu_dir.join("type"))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("cannot read {}", pmu_dir.join("type").display()))
}

/// A named event of a PMU (`<pmu>/events/<name>`), e.g. `mem-loads` of `cpu`.
fn named_event(devices: &Path, pmu: &str, name: &str) -> Result<SampleEvent, String> {
    let dir = devices.join(pmu);
    let terms = read_trim(&dir.join("events").join(name))
        .ok_or_else(|| format!("the {pmu} PMU has no {name} event"))?;
    let [config, config1, _] = encode_terms(&dir, &terms)?;
    Ok(SampleEvent {
        name: format!("Intel PEBS {name} ({pmu})"),
        pmu_type: pmu_type(&dir)?,
        config,
        config1,
        precise_ip: 2,
        exclude_kernel: true,
        sample_type: (PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_ADDR
            | PERF_SAMPLE_WEIGHT
            | PERF_SAMPLE_DATA_SRC) as u64,
        period: DEFAULT_PERIOD,
        address_from: AddressFrom::SampleAddr,
    })
}

fn ibs_op(devices: &Path) -> Result<SampleEvent, String> {
    let dir = devices.join("ibs_op");
    Ok(SampleEvent {
        name: "AMD IBS op (ibs_op)".into(),
        pmu_type: pmu_type(&dir)?,
        config: 0,
        config1: 0,
        precise_ip: 0,
        exclude_kernel: true,
        sample_type: (PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD | PERF_SAMPLE_RAW)
            as u64,
        period: DEFAULT_PERIOD,
        address_from: AddressFrom::IbsRaw,
    })
}

fn page_faults() -> SampleEvent {
    SampleEvent {
        name: "software page-faults".into(),
        pmu_type: PERF_TYPE_SOFTWARE,
        config: PERF_COUNT_SW_PAGE_FAULTS as u64,
        config1: 0,
        precise_ip: 0,
        exclude_kernel: false,
        sample_type: (PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR) as u64,
        // Every fault: they are rare next to memory accesses.
        period: 1,
        address_from: AddressFrom::SampleAddr,
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

/// The best hardware address-sampling events this machine offers (loads, and stores where
/// separate), or why there are none.
pub fn discover(sys_root: &Path) -> Result<Vec<SampleEvent>, String> {
    let devices = sys_root.join("bus/event_source/devices");
    let names = pmus(&devices);
    for pmu in ["cpu_core", "cpu"] {
        if devices.join(pmu).join("events/mem-loads").exists() {
            let mut events = vec![named_event(&devices, pmu, "mem-loads")?];
            if let Ok(stores) = named_event(&devices, pmu, "mem-stores") {
                events.push(stores);
            }
            return Ok(events);
        }
    }
    if names.iter().any(|n| n == "ibs_op") {
        return Ok(vec![ibs_op(&devices)?]);
    }
    if let Some(spe) = names.iter().find(|n| n.starts_with("arm_spe")) {
        return Err(format!(
            "Arm SPE ({spe}) is present; objtier decodes SPE records but does not capture its \
             AUX buffer yet: use --source damon"
        ));
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

/// An event given with `--event`: `page-faults`, `mem-loads`, `mem-stores`, `ibs-op`, or
/// `PMU/TERMS/` (e.g. `cpu/event=0xd1,umask=0x20/` for a raw PEBS event, terms encoded with the
/// PMU's format files).
pub fn parse_event(sys_root: &Path, spec: &str) -> Result<SampleEvent, String> {
    let devices = sys_root.join("bus/event_source/devices");
    let cpu_pmu = || {
        ["cpu_core", "cpu"]
            .into_iter()
            .find(|p| devices.join(p).exists())
            .ok_or_else(|| "this machine has no CPU PMU (no cpu in event sources)".to_string())
    };
    match spec.trim() {
        "page-faults" | "faults" => Ok(page_faults()),
        "mem-loads" | "mem-stores" => named_event(&devices, cpu_pmu()?, spec.trim()),
        "ibs-op" | "ibs_op" => ibs_op(&devices),
        other => {
            let inner = other
                .strip_suffix('/')
                .and_then(|s| s.split_once('/'))
                .ok_or_else(|| {
                    format!(
                        "unknown event {other:?}: use page-faults, mem-loads, mem-stores, \
                         ibs-op, or PMU/TERMS/ such as cpu/event=0xd1,umask=0x20/"
                    )
                })?;
            let (pmu, terms) = inner;
            let dir = devices.join(pmu);
            if !dir.exists() {
                return Err(format!(
                    "no PMU named {pmu:?} (event sources: {})",
                    pmus(&devices).join(", ")
                ));
            }
            let [config, config1, _] = encode_terms(&dir, terms)?;
            Ok(SampleEvent {
                name: format!("{pmu}/{terms}/"),
                pmu_type: pmu_type(&dir)?,
                config,
                config1,
                precise_ip: if pmu.starts_with("cpu") { 2 } else { 0 },
                exclude_kernel: true,
                sample_type: (PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR) as u64,
                period: DEFAULT_PERIOD,
                address_from: AddressFrom::SampleAddr,
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
        assert_eq!(loads.config1, 3, "the load latency threshold");
        assert_eq!(loads.precise_ip, 2);
        assert!(loads.name.contains("mem-loads"));
        assert_eq!(events[1].config, 0x82d0);
        let raw = parse_event(tree.path(), "cpu/event=0xd1,umask=0x20/").unwrap();
        assert_eq!(raw.config, 0x20d1);
    }

    #[test]
    fn discovery_says_why_there_is_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for pmu in ["software", "tracepoint", "breakpoint"] {
            std::fs::create_dir_all(dir.path().join("bus/event_source/devices").join(pmu)).unwrap();
        }
        let err = discover(dir.path()).unwrap_err();
        assert!(err.contains("breakpoint, software, tracepoint"), "{err}");
        std::fs::create_dir_all(dir.path().join("bus/event_source/devices/arm_spe_0")).unwrap();
        assert!(discover(dir.path()).unwrap_err().contains("AUX buffer"));
        assert_eq!(
            parse_event(dir.path(), "page-faults").unwrap().pmu_type,
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
