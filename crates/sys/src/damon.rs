//! DAMON (Data Access MONitor) through its sysfs interface, `/sys/kernel/mm/damon/admin`.
//!
//! objtier uses DAMON where there is no PMU address sampling (VMs, most clouds, these test
//! machines): the kernel samples page-table accessed bits of each attached process and reports
//! regions with an access frequency. objtier creates one kdamond of its own with one `vaddr`
//! context whose targets are the attached processes, and a `stat` scheme that matches every
//! region, so that `update_schemes_tried_regions` yields a snapshot of all regions. That
//! snapshot is what objtier reads, and kernels before 6.2 do not have it (DAMON's sysfs came in
//! 5.18): `claim` checks for it, so that such a kernel is refused up front, not at every
//! interval.
//!
//! It never takes over or resets a kdamond it did not create: writing `nr_kdamonds` rebuilds
//! every kdamond directory and is refused by the kernel while any kdamond runs, so objtier only
//! proceeds when there are none (or only a stopped one left by a previous objtier).
//!
//! All file access goes through [`SysfsFiles`], with a [`DryRunFiles`] that records writes and
//! serves reads from a map, so the exact sequence of writes is unit-tested without a kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The file operations DAMON's sysfs interface needs.
pub trait SysfsFiles: Send {
    fn read(&mut self, path: &Path) -> io::Result<String>;
    fn write(&mut self, path: &Path, value: &str) -> io::Result<()>;
    /// Names of the entries of a directory.
    fn list(&mut self, path: &Path) -> io::Result<Vec<String>>;
}

/// The real sysfs.
#[derive(Default)]
pub struct RealFiles;

impl SysfsFiles for RealFiles {
    fn read(&mut self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn write(&mut self, path: &Path, value: &str) -> io::Result<()> {
        let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
        file.write_all(value.as_bytes())
    }
    fn list(&mut self, path: &Path) -> io::Result<Vec<String>> {
        std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    }
}

/// Records writes; reads come from `files` (which writes also update).
#[derive(Default)]
pub struct DryRunFiles {
    pub files: BTreeMap<PathBuf, String>,
    /// Directories that exist even with no file under them (the kernel creates some empty,
    /// e.g. a scheme's `tried_regions`).
    pub dirs: BTreeSet<PathBuf>,
    pub writes: Vec<(PathBuf, String)>,
    /// A write the fake refuses, as the kernel would: (path, value, errno).
    pub refuse: Option<(PathBuf, String, i32)>,
}

impl SysfsFiles for DryRunFiles {
    fn read(&mut self, path: &Path) -> io::Result<String> {
        self.files
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
    fn write(&mut self, path: &Path, value: &str) -> io::Result<()> {
        if let Some((refused, v, errno)) = &self.refuse {
            if refused == path && v == value {
                return Err(io::Error::from_raw_os_error(*errno));
            }
        }
        self.writes.push((path.to_owned(), value.to_owned()));
        self.files.insert(path.to_owned(), value.to_owned());
        Ok(())
    }
    fn list(&mut self, path: &Path) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .files
            .keys()
            .chain(&self.dirs)
            .filter_map(|p| p.strip_prefix(path).ok())
            .filter_map(|rest| rest.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() && !self.dirs.contains(path) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        Ok(names)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DamonError {
    #[error(
        "DAMON is not available: {0} is missing (the kernel lacks CONFIG_DAMON_SYSFS); \
         run on a 6.2+ kernel with DAMON, or use another access source"
    )]
    NoSysfs(PathBuf),
    #[error(
        "DAMON on this kernel cannot report region access counts (needs Linux 6.2+: the scheme \
         directory {0} has no tried_regions, which objtier reads every interval); use \
         --source proc (page references through /proc; `--source auto` falls back to it), or \
         a 6.2+ kernel for DAMON"
    )]
    NoTriedRegions(PathBuf),
    #[error(
        "DAMON cannot monitor virtual addresses: the kernel offers operations {available:?} but \
         not \"vaddr\" (CONFIG_DAMON_VADDR is not set); use a kernel with DAMON_VADDR, or \
         another access source"
    )]
    NoVaddr { available: Vec<String> },
    #[error("DAMON needs root: cannot write {path} ({source}); run the objtier daemon as root")]
    PermissionDenied { path: PathBuf, source: io::Error },
    #[error(
        "DAMON is in use by another tool: kdamond {running} of {count} is running and objtier \
         did not create it (`damo` or another user of {kdamonds}; `ls` it, and `cat` the \
         kdamond's `state`). The kernel cannot add a kdamond while one runs, and objtier never \
         takes over one it did not create. Stop it through the tool that started it (e.g. \
         `damo stop`), or use another access source (--source proc)"
    )]
    Busy {
        count: usize,
        running: usize,
        kdamonds: PathBuf,
    },
    #[error(
        "DAMON is configured by another tool: {count} stopped kdamond(s) exist that objtier did \
         not create; adding one would reset them. Clear them (`echo 0 > {path}`) if unused"
    )]
    Foreign { count: usize, path: PathBuf },
    #[error(
        "DAMON is held exclusively by {holder}, so objtier's kdamond cannot run beside it \
         (DAMON_RECLAIM and DAMON_LRU_SORT take DAMON for themselves, and are not listed among \
         the sysfs kdamonds). Write N to /sys/module/damon_reclaim/parameters/enabled or \
         /sys/module/damon_lru_sort/parameters/enabled to stop them, or use another access \
         source (--source proc)"
    )]
    Exclusive { holder: String },
    #[error("DAMON sysfs I/O on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("DAMON sysfs: unexpected content in {path}: {text:?}")]
    Parse { path: PathBuf, text: String },
}

