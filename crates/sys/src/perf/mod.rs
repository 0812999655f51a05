//! `perf_event_open(2)`: hardware counters and address sampling.
//!
//! - This file: last-level-cache misses and instructions retired, counted system-wide on every
//!   online CPU, for the LLC-misses-per-instruction trigger.
//! - [`event`]: which sampling event to use (PEBS, IBS, SPE, page faults), from sysfs.
//! - [`ring`]: one sampling event per CPU (system-wide, or one process's) and its mmap'ed ring
//!   buffer, with an AUX area for Arm SPE.
//! - [`aux`]: reading the AUX area: the chunks `PERF_RECORD_AUX` announces, across its wrap.
//! - [`sample`]: decoding sample records (perf's layout, data sources, IBS raw registers).
//! - [`datasrc`]: the memory level a sample's data source word names.
//! - [`spe`]: decoding Arm SPE packets.
//!
//! Counting needs a hardware PMU (most VMs and containers have none) and the right to count
//! system-wide (root, `CAP_PERFMON`, or `kernel.perf_event_paranoid` ≤ 0). When either is
//! missing, [`LlcCounters::open`] says which, and what to do.

pub mod aux;
pub mod datasrc;
pub mod event;
pub mod ring;
pub mod sample;
pub mod spe;

use perf_event_open_sys::bindings::{
    perf_event_attr, PERF_COUNT_HW_CACHE_MISSES, PERF_COUNT_HW_INSTRUCTIONS, PERF_FLAG_FD_CLOEXEC,
    PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING, PERF_TYPE_HARDWARE,
};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error(
        "this machine offers no hardware {event} counter (perf_event_open: {cause}); virtual \
         machines and containers usually have no PMU. Use a trigger that needs no counters \
         (time, alloc or pressure)"
    )]
    NoHardwareCounter {
        event: &'static str,
        cause: std::io::Error,
    },
    #[error(
        "not allowed to count {event} system-wide (perf_event_open: {cause}; \
         kernel.perf_event_paranoid is {paranoid}): run the daemon as root or with CAP_PERFMON, \
         or set kernel.perf_event_paranoid to 0"
    )]
    NotAllowed {
        event: &'static str,
        cause: std::io::Error,
        paranoid: String,
    },
    #[error("this kernel has no perf events (perf_event_open: {0}); it needs CONFIG_PERF_EVENTS")]
    NoPerfEvents(std::io::Error),
    #[error("cannot count {event} on CPU {cpu}: perf_event_open: {cause}")]
    Other {
        event: &'static str,
        cpu: u32,
        cause: std::io::Error,
    },
    #[error("cannot read {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
}

/// The online CPUs, from `<sys_root>/devices/system/cpu/online`.
pub fn online_cpus(sys_root: &Path) -> Result<Vec<u32>, PerfError> {
    let path = sys_root.join("devices/system/cpu/online");
    let text = std::fs::read_to_string(&path).map_err(|cause| PerfError::Read {
        path: path.display().to_string(),
        cause,
    })?;
    crate::topology::parse_list(&text).ok_or_else(|| PerfError::Read {
        path: path.display().to_string(),
        cause: std::io::Error::new(std::io::ErrorKind::InvalidData, "not a CPU list"),
    })
}

