//! Read-only probes of what this machine offers objtier, for `objtier doctor`.
//!
//! Nothing here writes anything: a probe reads sysfs and /proc (under a root path, so tests
//! feed captured trees) and says, for each access source, whether objtier can use it, the exact
//! reason when it cannot, and what the user could do about it. The perf probe also opens the
//! event it finds, on one CPU, and closes it at once (through a function it is given, so tests
//! give it a fake): only the kernel knows whether it will accept it.

use crate::perf::event::{AddressFrom, SampleEvent, DEFAULT_PERIOD};
use std::fs;
use std::path::{Path, PathBuf};

/// What doctor says about one access source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceReport {
    pub name: &'static str,
    /// objtier has this source today (others are reported so users know what their machine has).
    pub implemented: bool,
    pub usable: bool,
    /// What was found, in a sentence.
    pub detail: String,
    /// What the user could do, when it is not usable.
    pub remedy: Option<String>,
}

fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// Roots of the trees the probes read.
#[derive(Clone, Debug)]
pub struct Roots {
    pub sys: PathBuf,
    pub proc: PathBuf,
    /// Where kernel build configs live (`/boot`).
    pub boot: PathBuf,
    /// objtier's DAMON owner file (`/run/objtier/damon-owner`).
    pub damon_owner_file: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Self {
            sys: "/sys".into(),
            proc: "/proc".into(),
            boot: "/boot".into(),
            damon_owner_file: "/run/objtier/damon-owner".into(),
        }
    }
}

/// A `CONFIG_*` value from `/boot/config-<release>`, if that file exists.
fn kernel_config(roots: &Roots, key: &str) -> Option<String> {
    let release = read_trim(&roots.proc.join("sys/kernel/osrelease"))?;
    let text = fs::read_to_string(roots.boot.join(format!("config-{release}"))).ok()?;
    text.lines().find_map(|line| {
        if line == format!("# {key} is not set") {
            Some("n".to_owned())
        } else {
            line.strip_prefix(&format!("{key}=")).map(str::to_owned)
        }
    })
}