/// Monitoring attributes (DAMON's defaults: 5 ms sampling, 100 ms aggregation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DamonAttrs {
    pub sample_us: u64,
    pub aggr_us: u64,
    pub update_us: u64,
    pub min_regions: u64,
    pub max_regions: u64,
}

impl Default for DamonAttrs {
    fn default() -> Self {
        Self {
            sample_us: 5_000,
            aggr_us: 100_000,
            update_us: 1_000_000,
            min_regions: 10,
            max_regions: 1_000,
        }
    }
}

/// One region of a snapshot: `[start, end)` of target `target` (index into the pid list given
/// to [`Damon::set_targets`]) was seen accessed in `nr_accesses` samples of an aggregation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionSample {
    pub target: usize,
    pub start: u64,
    pub end: u64,
    pub nr_accesses: u32,
}

/// CPU seconds (user + system) a thread has used, from `<proc_root>/PID/stat`.
pub fn thread_cpu_seconds(proc_root: &Path, pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields count from after it.
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5), i.e. 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no failure mode for _SC_CLK_TCK.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ticks as f64 / hz)
}

/// objtier's own kdamond.
pub struct Damon<F: SysfsFiles> {
    files: F,
    kdamonds: PathBuf,
    /// `/sys/module`: the DAMON modules that take DAMON exclusively say there if they run.
    modules: PathBuf,
    attrs: DamonAttrs,
    /// Our kdamond's index, once created.
    index: Option<usize>,
    /// `fvaddr` (monitor exactly the ranges we give) where the kernel has it, else `vaddr`.
    operations: &'static str,
    /// What the kernel was last told to monitor.
    targets: Vec<Target>,
    /// File recording which objtier daemon (pid) created the kdamond, so a successor can
    /// reclaim the stopped kdamond of a daemon that died without cleaning up.
    owner_file: Option<PathBuf>,
    /// `claim` found a stopped kdamond of a dead objtier daemon and took it over.
    reclaimed_stale: bool,
}

/// A process to monitor and, for `fvaddr`, the address ranges to monitor in it (sorted,
/// non-overlapping).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    pub pid: u32,
    pub ranges: Vec<(u64, u64)>,
}

/// Reduces sorted ranges to at most `max` by closing the smallest gaps first (adjacent ranges,
/// gap 0, go first). Below `max`, adjacent ranges stay separate: each object keeps a DAMON
/// region of its own from the first sample on, instead of DAMON having to discover the
/// boundary between a hot object and its cold neighbour.
pub fn coalesce_ranges(ranges: &[(u64, u64)], max: usize) -> Vec<(u64, u64)> {
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start < last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    if merged.len() <= max.max(1) {
        return merged;
    }
    let mut gaps: Vec<(u64, usize)> = merged
        .windows(2)
        .enumerate()
        .map(|(i, w)| (w[1].0 - w[0].1, i))
        .collect();
    // The smallest `closing` gaps (ties to the lower index): a selection, not a sort, as a
    // million records would take a sort tens of milliseconds every interval.
    let closing = merged.len() - max.max(1);
    gaps.select_nth_unstable(closing - 1);
    let mut close = vec![false; merged.len()];
    for &(_, i) in &gaps[..closing] {
        close[i] = true;
    }
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(max);
    let mut joining = false;
    for (i, &(start, end)) in merged.iter().enumerate() {
        if joining {
            out.last_mut().expect("joined onto a previous range").1 = end;
        } else {
            out.push((start, end));
        }
        joining = close[i];
    }
    out
}