/// `kernel.perf_event_paranoid` as the kernel shows it under `proc_root`, or "unknown", for
/// messages that explain a refused `perf_event_open`.
pub fn paranoid_setting(proc_root: &Path) -> String {
    std::fs::read_to_string(proc_root.join("sys/kernel/perf_event_paranoid"))
        .map(|t| t.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// `perf_event_open` of `attr` on one CPU, for every process running there (pid -1).
pub(crate) fn open_on_cpu(attr: &mut perf_event_attr, cpu: u32) -> std::io::Result<OwnedFd> {
    open_event(attr, -1, cpu, None)
}

/// `perf_event_open` of `attr` for task `pid` (-1: every task) while it runs on `cpu`, in the
/// group that `leader` leads (`None`: a group of its own).
pub(crate) fn open_event(
    attr: &mut perf_event_attr,
    pid: libc::pid_t,
    cpu: u32,
    leader: Option<&OwnedFd>,
) -> std::io::Result<OwnedFd> {
    let group_fd = leader.map_or(-1, |fd| fd.as_raw_fd());
    // SAFETY: a valid attr; pid -1 with a cpu covers everything on that CPU, a pid with a cpu
    // that task (and, with inherit, the tasks it creates) on that CPU; group_fd is -1 or an
    // event fd we own, opened for the same pid and CPU.
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(
            attr,
            pid,
            cpu as libc::c_int,
            group_fd,
            PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Explains a failed `perf_event_open` of a hardware counter.
fn explain(event: &'static str, cpu: u32, source: std::io::Error, paranoid: String) -> PerfError {
    match source.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            PerfError::NoHardwareCounter {
                event,
                cause: source,
            }
        }
        Some(libc::EACCES) | Some(libc::EPERM) => PerfError::NotAllowed {
            event,
            cause: source,
            paranoid,
        },
        Some(libc::ENOSYS) => PerfError::NoPerfEvents(source),
        _ => PerfError::Other {
            event,
            cpu,
            cause: source,
        },
    }
}

/// One counter on one CPU.
struct Counter {
    file: File,
    last_scaled: u64,
}

impl Counter {
    fn open(config: u32, cpu: u32) -> std::io::Result<Counter> {
        // SAFETY: perf_event_attr is plain data; all zero is its documented default.
        let mut attr: perf_event_attr = unsafe { std::mem::zeroed() };
        attr.type_ = PERF_TYPE_HARDWARE;
        attr.size = std::mem::size_of::<perf_event_attr>() as u32;
        attr.config = config as u64;
        attr.read_format = (PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING) as u64;
        attr.set_exclude_hv(1);
        let file = File::from(open_on_cpu(&mut attr, cpu)?);
        Ok(Counter {
            file,
            last_scaled: 0,
        })
    }

    /// Counted events since the last read, scaled up if the counter was multiplexed.
    fn delta(&mut self) -> std::io::Result<u64> {
        let mut buf = [0u8; 24];
        self.file.read_exact(&mut buf)?;
        let word = |i: usize| u64::from_ne_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
        let (value, enabled, running) = (word(0), word(1), word(2));
        let scaled = if running > 0 && running < enabled {
            (value as f64 * enabled as f64 / running as f64) as u64
        } else {
            value
        };
        let delta = scaled.saturating_sub(self.last_scaled);
        self.last_scaled = scaled;
        Ok(delta)
    }
}

/// LLC misses and instructions, system-wide.
pub struct LlcCounters {
    misses: Vec<Counter>,
    instructions: Vec<Counter>,
}

impl LlcCounters {
    /// Opens both counters on every online CPU.
    pub fn open(sys_root: &Path, proc_root: &Path) -> Result<LlcCounters, PerfError> {
        let paranoid = paranoid_setting(proc_root);
        let mut counters = LlcCounters {
            misses: Vec::new(),
            instructions: Vec::new(),
        };
        for cpu in online_cpus(sys_root)? {
            for (config, event, list) in [
                (PERF_COUNT_HW_CACHE_MISSES, "LLC-miss", &mut counters.misses),
                (
                    PERF_COUNT_HW_INSTRUCTIONS,
                    "instruction",
                    &mut counters.instructions,
                ),
            ] {
                let counter = Counter::open(config, cpu)
                    .map_err(|e| explain(event, cpu, e, paranoid.clone()))?;
                list.push(counter);
            }
        }
        // Start the deltas from now.
        counters.read()?;
        Ok(counters)
    }

    /// (LLC misses, instructions) since the previous call, summed over CPUs.
    pub fn read(&mut self) -> Result<(u64, u64), PerfError> {
        let sum = |list: &mut Vec<Counter>| -> Result<u64, PerfError> {
            let mut total = 0u64;
            for c in list.iter_mut() {
                total = total.saturating_add(c.delta().map_err(|cause| PerfError::Read {
                    path: "a perf counter".into(),
                    cause,
                })?);
            }
            Ok(total)
        };
        Ok((sum(&mut self.misses)?, sum(&mut self.instructions)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_like_sysfs_writes_them() {
        use crate::topology::parse_list;
        assert_eq!(
            parse_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_list("0"), Some(vec![0]));
        assert_eq!(parse_list("3-1"), None);
        assert_eq!(parse_list("x"), None);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("devices/system/cpu")).unwrap();
        std::fs::write(dir.path().join("devices/system/cpu/online"), "0-1\n").unwrap();
        assert_eq!(online_cpus(dir.path()).unwrap(), vec![0, 1]);
    }

    #[test]
    fn failures_say_what_is_missing_and_what_to_do() {
        let err = |errno| {
            explain(
                "LLC-miss",
                0,
                std::io::Error::from_raw_os_error(errno),
                "2".into(),
            )
            .to_string()
        };
        assert!(err(libc::ENOENT).contains("no hardware LLC-miss counter"));
        assert!(err(libc::ENOENT).contains("time, alloc or pressure"));
        let denied = err(libc::EACCES);
        assert!(denied.contains("perf_event_paranoid is 2"), "{denied}");
        assert!(denied.contains("run the daemon as root"), "{denied}");
        assert!(err(libc::ENOSYS).contains("CONFIG_PERF_EVENTS"));
        assert!(err(libc::EINVAL).contains("CPU 0"));
    }
}