/// DAMON through sysfs: present, free to use (or used by objtier), privileged enough, and with
/// virtual-address operations.
pub fn probe_damon(roots: &Roots, euid: u32) -> SourceReport {
    let admin = roots.sys.join("kernel/mm/damon/admin");
    let kdamonds = admin.join("kdamonds");
    let unusable = |detail: String, remedy: &str| SourceReport {
        name: "damon",
        implemented: true,
        usable: false,
        detail,
        remedy: Some(remedy.to_owned()),
    };
    if !admin.is_dir() {
        let config = kernel_config(roots, "CONFIG_DAMON_SYSFS")
            .map_or(String::new(), |v| format!(" (CONFIG_DAMON_SYSFS={v})"));
        return unusable(
            format!(
                "{} does not exist: the kernel has no DAMON sysfs interface{config}",
                admin.display()
            ),
            "use a 6.2+ kernel built with CONFIG_DAMON_SYSFS and CONFIG_DAMON_VADDR \
             (e.g. Debian trixie's 6.12)",
        );
    }
    let count: usize = read_trim(&kdamonds.join("nr_kdamonds"))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let running: Vec<usize> = (0..count)
        .filter(|i| read_trim(&kdamonds.join(format!("{i}/state"))).as_deref() == Some("on"))
        .collect();
    let owner = read_trim(&roots.damon_owner_file).and_then(|s| s.parse::<u32>().ok());
    let owner_alive = owner.filter(|pid| roots.proc.join(pid.to_string()).exists());
    // Operations: readable from an existing context; otherwise from the kernel config.
    let operations: Option<Vec<String>> = (0..count).find_map(|i| {
        read_trim(&kdamonds.join(format!("{i}/contexts/0/avail_operations")))
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
    });
    let vaddr = match &operations {
        Some(ops) => Some(ops.iter().any(|o| o == "vaddr")),
        None => kernel_config(roots, "CONFIG_DAMON_VADDR").map(|v| v == "y"),
    };
    if vaddr == Some(false) {
        return unusable(
            format!(
                "DAMON cannot monitor virtual addresses here (operations: {}; CONFIG_DAMON_VADDR \
                 is not set)",
                operations.map_or("unknown".into(), |o| o.join(" "))
            ),
            "use a kernel built with CONFIG_DAMON_VADDR",
        );
    }
    if let Some(why) = cannot_report_regions(roots, &kdamonds, count) {
        return unusable(
            format!("DAMON on this kernel cannot report region access counts ({why})"),
            "use --source proc (`--source auto` falls back to it), or a 6.2+ kernel for DAMON",
        );
    }
    if euid != 0 {
        return unusable(
            format!(
                "{} is writable only by root",
                kdamonds.join("nr_kdamonds").display()
            ),
            "run the objtier daemon as root (it serves every user's processes)",
        );
    }
    if let Some(pid) = owner_alive {
        return SourceReport {
            name: "damon",
            implemented: true,
            usable: true,
            detail: format!("in use by the objtier daemon (pid {pid})"),
            remedy: None,
        };
    }
    // These modules take DAMON exclusively: no sysfs kdamond can start while one runs, and
    // theirs are not listed among the sysfs kdamonds.
    for module in ["damon_reclaim", "damon_lru_sort"] {
        let enabled = roots
            .sys
            .join("module")
            .join(module)
            .join("parameters/enabled");
        if read_trim(&enabled).as_deref() == Some("Y") {
            return unusable(
                format!(
                    "the {module} module holds DAMON exclusively ({} is Y)",
                    enabled.display()
                ),
                &format!(
                    "write N to {} if that module is not needed, or use --source proc",
                    enabled.display()
                ),
            );
        }
    }
    if let Some(&index) = running.first() {
        return unusable(
            format!(
                "kdamond {index} is running and objtier did not create it ({count} kdamond(s) \
                 exist): another user of DAMON's sysfs interface, e.g. `damo` or a tool of your \
                 own, set it up. The kernel cannot add a kdamond while one runs, and objtier \
                 never takes over one it did not create"
            ),
            &format!(
                "see it with `ls {k}` and `cat {k}/{index}/state` (its contexts/0/targets say \
                 what it monitors); stop it through the tool that started it (e.g. `damo stop`), \
                 or with `echo off > {k}/{index}/state` if nothing needs it, before starting \
                 the objtier daemon; or use --source proc",
                k = kdamonds.display()
            ),
        );
    }
    if count > 0 && owner.is_none() {
        return unusable(
            format!("{count} stopped kdamond(s) configured by another tool exist; adding one would reset them"),
            &format!("clear them if unused: echo 0 > {}", kdamonds.join("nr_kdamonds").display()),
        );
    }
    let precision = match &operations {
        Some(ops) if ops.iter().any(|o| o == "fvaddr") => {
            "fvaddr: monitors exactly the tracked objects' ranges"
        }
        Some(_) => "vaddr only: monitors whole address spaces (coarser)",
        None => "fvaddr or vaddr, whichever the kernel offers (checked when the daemon starts)",
    };
    SourceReport {
        name: "damon",
        implemented: true,
        usable: true,
        detail: format!("available ({precision}); page-access bits sampled by the kernel"),
        remedy: None,
    }
}

/// Why DAMON here cannot report region access counts (schemes' `tried_regions`, Linux 6.2+),
/// if it cannot; `None` when it can or when this read-only probe cannot tell (the daemon then
/// checks when it claims DAMON).
///
/// A scheme directory of an existing kdamond settles it. Otherwise the kernel release does,
/// which a vendor kernel with backported DAMON could contradict.
fn cannot_report_regions(roots: &Roots, kdamonds: &Path, count: usize) -> Option<String> {
    let scheme = (0..count)
        .map(|i| kdamonds.join(format!("{i}/contexts/0/schemes/0")))
        .find(|scheme| scheme.is_dir());
    if let Some(scheme) = scheme {
        return (!scheme.join("tried_regions").is_dir()).then(|| {
            format!(
                "needs Linux 6.2+: the scheme directory {} has no tried_regions",
                scheme.display()
            )
        });
    }
    let release = read_trim(&roots.proc.join("sys/kernel/osrelease"))?;
    let (major, minor) = release_version(&release)?;
    ((major, minor) < (6, 2))
        .then(|| format!("needs Linux 6.2+ for schemes' tried_regions; this is {release}"))
}