fn io_err(path: &Path, source: io::Error) -> DamonError {
    if source.kind() == io::ErrorKind::PermissionDenied {
        DamonError::PermissionDenied {
            path: path.to_owned(),
            source,
        }
    } else {
        DamonError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

impl<F: SysfsFiles> Damon<F> {
    /// Prepares to use DAMON under `sys_root` (normally `/sys`); nothing is written yet.
    pub fn new(files: F, sys_root: &Path, attrs: DamonAttrs) -> Self {
        Self {
            files,
            kdamonds: sys_root.join("kernel/mm/damon/admin/kdamonds"),
            modules: sys_root.join("module"),
            attrs,
            index: None,
            operations: "vaddr",
            targets: Vec::new(),
            owner_file: None,
            reclaimed_stale: false,
        }
    }

    /// True if `claim` reclaimed the stopped kdamond a dead objtier daemon left behind (for
    /// the caller to log; this crate does not).
    pub fn reclaimed_stale(&self) -> bool {
        self.reclaimed_stale
    }

    /// Records ownership of the kdamond in `path` (e.g. `/run/objtier/damon-owner`).
    pub fn with_owner_file(mut self, path: PathBuf) -> Self {
        self.owner_file = Some(path);
        self
    }

    /// True if the only kdamond is one a dead objtier daemon left behind.
    fn stale_objtier_kdamond(&self, count: usize) -> bool {
        let Some(path) = &self.owner_file else {
            return false;
        };
        let Ok(text) = std::fs::read_to_string(path) else {
            return false;
        };
        let Ok(pid) = text.trim().parse::<u32>() else {
            return false;
        };
        count == 1 && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
    }

    pub fn files(&self) -> &F {
        &self.files
    }

    fn read(&mut self, path: &Path) -> Result<String, DamonError> {
        self.files
            .read(path)
            .map(|s| s.trim().to_owned())
            .map_err(|e| io_err(path, e))
    }

    fn write(&mut self, path: &Path, value: impl ToString) -> Result<(), DamonError> {
        self.files
            .write(path, &value.to_string())
            .map_err(|e| io_err(path, e))
    }

    fn read_number(&mut self, path: &Path) -> Result<u64, DamonError> {
        let text = self.read(path)?;
        text.parse().map_err(|_| DamonError::Parse {
            path: path.to_owned(),
            text,
        })
    }

    fn dir(&self) -> PathBuf {
        self.kdamonds.join(self.index.unwrap_or(0).to_string())
    }

    fn ctx(&self) -> PathBuf {
        self.dir().join("contexts/0")
    }

    /// Creates and configures our kdamond (stopped). Fails with a clear reason when DAMON is
    /// missing, needs privileges we lack, or belongs to someone else.
    pub fn claim(&mut self) -> Result<(), DamonError> {
        if self.index.is_some() {
            return Ok(());
        }
        let nr_path = self.kdamonds.join("nr_kdamonds");
        let count = match self.files.read(&nr_path) {
            Ok(text) => text
                .trim()
                .parse::<usize>()
                .map_err(|_| DamonError::Parse {
                    path: nr_path.clone(),
                    text,
                })?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(DamonError::NoSysfs(self.kdamonds.clone()))
            }
            Err(e) => return Err(io_err(&nr_path, e)),
        };
        for module in ["damon_reclaim", "damon_lru_sort"] {
            let enabled = self.modules.join(module).join("parameters/enabled");
            if self.files.read(&enabled).is_ok_and(|v| v.trim() == "Y") {
                return Err(DamonError::Exclusive {
                    holder: format!("the {module} module ({} is Y)", enabled.display()),
                });
            }
        }
        for i in 0..count {
            let state = self.read(&self.kdamonds.join(format!("{i}/state")))?;
            if state == "on" {
                return Err(DamonError::Busy {
                    count,
                    running: i,
                    kdamonds: self.kdamonds.clone(),
                });
            }
        }
        if count > 0 && !self.stale_objtier_kdamond(count) {
            return Err(DamonError::Foreign {
                count,
                path: nr_path,
            });
        }
        if count > 0 {
            self.write(&nr_path, 0)?;
            self.reclaimed_stale = true;
        }
        self.write(&nr_path, 1)?;
        if let Some(path) = &self.owner_file {
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = std::fs::write(path, std::process::id().to_string());
        }
        self.index = Some(0);
        let dir = self.dir();
        self.write(&dir.join("contexts/nr_contexts"), 1)?;
        let ctx = self.ctx();
        let avail_path = ctx.join("avail_operations");
        if let Ok(avail) = self.files.read(&avail_path) {
            let available: Vec<String> = avail.split_whitespace().map(str::to_owned).collect();
            if available.iter().any(|o| o == "fvaddr") {
                self.operations = "fvaddr";
            } else if !available.iter().any(|o| o == "vaddr") {
                self.release();
                return Err(DamonError::NoVaddr { available });
            }
        }
        let operations = self.operations;
        self.write(&ctx.join("operations"), operations)?;
        let attrs = self.attrs.clone();
        let intervals = ctx.join("monitoring_attrs/intervals");
        self.write(&intervals.join("sample_us"), attrs.sample_us)?;
        self.write(&intervals.join("aggr_us"), attrs.aggr_us)?;
        self.write(&intervals.join("update_us"), attrs.update_us)?;
        let regions = ctx.join("monitoring_attrs/nr_regions");
        // max first: the kernel rejects min > max at commit, and the defaults are 10..1000.
        self.write(&regions.join("max"), attrs.max_regions)?;
        self.write(&regions.join("min"), attrs.min_regions)?;
        // One `stat` scheme matching every region: it changes nothing, and makes the kernel
        // report all regions under tried_regions on request.
        let schemes = ctx.join("schemes");
        self.write(&schemes.join("nr_schemes"), 1)?;
        let scheme = schemes.join("0");
        if !self.has_tried_regions(&scheme) {
            self.release();
            return Err(DamonError::NoTriedRegions(scheme));
        }
        self.write(&scheme.join("action"), "stat")?;
        let pattern = scheme.join("access_pattern");
        for (range, max) in [
            ("sz", u64::MAX),
            ("nr_accesses", u32::MAX as u64),
            ("age", u32::MAX as u64),
        ] {
            self.write(&pattern.join(range).join("max"), max)?;
            self.write(&pattern.join(range).join("min"), 0)?;
        }
        Ok(())
    }

    /// Whether the kernel made a `tried_regions` directory in the scheme directory `scheme`.
    ///
    /// This is how to tell a kernel that can report regions (6.2+) from one that cannot
    /// (5.18-6.1): writing `nr_schemes` creates each scheme's subdirectories, `tried_regions`
    /// among them since 6.2 (mm/damon/sysfs-schemes.c, `damon_sysfs_scheme_add_dirs`). Writing
    /// `update_schemes_tried_regions` to `state` is no test here: while the kdamond is off the
    /// kernel refuses it with EINVAL on every version (from memory of mm/damon/sysfs.c, where
    /// commands other than on/off need a running kdamond), and on 5.18-6.1 as an unknown
    /// command too.
    fn has_tried_regions(&mut self, scheme: &Path) -> bool {
        self.files
            .list(scheme)
            .is_ok_and(|names| names.iter().any(|n| n == "tried_regions"))
    }

    /// The operations set in use: `fvaddr` or `vaddr`.
    pub fn operations(&self) -> &'static str {
        self.operations
    }

    /// Monitors exactly `targets`. Any change restarts the kdamond with the new targets and
    /// ranges, and so does finding it stopped (the kernel stops a kdamond on its own, e.g. when
    /// every target exited). Online `commit` would keep region history, but a commit the
    /// kernel rejects terminates the kdamond silently on 6.x (seen on 6.12: a commit naming an
    /// exited pid stops it, and the write still succeeds), and a restart costs about the first
    /// aggregation (100 ms) of a 2 s interval (its snapshot holds one region with no counts;
    /// regions split again within about three). With `vaddr` the ranges are ignored (the
    /// kernel follows the whole address space).
    pub fn set_targets(&mut self, targets: &[Target]) -> Result<(), DamonError> {
        self.claim()?;
        let fixed = self.operations == "fvaddr";
        // fvaddr cannot monitor a target with no ranges.
        let targets: Vec<Target> = targets
            .iter()
            .filter(|t| !fixed || !t.ranges.is_empty())
            .map(|t| Target {
                pid: t.pid,
                ranges: if fixed { t.ranges.clone() } else { Vec::new() },
            })
            .collect();
        let running = self.is_running()?;
        if targets == self.targets && (running || targets.is_empty()) {
            return Ok(());
        }
        if running {
            self.write(&self.dir().join("state"), "off")?;
        }
        let ranges = targets.iter().map(|t| t.ranges.len() as u64).sum::<u64>();
        let max_regions = self.attrs.max_regions.max(ranges * 2);
        let max = self.ctx().join("monitoring_attrs/nr_regions/max");
        self.write(&max, max_regions)?;
        let dir = self.ctx().join("targets");
        self.write(&dir.join("nr_targets"), targets.len())?;
        for (i, target) in targets.iter().enumerate() {
            let target_dir = dir.join(i.to_string());
            self.write(&target_dir.join("pid_target"), target.pid)?;
            if fixed {
                let regions = target_dir.join("regions");
                self.write(&regions.join("nr_regions"), target.ranges.len())?;
                for (j, (start, end)) in target.ranges.iter().enumerate() {
                    self.write(&regions.join(format!("{j}/start")), start)?;
                    self.write(&regions.join(format!("{j}/end")), end)?;
                }
            }
        }
        self.targets = targets;
        if self.targets.is_empty() {
            return Ok(());
        }
        let state = self.dir().join("state");
        match self.files.write(&state, "on") {
            // The kernel's damon_start refuses a sysfs kdamond while an exclusive user (the
            // DAMON_RECLAIM and DAMON_LRU_SORT modules) runs.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(DamonError::Exclusive {
                holder: format!(
                    "a kernel module (starting {} was refused: busy)",
                    state.display()
                ),
            }),
            other => other.map_err(|e| io_err(&state, e)),
        }
    }

    pub fn is_running(&mut self) -> Result<bool, DamonError> {
        if self.index.is_none() {
            return Ok(false);
        }
        Ok(self.read(&self.dir().join("state"))? == "on")
    }

    /// Asks the kdamond for its current regions and returns them, attributed to targets.
    /// Empty when not running (e.g. every target exited and the kdamond stopped itself).
    pub fn snapshot(&mut self) -> Result<Vec<RegionSample>, DamonError> {
        if self.targets.is_empty() || !self.is_running()? {
            return Ok(Vec::new());
        }
        self.write(&self.dir().join("state"), "update_schemes_tried_regions")?;
        let dir = self.ctx().join("schemes/0/tried_regions");
        let mut indices: Vec<usize> = self
            .files
            .list(&dir)
            .map_err(|e| io_err(&dir, e))?
            .iter()
            .filter_map(|name| name.parse().ok())
            .collect();
        indices.sort_unstable();
        let mut out = Vec::with_capacity(indices.len());
        let mut target = 0;
        let mut previous_end = 0;
        for i in indices {
            let region = dir.join(i.to_string());
            let start = self.read_number(&region.join("start"))?;
            let end = self.read_number(&region.join("end"))?;
            let nr_accesses = self.read_number(&region.join("nr_accesses"))? as u32;
            // The kernel lists regions target by target, each target's in ascending order, so
            // the target only ever advances: to the next one whose ranges contain the region
            // (fvaddr), or, when the address goes backwards, to the next one regardless. A
            // region from ranges the kernel has not yet replaced stays with the current target.
            if !out.is_empty() {
                let fixed = self.operations == "fvaddr";
                let inside = |t: &Target| t.ranges.iter().any(|&(s, e)| s <= start && end <= e);
                if fixed && !inside(&self.targets[target]) || start < previous_end {
                    let later = (target + 1..self.targets.len())
                        .find(|&n| fixed && inside(&self.targets[n]));
                    match later {
                        Some(n) => target = n,
                        None if start < previous_end && target + 1 < self.targets.len() => {
                            target += 1
                        }
                        None => {}
                    }
                }
            }
            previous_end = end;
            out.push(RegionSample {
                target,
                start,
                end,
                nr_accesses,
            });
        }
        Ok(out)
    }

    /// The pid of our kdamond thread while it runs (a restart gives it a new one).
    pub fn kdamond_pid(&mut self) -> Option<u32> {
        self.index?;
        self.read_number(&self.dir().join("pid"))
            .ok()
            .map(|p| p as u32)
            .filter(|&p| p > 0)
    }

    /// The targets currently monitored, in kernel target order.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// Stops and removes our kdamond, leaving DAMON as we found it.
    pub fn release(&mut self) {
        if self.index.take().is_none() {
            return;
        }
        let dir = self.kdamonds.join("0");
        if self
            .files
            .read(&dir.join("state"))
            .is_ok_and(|s| s.trim() == "on")
        {
            let _ = self.files.write(&dir.join("state"), "off");
        }
        let _ = self.files.write(&self.kdamonds.join("nr_kdamonds"), "0");
        self.targets.clear();
        if let Some(path) = &self.owner_file {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl<F: SysfsFiles> Drop for Damon<F> {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DAMON's sysfs as a 6.2+ kernel lays it out (the scheme has `tried_regions`).
    fn fake(nr_kdamonds: &str) -> DryRunFiles {
        let mut files = fake_before_6_2(nr_kdamonds);
        files
            .dirs
            .insert(format!("{K}/0/contexts/0/schemes/0/tried_regions").into());
        files
    }

    /// DAMON's sysfs as 5.18-6.1 lay it out: schemes without `tried_regions`.
    fn fake_before_6_2(nr_kdamonds: &str) -> DryRunFiles {
        let mut files = DryRunFiles::default();
        files
            .files
            .insert(format!("{K}/nr_kdamonds").into(), nr_kdamonds.into());
        files
            .files
            .insert(format!("{K}/0/state").into(), "off".into());
        files
    }

    const K: &str = "/sys/kernel/mm/damon/admin/kdamonds";

    fn pids(p: &[u32]) -> Vec<Target> {
        p.iter()
            .map(|&pid| Target {
                pid,
                ranges: vec![],
            })
            .collect()
    }

    fn put_regions(d: &mut Damon<DryRunFiles>, rows: &[(u64, u64, u32)]) {
        let regions = format!("{K}/0/contexts/0/schemes/0/tried_regions");
        for (i, (s, e, n)) in rows.iter().enumerate() {
            for (f, v) in [("start", *s), ("end", *e), ("nr_accesses", *n as u64)] {
                d.files
                    .files
                    .insert(format!("{regions}/{i}/{f}").into(), v.to_string());
            }
        }
    }

    #[test]
    fn fvaddr_monitors_exactly_the_given_ranges() {
        let mut files = fake("0");
        files.files.insert(
            format!("{K}/0/contexts/0/avail_operations").into(),
            "vaddr fvaddr paddr\n".into(),
        );
        let mut d = Damon::new(files, Path::new("/sys"), DamonAttrs::default());
        let mut targets = vec![
            Target {
                pid: 10,
                ranges: vec![(0x1000, 0x3000), (0x8000, 0x9000)],
            },
            Target {
                pid: 20,
                ranges: vec![(0x2000, 0x4000)],
            },
        ];
        d.set_targets(&targets).unwrap();
        assert_eq!(d.operations(), "fvaddr");
        let written = |d: &Damon<DryRunFiles>, suffix: &str| {
            d.files()
                .writes
                .iter()
                .filter(|(p, _)| p.to_string_lossy().ends_with(suffix))
                .map(|(_, v)| v.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(written(&d, "0/contexts/0/operations"), vec!["fvaddr"]);
        assert_eq!(written(&d, "targets/0/regions/1/start"), vec!["32768"]);
        assert_eq!(written(&d, "targets/1/regions/0/end"), vec!["16384"]);
        assert_eq!(d.files().writes.last().unwrap().1, "on");
        // New ranges for the same processes: a clean restart with the new ranges.
        targets[1].ranges = vec![(0x2000, 0x5000)];
        d.set_targets(&targets).unwrap();
        assert_eq!(written(&d, "0/state"), vec!["on", "off", "on"]);
        assert_eq!(
            written(&d, "targets/1/regions/0/end"),
            vec!["16384", "20480"]
        );
        // Unchanged targets while running: nothing is written.
        let before = d.files().writes.len();
        d.set_targets(&targets).unwrap();
        assert_eq!(d.files().writes.len(), before);
        // A kdamond the kernel stopped on its own is restarted.
        d.files
            .files
            .insert(format!("{K}/0/state").into(), "off".into());
        d.set_targets(&targets).unwrap();
        assert_eq!(written(&d, "0/state"), vec!["on", "off", "on", "on"]);
        // Regions are attributed to targets by containment, even where the processes'
        // addresses interleave.
        put_regions(
            &mut d,
            &[
                (0x1000, 0x2000, 1),
                (0x2000, 0x3000, 2),
                (0x8000, 0x9000, 3),
                (0x2000, 0x5000, 4), // target 1 starts above target 0's first regions
            ],
        );
        let snap = d.snapshot().unwrap();
        assert_eq!(
            snap.iter().map(|r| r.target).collect::<Vec<_>>(),
            [0, 0, 0, 1]
        );
    }

    #[test]
    fn coalescing_closes_the_smallest_gaps() {
        let r = [(0, 10), (10, 20), (25, 30), (100, 110), (111, 120)];
        assert_eq!(
            coalesce_ranges(&r, 10),
            r.to_vec(),
            "adjacent objects keep their own range"
        );
        assert_eq!(
            coalesce_ranges(&r, 4),
            vec![(0, 20), (25, 30), (100, 110), (111, 120)]
        );
        assert_eq!(coalesce_ranges(&r, 2), vec![(0, 30), (100, 120)]);
        assert_eq!(coalesce_ranges(&[(0, 10), (5, 12)], 10), vec![(0, 12)]);
        assert_eq!(coalesce_ranges(&r, 1), vec![(0, 120)]);
    }

    /// Starting is refused with EBUSY while a DAMON module runs exclusively: say which, and
    /// what to do, rather than report an I/O error.
    #[test]
    fn a_module_holding_damon_is_named() {
        let mut d = Damon::new(fake("0\n"), Path::new("/sys"), DamonAttrs::default());
        d.files
            .files
            .insert(format!("{K}/0/state").into(), "off".into());
        d.files.refuse = Some((format!("{K}/0/state").into(), "on".into(), libc::EBUSY));
        let err = d.set_targets(&pids(&[41])).unwrap_err();
        assert!(matches!(err, DamonError::Exclusive { .. }), "{err}");
        assert!(
            err.to_string().contains("damon_reclaim/parameters/enabled"),
            "{err}"
        );
        // Seen before anything is created, when the module says it runs.
        let mut d = Damon::new(fake("0\n"), Path::new("/sys"), DamonAttrs::default());
        d.files.files.insert(
            "/sys/module/damon_lru_sort/parameters/enabled".into(),
            "Y\n".into(),
        );
        let err = d.claim().unwrap_err();
        assert!(
            err.to_string().contains("the damon_lru_sort module"),
            "{err}"
        );
        assert!(d.files().writes.is_empty(), "nothing created");
    }

    #[test]
    fn claims_configures_and_targets() {
        let mut d = Damon::new(fake("0\n"), Path::new("/sys"), DamonAttrs::default());
        d.files
            .files
            .insert(format!("{K}/0/state").into(), "off".into());
        d.set_targets(&pids(&[41, 42])).unwrap();
        let writes: Vec<(String, String)> = d
            .files()
            .writes
            .iter()
            .map(|(p, v)| (p.strip_prefix(K).unwrap().display().to_string(), v.clone()))
            .collect();
        let expect_prefix = [
            ("nr_kdamonds", "1"),
            ("0/contexts/nr_contexts", "1"),
            ("0/contexts/0/operations", "vaddr"),
            ("0/contexts/0/monitoring_attrs/intervals/sample_us", "5000"),
        ];
        for (i, (p, v)) in expect_prefix.iter().enumerate() {
            assert_eq!((writes[i].0.as_str(), writes[i].1.as_str()), (*p, *v));
        }
        let tail: Vec<_> = writes[writes.len() - 4..].to_vec();
        assert_eq!(
            tail,
            vec![
                ("0/contexts/0/targets/nr_targets".into(), "2".into()),
                ("0/contexts/0/targets/0/pid_target".into(), "41".into()),
                ("0/contexts/0/targets/1/pid_target".into(), "42".into()),
                ("0/state".into(), "on".into()),
            ]
        );
        assert!(writes.contains(&("0/contexts/0/schemes/0/action".into(), "stat".into())));
        // Same targets again while running: no writes.
        let before = d.files().writes.len();
        d.set_targets(&pids(&[41, 42])).unwrap();
        assert_eq!(d.files().writes.len(), before);
        // Dropping releases the kdamond.
        drop(d);
    }

    #[test]
    fn refuses_foreign_and_busy_kdamonds() {
        let mut files = fake("1\n");
        files
            .files
            .insert(format!("{K}/0/state").into(), "on\n".into());
        let mut d = Damon::new(files, Path::new("/sys"), DamonAttrs::default());
        let err = d.claim().unwrap_err();
        assert!(
            matches!(
                err,
                DamonError::Busy {
                    count: 1,
                    running: 0,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains(K), "says where to look: {err}");
        assert!(
            d.files().writes.is_empty(),
            "nothing written to someone else's DAMON"
        );

        let mut files = fake("1\n");
        files
            .files
            .insert(format!("{K}/0/state").into(), "off\n".into());
        let mut d = Damon::new(files, Path::new("/sys"), DamonAttrs::default());
        assert!(matches!(d.claim(), Err(DamonError::Foreign { .. })));

        // ...unless the owner file names an objtier daemon that is gone: then it is ours.
        let owner = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(owner.path(), "4294967").unwrap(); // no such pid
        let mut files = fake("1\n");
        files
            .files
            .insert(format!("{K}/0/state").into(), "off\n".into());
        let mut d = Damon::new(files, Path::new("/sys"), DamonAttrs::default())
            .with_owner_file(owner.path().to_owned());
        d.claim().unwrap();
        assert!(d.reclaimed_stale());
        let nr: Vec<&str> = d
            .files()
            .writes
            .iter()
            .filter(|(p, _)| p.ends_with("nr_kdamonds"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(nr, ["0", "1"]);
        assert_eq!(
            std::fs::read_to_string(owner.path()).unwrap(),
            std::process::id().to_string()
        );

        let mut d = Damon::new(
            DryRunFiles::default(),
            Path::new("/sys"),
            DamonAttrs::default(),
        );
        let err = d.claim().unwrap_err();
        assert!(matches!(err, DamonError::NoSysfs(_)));
        assert!(err.to_string().contains("CONFIG_DAMON_SYSFS"));
    }

    #[test]
    fn no_vaddr_is_reported_and_cleaned_up() {
        let mut files = fake("0");
        files.files.insert(
            format!("{K}/0/contexts/0/avail_operations").into(),
            "paddr\n".into(),
        );
        let mut d = Damon::new(files, Path::new("/sys"), DamonAttrs::default());
        let err = d.claim().unwrap_err();
        assert!(err.to_string().contains("CONFIG_DAMON_VADDR"), "{err}");
        assert_eq!(
            d.files().writes.last().unwrap(),
            &(PathBuf::from(format!("{K}/nr_kdamonds")), "0".to_string())
        );
    }

    #[test]
    fn a_kernel_without_tried_regions_is_refused_at_claim() {
        let mut d = Damon::new(
            fake_before_6_2("0"),
            Path::new("/sys"),
            DamonAttrs::default(),
        );
        let err = d.claim().unwrap_err();
        assert!(matches!(err, DamonError::NoTriedRegions(_)), "{err}");
        let message = err.to_string();
        assert!(
            message.contains("6.2+") && message.contains("--source proc"),
            "{message}"
        );
        assert_eq!(
            d.files().writes.last().unwrap(),
            &(PathBuf::from(format!("{K}/nr_kdamonds")), "0".to_string()),
            "the kdamond it made is removed again"
        );
        assert!(
            d.set_targets(&pids(&[10])).is_err(),
            "and it stays unusable"
        );
    }

    #[test]
    fn an_empty_tried_regions_directory_is_an_empty_snapshot() {
        let mut d = Damon::new(fake("0"), Path::new("/sys"), DamonAttrs::default());
        d.set_targets(&pids(&[10])).unwrap();
        assert_eq!(d.snapshot().unwrap(), vec![]);
    }

    #[test]
    fn snapshot_attributes_regions_to_targets() {
        let mut d = Damon::new(fake("0"), Path::new("/sys"), DamonAttrs::default());
        d.set_targets(&pids(&[10, 20])).unwrap();
        put_regions(
            &mut d,
            &[
                (0x1000u64, 0x5000u64, 3u32),
                (0x5000, 0x9000, 0),
                (0x7fff_0000, 0x7fff_8000, 1),
                (0x2000, 0x3000, 9), // below the previous end: second target
                (0x3000, 0x4000, 2),
            ],
        );
        let snap = d.snapshot().unwrap();
        assert_eq!(snap.len(), 5);
        assert_eq!(
            snap.iter().map(|r| r.target).collect::<Vec<_>>(),
            [0, 0, 0, 1, 1]
        );
        assert_eq!(snap[3].nr_accesses, 9);
        assert_eq!(
            d.files().writes.last().unwrap().1,
            "update_schemes_tried_regions"
        );
    }

    #[test]
    fn thread_cpu_time_reads_stat_with_odd_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("42")).unwrap();
        // A kernel thread's stat, its name with a space and a parenthesis.
        std::fs::write(
            dir.path().join("42/stat"),
            "42 (kdamond.0 (x)) S 2 0 0 0 -1 2129984 0 0 0 0 150 50 0 0 20 0 1 0 100 0 0\n",
        )
        .unwrap();
        // SAFETY: sysconf has no failure mode for _SC_CLK_TCK.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        assert_eq!(thread_cpu_seconds(dir.path(), 42), Some(200.0 / hz));
        assert_eq!(thread_cpu_seconds(dir.path(), 43), None);
    }
}