/// `(major, minor)` of a kernel release such as `6.1.0-18-amd64`.
fn release_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// PMU address sampling (PEBS, IBS, Arm SPE), found the way the daemon's `--source perf`
/// finds it ([`crate::perf::event::discover`]), then tried: `try_open` opens each event with
/// the daemon's attributes on one of its CPUs and closes it (the daemon and doctor pass
/// [`crate::perf::ring::try_open`]). Whether it works is what the kernel answers, not a guess
/// from the user id and `perf_event_paranoid` (capabilities, security modules and PMU quirks
/// such as Intel's `mem-loads-aux` decide too).
pub fn probe_perf(
    roots: &Roots,
    try_open: impl Fn(&SampleEvent, u32) -> std::io::Result<()>,
) -> SourceReport {
    let paranoid = read_trim(&roots.proc.join("sys/kernel/perf_event_paranoid"));
    let paranoid_value = paranoid.as_deref().and_then(|p| p.parse::<i32>().ok());
    let Some(paranoid_value) = paranoid_value else {
        return SourceReport {
            name: "perf",
            implemented: true,
            usable: false,
            detail: "perf_event_paranoid unreadable: a kernel without perf events".into(),
            remedy: Some("use a kernel with CONFIG_PERF_EVENTS, or --source damon".into()),
        };
    };
    let events = match crate::perf::event::discover(&roots.sys) {
        Ok(events) => events,
        Err(why) => {
            let fallback = page_faults_fallback(roots, &try_open);
            return SourceReport {
                name: "perf",
                implemented: true,
                usable: false,
                detail: format!("{why}; perf_event_paranoid={paranoid_value}"),
                remedy: Some(format!(
                    "run on hardware (or a VM with PMU passthrough) with Intel PEBS, AMD IBS or \
                     Arm SPE, or use --source damon; {fallback}"
                )),
            };
        }
    };
    let spe = events.iter().any(|e| e.address_from == AddressFrom::SpeAux);
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    let what = format!(
        "address sampling with {}, period {}{}",
        names.join(" + "),
        events.first().map_or(DEFAULT_PERIOD, |e| e.period),
        if spe {
            " (per attached process, from the AUX area)"
        } else {
            ""
        }
    );
    for event in &events {
        let Some(cpu) = trial_cpu(roots, event) else {
            return SourceReport {
                name: "perf",
                implemented: true,
                usable: false,
                detail: format!("{what}; none of the CPUs of {} is online", event.name),
                remedy: Some("bring one of its CPUs online, or use --source damon".into()),
            };
        };
        if let Err(e) = try_open(event, cpu) {
            let (why, remedy) = crate::perf::ring::explain_refusal(event, &e);
            return SourceReport {
                name: "perf",
                implemented: true,
                usable: false,
                detail: format!(
                    "{what}; opening {} on CPU {cpu} failed: {e}: {why}; \
                     perf_event_paranoid={paranoid_value}",
                    event.name
                ),
                remedy: Some(remedy),
            };
        }
    }
    SourceReport {
        name: "perf",
        implemented: true,
        usable: true,
        detail: format!(
            "{what}; opened and closed on one CPU each: the kernel accepts it; \
             perf_event_paranoid={paranoid_value}"
        ),
        remedy: None,
    }
}

/// The first online CPU `event` covers (CPU 0 if the online list is unreadable).
fn trial_cpu(roots: &Roots, event: &SampleEvent) -> Option<u32> {
    let online = crate::perf::online_cpus(&roots.sys).unwrap_or_else(|_| vec![0]);
    online.into_iter().find(|&cpu| event.covers(cpu))
}

/// Whether the software page-faults event (`--event page-faults`) opens here, for the remedy
/// of a machine without address sampling.
fn page_faults_fallback(
    roots: &Roots,
    try_open: &impl Fn(&SampleEvent, u32) -> std::io::Result<()>,
) -> String {
    let mut events = crate::perf::event::parse_event(&roots.sys, "page-faults").unwrap_or_default();
    let Some(event) = events.pop() else {
        return String::new();
    };
    let cpu = trial_cpu(roots, &event).unwrap_or(0);
    let how = "(`--source perf --event page-faults`: it sees first touches and refaults only)";
    match try_open(&event, cpu) {
        Ok(()) => {
            format!("the software page-faults event opens here and still tests the path {how}")
        }
        Err(e) => {
            let (why, remedy) = crate::perf::ring::explain_refusal(&event, &e);
            format!(
                "the software page-faults event {how} does not open here either ({e}: {why}; \
                 {remedy})"
            )
        }
    }
}

/// The `proc` source (page references through /proc): whether it works here, and how precisely
/// it sees accesses with this kernel and user.
pub fn probe_proc(roots: &Roots, euid: u32) -> SourceReport {
    use crate::procrefs::{Precision, Support};
    let support = Support::probe(&roots.proc, &roots.sys);
    let (precision, not_taken) =
        match Precision::choose(&support, euid) {
            Ok(chosen) => chosen,
            Err(why) => return SourceReport {
                name: "proc",
                implemented: true,
                usable: false,
                detail: why,
                remedy: Some(
                    "use a kernel built with CONFIG_PROC_PAGE_MONITOR (distribution kernels are)"
                        .into(),
                ),
            },
        };
    let mut detail = precision.describe().to_owned();
    if euid != 0 {
        detail.push_str(&format!(
            "; as uid {euid} it follows only that user's processes"
        ));
    }
    if !not_taken.is_empty() {
        detail.push_str(&format!("; {}", not_taken.join("; ")));
    }
    let mut better = Vec::new();
    if precision != Precision::IdlePages {
        better.push(if support.idle_bitmap {
            "run the daemon as root for per-page reads and writes (idle page tracking)"
        } else {
            "per-page reads and writes need a kernel with CONFIG_IDLE_PAGE_TRACKING"
        });
        if !support.soft_dirty {
            better.push("per-page writes need a kernel with CONFIG_MEM_SOFT_DIRTY");
        }
    }
    SourceReport {
        name: "proc",
        implemented: true,
        usable: true,
        detail,
        remedy: (!better.is_empty()).then(|| format!("for more precision: {}", better.join("; "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, Roots) {
        let dir = tempfile::tempdir().unwrap();
        let roots = Roots {
            sys: dir.path().join("sys"),
            proc: dir.path().join("proc"),
            boot: dir.path().join("boot"),
            damon_owner_file: dir.path().join("run/damon-owner"),
        };
        (dir, roots)
    }

    fn write(path: PathBuf, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn damon_missing_busy_unprivileged_and_ready() {
        let (_dir, roots) = tree();
        write(roots.proc.join("sys/kernel/osrelease"), "6.12.0-x\n");
        write(
            roots.boot.join("config-6.12.0-x"),
            "# CONFIG_DAMON_SYSFS is not set\n",
        );
        let r = probe_damon(&roots, 0);
        assert!(
            !r.usable && r.detail.contains("CONFIG_DAMON_SYSFS=n"),
            "{r:?}"
        );

        let k = roots.sys.join("kernel/mm/damon/admin/kdamonds");
        write(k.join("nr_kdamonds"), "0\n");
        write(roots.boot.join("config-6.12.0-x"), "CONFIG_DAMON_VADDR=y\n");
        let r = probe_damon(&roots, 1000);
        assert!(!r.usable && r.remedy.unwrap().contains("root"));
        let r = probe_damon(&roots, 0);
        assert!(r.usable, "{r:?}");

        // The host of this project: someone else's paddr kdamond is running.
        write(k.join("nr_kdamonds"), "1\n");
        write(k.join("0/state"), "on\n");
        write(k.join("0/contexts/0/avail_operations"), "paddr\n");
        let r = probe_damon(&roots, 0);
        assert!(
            !r.usable && r.detail.contains("CONFIG_DAMON_VADDR"),
            "{r:?}"
        );
        write(
            k.join("0/contexts/0/avail_operations"),
            "vaddr fvaddr paddr\n",
        );
        let r = probe_damon(&roots, 0);
        assert!(
            !r.usable && r.detail.contains("objtier did not create"),
            "{r:?}"
        );
        let remedy = r.remedy.unwrap();
        assert!(
            remedy.contains(&format!("ls {}", k.display())) && remedy.contains("0/state"),
            "{remedy}"
        );
        assert!(
            !remedy.contains("DAMON_RECLAIM"),
            "its kdamonds are not listed here"
        );

        // A module holding DAMON exclusively is named, whatever the kdamonds show.
        let enabled = roots.sys.join("module/damon_reclaim/parameters/enabled");
        write(enabled.clone(), "Y\n");
        let r = probe_damon(&roots, 0);
        assert!(
            !r.usable && r.detail.contains("damon_reclaim module"),
            "{r:?}"
        );
        assert!(r.remedy.unwrap().contains("write N to"));
        write(enabled, "N\n");

        // ...unless it is objtier's own, by a live daemon.
        write(roots.damon_owner_file.clone(), "4242\n");
        fs::create_dir_all(roots.proc.join("4242")).unwrap();
        let r = probe_damon(&roots, 0);
        assert!(r.usable && r.detail.contains("4242"), "{r:?}");
    }

    #[test]
    fn damon_before_6_2_cannot_report_regions() {
        let (_dir, roots) = tree();
        let k = roots.sys.join("kernel/mm/damon/admin/kdamonds");
        write(k.join("nr_kdamonds"), "0\n");
        write(roots.proc.join("sys/kernel/osrelease"), "6.1.0-18-amd64\n");
        let r = probe_damon(&roots, 0);
        assert!(!r.usable, "{r:?}");
        assert!(
            r.detail.contains("cannot report region access counts")
                && r.detail.contains("6.2+")
                && r.detail.contains("6.1.0-18-amd64"),
            "{r:?}"
        );
        assert!(r.remedy.unwrap().contains("--source proc"));
        write(roots.proc.join("sys/kernel/osrelease"), "6.2.0\n");
        assert!(probe_damon(&roots, 0).usable);

        // A stopped kdamond's scheme shows what the kernel has, whatever its release says.
        write(k.join("nr_kdamonds"), "1\n");
        write(k.join("0/state"), "off\n");
        write(k.join("0/contexts/0/schemes/0/action"), "stat\n");
        let r = probe_damon(&roots, 0);
        assert!(!r.usable && r.detail.contains("no tried_regions"), "{r:?}");
        fs::create_dir_all(k.join("0/contexts/0/schemes/0/tried_regions")).unwrap();
        let r = probe_damon(&roots, 0);
        assert!(!r.detail.contains("tried_regions"), "{r:?}");
    }

    #[test]
    fn proc_says_how_precise_it_is() {
        let (_dir, roots) = tree();
        let r = probe_proc(&roots, 0);
        assert!(
            !r.usable && r.detail.contains("CONFIG_PROC_PAGE_MONITOR"),
            "{r:?}"
        );
        let own = roots.proc.join("self");
        write(own.join("clear_refs"), "");
        write(own.join("pagemap"), "");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/proc");
        // This project's host: neither soft-dirty bits nor idle page tracking.
        fs::copy(fixtures.join("smaps-6.18"), own.join("smaps")).unwrap();
        let r = probe_proc(&roots, 0);
        assert!(r.usable, "{r:?}");
        assert!(
            r.detail.contains("per mapping for reads and writes"),
            "{r:?}"
        );
        let remedy = r.remedy.unwrap();
        assert!(remedy.contains("CONFIG_MEM_SOFT_DIRTY") && remedy.contains("IDLE_PAGE"));
        // Debian's kernels: soft-dirty bits, no idle page tracking.
        fs::copy(fixtures.join("smaps-6.12-debian"), own.join("smaps")).unwrap();
        let r = probe_proc(&roots, 1000);
        assert!(r.usable, "{r:?}");
        assert!(
            r.detail
                .contains("per mapping for reads, per page for writes")
                && r.detail.contains("uid 1000"),
            "{r:?}"
        );
        // With idle page tracking, as root: per page.
        write(roots.sys.join("kernel/mm/page_idle/bitmap"), "");
        let r = probe_proc(&roots, 0);
        assert!(
            r.detail.contains("per page (reads and writes alike)"),
            "{r:?}"
        );
        assert_eq!(r.remedy, None);
        assert!(probe_proc(&roots, 1000)
            .remedy
            .unwrap()
            .contains("run the daemon as root"));
    }

    /// What a fake opener was asked: (event name, CPU) per call.
    type Calls = std::rc::Rc<std::cell::RefCell<Vec<(String, u32)>>>;

    /// A trial opener that answers `errno` (0: opens) and remembers what it was asked.
    fn opener(errno: i32) -> (Calls, impl Fn(&SampleEvent, u32) -> std::io::Result<()>) {
        let calls = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let seen = calls.clone();
        let open = move |event: &SampleEvent, cpu: u32| {
            seen.borrow_mut().push((event.name.clone(), cpu));
            match errno {
                0 => Ok(()),
                e => Err(std::io::Error::from_raw_os_error(e)),
            }
        };
        (calls, open)
    }

    #[test]
    fn perf_reports_what_the_machine_has() {
        let (_dir, roots) = tree();
        write(roots.proc.join("sys/kernel/perf_event_paranoid"), "2\n");
        write(roots.sys.join("devices/system/cpu/online"), "0-1\n");
        for d in ["software", "tracepoint", "breakpoint"] {
            fs::create_dir_all(roots.sys.join("bus/event_source/devices").join(d)).unwrap();
        }
        // This machine: no PMU; the software fallback is tried and said to work.
        let (calls, open) = opener(0);
        let r = probe_perf(&roots, open);
        assert!(!r.usable && r.implemented);
        assert!(
            r.detail.contains("no PMU with address sampling") && r.detail.contains("paranoid=2"),
            "{r:?}"
        );
        let remedy = r.remedy.unwrap();
        assert!(remedy.contains("--event page-faults"), "{remedy}");
        assert!(remedy.contains("opens here"), "{remedy}");
        assert_eq!(
            *calls.borrow(),
            vec![("software page-faults".to_string(), 0)]
        );
        let (_, refused) = opener(libc::EACCES);
        let remedy = probe_perf(&roots, refused).remedy.unwrap();
        assert!(
            remedy.contains("does not open here either") && remedy.contains("CAP_PERFMON"),
            "{remedy}"
        );

        let cpu = roots.sys.join("bus/event_source/devices/cpu");
        write(cpu.join("events/mem-loads"), "event=0xcd,umask=0x1\n");
        write(cpu.join("format/event"), "config:0-7\n");
        write(cpu.join("format/umask"), "config:8-15\n");
        write(cpu.join("type"), "4\n");
        // The kernel decides, whatever the user id and paranoid setting.
        let (calls, open) = opener(0);
        let r = probe_perf(&roots, open);
        assert!(r.usable, "paranoid 2, but the kernel accepted it: {r:?}");
        assert!(
            r.detail.contains("PEBS") && r.detail.contains("accepts"),
            "{r:?}"
        );
        assert_eq!(
            *calls.borrow(),
            vec![("Intel PEBS mem-loads (cpu)".to_string(), 0)]
        );
        let (_, open) = opener(libc::EACCES);
        let r = probe_perf(&roots, open);
        assert!(!r.usable);
        assert!(
            r.detail.contains("on CPU 0 failed") && r.detail.contains("not allowed"),
            "{r:?}"
        );
        assert!(r.remedy.unwrap().contains("CAP_PERFMON"));
        for errno in [libc::ENOENT, libc::EOPNOTSUPP, libc::EINVAL, libc::ENODATA] {
            let (_, open) = opener(errno);
            let r = probe_perf(&roots, open);
            let err = std::io::Error::from_raw_os_error(errno).to_string();
            assert!(!r.usable, "{r:?}");
            let why = ["does not offer", "refused", "does not support"];
            assert!(
                r.detail.contains(&err) && why.iter().any(|w| r.detail.contains(w)),
                "errno {errno}: {r:?}"
            );
            assert!(r.remedy.unwrap().contains("--source damon"));
        }
        let (_, open) = opener(libc::ENODATA);
        assert!(probe_perf(&roots, open).detail.contains("mem-loads-aux"));
    }

    /// Hybrid: every event is tried, each on the first online CPU its PMU covers.
    #[test]
    fn perf_tries_each_event_on_its_own_cpus() {
        let (_dir, roots) = tree();
        write(roots.proc.join("sys/kernel/perf_event_paranoid"), "2\n");
        write(roots.sys.join("devices/system/cpu/online"), "0-3,5-7\n");
        for (pmu, cpus) in [("cpu_core", "0-3\n"), ("cpu_atom", "4-7\n")] {
            let dir = roots.sys.join("bus/event_source/devices").join(pmu);
            write(dir.join("events/mem-loads"), "event=0xcd,umask=0x1\n");
            write(dir.join("format/event"), "config:0-7\n");
            write(dir.join("format/umask"), "config:8-15\n");
            write(dir.join("type"), "4\n");
            write(dir.join("cpus"), cpus);
        }
        let (calls, open) = opener(0);
        assert!(probe_perf(&roots, open).usable);
        assert_eq!(
            *calls.borrow(),
            vec![
                ("Intel PEBS mem-loads (cpu_core)".to_string(), 0),
                ("Intel PEBS mem-loads (cpu_atom)".to_string(), 5),
            ]
        );
    }

    /// With the real opener on a tree without PMUs: the probe still reports, and says what
    /// the kernel made of the software event (allowed or not depends on who runs the test).
    #[test]
    fn perf_probe_runs_against_this_kernel() {
        let (_dir, roots) = tree();
        write(roots.proc.join("sys/kernel/perf_event_paranoid"), "2\n");
        write(roots.sys.join("devices/system/cpu/online"), "0\n");
        let r = probe_perf(&roots, crate::perf::ring::try_open);
        assert!(!r.usable);
        let remedy = r.remedy.unwrap();
        assert!(
            remedy.contains("opens here") || remedy.contains("does not open here"),
            "{remedy}"
        );
    }
}
