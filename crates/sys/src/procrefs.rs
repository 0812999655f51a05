//! Page references through `/proc`, for kernels without DAMON: `clear_refs`, `smaps` and
//! `pagemap`, and idle page tracking (`/sys/kernel/mm/page_idle/bitmap`) where the kernel has it.
//!
//! - `echo 2 > /proc/PID/clear_refs` clears the accessed (young) bits of the process's anonymous
//!   pages; `/proc/PID/smaps` then says, per mapping (VMA), how many bytes were referenced since
//!   (`Referenced:`). Per mapping only: objtier packs many objects into one chunk mapping.
//! - `echo 4 > /proc/PID/clear_refs` clears the soft-dirty bits (and write-protects the pages, so
//!   the next write to each takes a minor fault); bit 55 of each 8-byte `/proc/PID/pagemap` entry
//!   then says whether that page was written since. Per page, writes only, and only with
//!   `CONFIG_MEM_SOFT_DIRTY`. A mapping created or grown since the clear has the `sd` VmFlag and
//!   reports every page soft-dirty: those pages say nothing about writes.
//! - Idle page tracking: writing a page frame's bit to the bitmap marks it idle; reading it back
//!   says whether the page was accessed (read or written) since. Per page, reads and writes
//!   alike; needs `CONFIG_IDLE_PAGE_TRACKING` and root (the page frame numbers of `pagemap` are
//!   zero without `CAP_SYS_ADMIN`).
//!
//! The two `clear_refs` values cannot be combined: each value selects one action (1 to 3 clear
//! accessed bits in all, anonymous or file mappings; 4 clears soft-dirty bits; 5 resets the peak
//! RSS), so each costs its own walk of the process's page tables.
//!
//! Everything goes through [`RefsKernel`]: [`ProcRefs`] is the real kernel (it opens a process's
//! files once, while the process is known to be alive, so a reused pid never reaches another
//! program), and [`RecordingRefs`] simulates pages and records every write, so tests can assert
//! the exact `clear_refs` and bitmap writes. The smaps parser is tested on captured text.

use crate::PAGE_SIZE;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
pub const PM_PRESENT: u64 = 1 << 63;
pub const PM_SWAPPED: u64 = 1 << 62;
pub const PM_SOFT_DIRTY: u64 = 1 << 55;
/// Bits 0-54: the page frame number, when present (zero without `CAP_SYS_ADMIN`).
pub const PM_PFN_MASK: u64 = (1 << 55) - 1;

/// Bytes of one pagemap entry.
pub const PAGEMAP_ENTRY_BYTES: u64 = 8;

/// One mapping of `/proc/PID/smaps`, with what objtier reads from it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    /// Resident bytes (`Rss:`).
    pub resident_bytes: u64,
    /// Bytes referenced since the last `clear_refs` (`Referenced:`).
    pub referenced_bytes: u64,
    /// VmFlags has `sd`: the mapping was created or grown since the last soft-dirty clear, so
    /// pagemap reports all its pages soft-dirty.
    pub soft_dirty_flag: bool,
}

/// Parses `/proc/PID/smaps`. A mapping without a `Referenced:` line counts as unreferenced;
/// lines that do not parse are skipped (a field a future kernel adds must not lose the rest).
pub fn parse_smaps(text: &str) -> Vec<Vma> {
    let mut vmas: Vec<Vma> = Vec::new();
    for line in text.lines() {
        let Some(first) = line.split_whitespace().next() else {
            continue;
        };
        if let Some(key) = first.strip_suffix(':') {
            let Some(vma) = vmas.last_mut() else {
                continue;
            };
            let rest = line[first.len()..].trim();
            let kib = || {
                let kib = rest.strip_suffix("kB").map(str::trim).unwrap_or(rest);
                kib.parse::<u64>().unwrap_or(0) * 1024
            };
            match key {
                "Rss" => vma.resident_bytes = kib(),
                "Referenced" => vma.referenced_bytes = kib(),
                "VmFlags" => vma.soft_dirty_flag = rest.split_whitespace().any(|f| f == "sd"),
                _ => {}
            }
            continue;
        }
        let Some((start, end)) = first.split_once('-') else {
            continue;
        };
        if let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        {
            vmas.push(Vma {
                start,
                end,
                ..Vma::default()
            });
        }
    }
    vmas.sort_by_key(|v| v.start);
    vmas
}

/// The `clear_refs` values objtier writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClearRefs {
    /// `2`: the accessed bits of anonymous pages (objtier's objects are private anonymous
    /// memory; leaving file mappings alone spares their walk and reclaim's view of them).
    Anonymous,
    /// `4`: the soft-dirty bits.
    SoftDirty,
}

impl ClearRefs {
    pub fn value(self) -> &'static str {
        match self {
            ClearRefs::Anonymous => "2",
            ClearRefs::SoftDirty => "4",
        }
    }
}

/// What this kernel offers for page references, found by reading only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Support {
    /// `/proc/PID/clear_refs`, `smaps` and `pagemap` (`CONFIG_PROC_PAGE_MONITOR`).
    pub page_monitor: bool,
    /// Soft-dirty bits (`CONFIG_MEM_SOFT_DIRTY`): the `sd` VmFlag exists only with it, and a
    /// process's mappings carry it until something clears its soft-dirty bits, so the reading
    /// process's own smaps shows it.
    pub soft_dirty: bool,
    /// `/sys/kernel/mm/page_idle/bitmap` (`CONFIG_IDLE_PAGE_TRACKING`).
    pub idle_bitmap: bool,
}

impl Support {
    pub fn probe(proc_root: &Path, sys_root: &Path) -> Support {
        let own = proc_root.join("self");
        let page_monitor = ["clear_refs", "smaps", "pagemap"]
            .iter()
            .all(|f| own.join(f).exists());
        let soft_dirty = std::fs::read_to_string(own.join("smaps"))
            .is_ok_and(|text| parse_smaps(&text).iter().any(|v| v.soft_dirty_flag));
        Support {
            page_monitor,
            soft_dirty,
            idle_bitmap: idle_bitmap_path(sys_root).exists(),
        }
    }
}

pub fn idle_bitmap_path(sys_root: &Path) -> PathBuf {
    sys_root.join("kernel/mm/page_idle/bitmap")
}

/// How precisely the `proc` source sees accesses, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// Idle page tracking: every page, reads and writes alike.
    IdlePages,
    /// smaps `Referenced:` per mapping (reads and writes) and, with `soft_dirty`, written pages
    /// one by one.
    Referenced { soft_dirty: bool },
}

impl Precision {
    /// The best this kernel allows a daemon with this effective uid, and why nothing better
    /// (one sentence per better option not taken); an error when there is nothing at all.
    pub fn choose(support: &Support, euid: u32) -> Result<(Precision, Vec<String>), String> {
        if !support.page_monitor {
            return Err("the kernel has no /proc/PID/clear_refs, smaps and pagemap \
                        (CONFIG_PROC_PAGE_MONITOR is not set)"
                .into());
        }
        let mut not_taken = Vec::new();
        match (support.idle_bitmap, euid) {
            (true, 0) => return Ok((Precision::IdlePages, not_taken)),
            (true, _) => not_taken.push(
                "idle page tracking needs root (page frame numbers and the bitmap are \
                 root-only)"
                    .into(),
            ),
            (false, _) => not_taken.push(
                "no idle page tracking (/sys/kernel/mm/page_idle/bitmap is missing: \
                 CONFIG_IDLE_PAGE_TRACKING is not set)"
                    .into(),
            ),
        }
        if !support.soft_dirty {
            not_taken.push(
                "no soft-dirty bits (no `sd` VmFlag in smaps: CONFIG_MEM_SOFT_DIRTY is not \
                 set), so writes are seen per mapping too"
                    .into(),
            );
        }
        Ok((
            Precision::Referenced {
                soft_dirty: support.soft_dirty,
            },
            not_taken,
        ))
    }

    /// What it sees, for logs, status and doctor.
    pub fn describe(self) -> &'static str {
        match self {
            Precision::IdlePages => {
                "idle page tracking: per page (reads and writes alike), one bit per page per interval"
            }
            Precision::Referenced { soft_dirty: true } => {
                "clear_refs + smaps Referenced + pagemap soft-dirty: per mapping for reads, per \
                 page for writes, one bit per page per interval"
            }
            Precision::Referenced { soft_dirty: false } => {
                "clear_refs + smaps Referenced: per mapping for reads and writes (no soft-dirty \
                 bits), one bit per page per interval"
            }
        }
    }
}

/// The kernel operations the `proc` source needs, per process and for the idle bitmap.
pub trait RefsKernel: Send {
    /// Opens what `pid` needs, while the caller knows it is alive; later calls for `pid` use
    /// what was opened here, so they fail (ESRCH) once it exits, even if its pid is reused.
    fn attach(&mut self, pid: u32) -> io::Result<()>;
    /// Forgets `pid`.
    fn detach(&mut self, pid: u32);
    fn smaps(&mut self, pid: u32) -> io::Result<Vec<Vma>>;
    /// Fills `out` with the pagemap entries of the pages from `first_page` (an address / 4096).
    fn pagemap(&mut self, pid: u32, first_page: u64, out: &mut [u64]) -> io::Result<()>;
    fn clear_refs(&mut self, pid: u32, what: ClearRefs) -> io::Result<()>;
    /// Fills `out` with idle bitmap words from `first_word` (bit `pfn % 64` of word `pfn / 64`:
    /// set if the page frame is idle, i.e. not accessed since it was marked).
    fn read_idle(&mut self, first_word: u64, out: &mut [u64]) -> io::Result<()>;
    /// Marks idle the page frames whose bits are set in `words` (from `first_word`); clear bits
    /// leave their frames alone.
    fn mark_idle(&mut self, first_word: u64, words: &[u64]) -> io::Result<()>;
}

fn gone(pid: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("process {pid} is gone (or was never attached)"),
    )
}

/// Whether an error means the process exited.
pub fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// The kind to give `e` when it is wrapped with more context (which loses its OS error number):
/// ESRCH, which the kernel returns for the files of a process that is exiting or a zombie (its
/// `/proc/PID` still exists, its memory does not), becomes NotFound, so [`is_gone`] still
/// recognises it.
fn kind_of(e: &io::Error) -> io::ErrorKind {
    if e.raw_os_error() == Some(libc::ESRCH) {
        io::ErrorKind::NotFound
    } else {
        e.kind()
    }
}

struct PidFiles {
    smaps: File,
    pagemap: File,
    clear_refs: File,
}

/// The real kernel, under a proc and a sys root.
pub struct ProcRefs {
    proc_root: PathBuf,
    sys_root: PathBuf,
    pids: HashMap<u32, PidFiles>,
    idle: Option<File>,
}

impl ProcRefs {
    pub fn new(proc_root: &Path, sys_root: &Path) -> ProcRefs {
        ProcRefs {
            proc_root: proc_root.to_owned(),
            sys_root: sys_root.to_owned(),
            pids: HashMap::new(),
            idle: None,
        }
    }

    fn files(&mut self, pid: u32) -> io::Result<&mut PidFiles> {
        self.pids.get_mut(&pid).ok_or_else(|| gone(pid))
    }

    fn idle_file(&mut self) -> io::Result<&File> {
        if self.idle.is_none() {
            let path = idle_bitmap_path(&self.sys_root);
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            self.idle = Some(file);
        }
        Ok(self.idle.as_ref().expect("opened above"))
    }
}

fn as_bytes_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: any byte pattern is a valid u64; the slice covers exactly the words.
    unsafe {
        std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), std::mem::size_of_val(words))
    }
}

fn as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: the slice covers exactly the words, read only.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), std::mem::size_of_val(words)) }
}

/// `read_at` until `out` is full; a short read (the process exited: pagemap reads nothing) is
/// ESRCH, past the end of the idle bitmap it reads as zero (no such frames).
fn read_words_at(file: &File, offset: u64, out: &mut [u64], short_is_gone: bool) -> io::Result<()> {
    let bytes = as_bytes_mut(out);
    let mut done = 0;
    while done < bytes.len() {
        match file.read_at(&mut bytes[done..], offset + done as u64) {
            Ok(0) if short_is_gone => return Err(io::Error::from_raw_os_error(libc::ESRCH)),
            Ok(0) => {
                bytes[done..].fill(0);
                return Ok(());
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl RefsKernel for ProcRefs {
    fn attach(&mut self, pid: u32) -> io::Result<()> {
        let dir = self.proc_root.join(pid.to_string());
        let open = |name: &str, write: bool| {
            std::fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .open(dir.join(name))
                .map_err(|e| io::Error::new(kind_of(&e), format!("{}/{name}: {e}", dir.display())))
        };
        let files = PidFiles {
            smaps: open("smaps", false)?,
            pagemap: open("pagemap", false)?,
            clear_refs: open("clear_refs", true)?,
        };
        self.pids.insert(pid, files);
        Ok(())
    }

    fn detach(&mut self, pid: u32) {
        self.pids.remove(&pid);
    }

    fn smaps(&mut self, pid: u32) -> io::Result<Vec<Vma>> {
        let file = &mut self.files(pid)?.smaps;
        file.rewind()?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        Ok(parse_smaps(&text))
    }

    fn pagemap(&mut self, pid: u32, first_page: u64, out: &mut [u64]) -> io::Result<()> {
        let file = &self.files(pid)?.pagemap;
        read_words_at(file, first_page * PAGEMAP_ENTRY_BYTES, out, true)
    }

    fn clear_refs(&mut self, pid: u32, what: ClearRefs) -> io::Result<()> {
        let file = &mut self.files(pid)?.clear_refs;
        file.write_all(what.value().as_bytes())
    }

    fn read_idle(&mut self, first_word: u64, out: &mut [u64]) -> io::Result<()> {
        let file = self.idle_file()?;
        read_words_at(file, first_word * 8, out, false)
    }

    fn mark_idle(&mut self, first_word: u64, words: &[u64]) -> io::Result<()> {
        self.idle_file()?
            .write_all_at(as_bytes(words), first_word * 8)
    }
}

/// A write [`RecordingRefs`] saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefsWrite {
    ClearRefs { pid: u32, what: ClearRefs },
    MarkIdle { first_word: u64, words: Vec<u64> },
}

#[derive(Clone, Debug, Default)]
struct FakePage {
    pfn: u64,
    young: bool,
    soft_dirty: bool,
}

#[derive(Clone, Debug, Default)]
struct FakeProcess {
    /// start -> (end, sd flag)
    vmas: BTreeMap<u64, (u64, bool)>,
    /// page address -> page
    pages: BTreeMap<u64, FakePage>,
    attached: bool,
}

/// What clearing a page's reference bits costs the program that touches the page next, per page:
/// the CPU sets a cleared accessed bit again on the next access (in a virtual machine that can
/// take half a microsecond; on bare metal tens of nanoseconds), and a page whose soft-dirty bit
/// was cleared takes a write fault. Measured on a 32 MiB buffer of this process: one pass of
/// writes, one byte a page, with its bits set, then the same after `clear_refs` (`what`, in
/// order), the median difference of five tries (about 40 ms in all). Clears this process's own
/// bits, which costs it nothing that matters. An estimate: a process whose page tables do not
/// fit in the cache pays more per page (on the machine of docs/performance.md, 311 ns a page
/// for 32 MiB, 519 ns for 600 MiB).
pub fn reference_clear_cost(
    proc_root: &Path,
    what: &[ClearRefs],
) -> io::Result<std::time::Duration> {
    const PAGES: usize = 8192;
    let len = PAGES * PAGE_SIZE;
    // SAFETY: a private anonymous mapping of our own, unmapped below.
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
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    struct Unmap(*mut libc::c_void, usize);
    impl Drop for Unmap {
        fn drop(&mut self) {
            // SAFETY: the mapping made above, used by nothing else.
            unsafe { libc::munmap(self.0, self.1) };
        }
    }
    let _unmap = Unmap(base, len);
    // 4 KiB pages, as objtier's chunks are where huge pages are not `always`: one huge page's
    // bit would stand for 512 of them.
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) };
    let bytes = base as *mut u8;
    let pass = || {
        let started = std::time::Instant::now();
        for page in 0..PAGES {
            // SAFETY: inside the mapping; volatile so that every write happens.
            unsafe {
                let p = bytes.add(page * PAGE_SIZE);
                p.write_volatile(p.read_volatile().wrapping_add(1));
            }
        }
        started.elapsed()
    };
    pass(); // fault every page in
    let mut clear_refs = std::fs::OpenOptions::new()
        .write(true)
        .open(proc_root.join("self/clear_refs"))?;
    let mut extra = Vec::with_capacity(5);
    for _ in 0..5 {
        let warm = pass();
        for w in what {
            clear_refs.write_all(w.value().as_bytes())?;
        }
        extra.push(pass().saturating_sub(warm));
    }
    extra.sort_unstable();
    Ok(extra[extra.len() / 2] / PAGES as u32)
}

/// A simulated kernel: mappings, pages with accessed and soft-dirty bits, idle page frames. It
/// behaves as the kernel documents (new mappings carry `sd`, clearing is per process, marking
/// idle touches only the frames whose bits are set) and records every write.
#[derive(Debug)]
pub struct RecordingRefs {
    /// Whether the simulated kernel has soft-dirty bits (without, smaps shows no `sd` flag and
    /// pagemap no bit 55).
    pub soft_dirty: bool,
    processes: HashMap<u32, FakeProcess>,
    idle: HashSet<u64>,
    next_pfn: u64,
    pub writes: Vec<RefsWrite>,
}

impl RecordingRefs {
    pub fn new(soft_dirty: bool) -> RecordingRefs {
        RecordingRefs {
            soft_dirty,
            processes: HashMap::new(),
            idle: HashSet::new(),
            next_pfn: 0x1000,
            writes: Vec::new(),
        }
    }

    /// Maps `[start, end)` in `pid` (a new mapping: soft-dirty flagged, as the kernel does).
    pub fn map(&mut self, pid: u32, start: u64, end: u64) {
        let sd = self.soft_dirty;
        self.processes
            .entry(pid)
            .or_default()
            .vmas
            .insert(start, (end, sd));
    }

    /// The process exits.
    pub fn exit(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// `pid` reads (or writes) every page of `[start, end)`: each becomes present, accessed and
    /// not idle (and soft-dirty if written).
    pub fn touch(&mut self, pid: u32, start: u64, end: u64, write: bool) {
        let p = self.processes.get_mut(&pid).expect("map the process first");
        let soft_dirty = self.soft_dirty;
        for page in (start & !4095..end).step_by(4096) {
            let next_pfn = &mut self.next_pfn;
            let entry = p.pages.entry(page).or_insert_with(|| {
                *next_pfn += 1;
                FakePage {
                    pfn: *next_pfn,
                    ..FakePage::default()
                }
            });
            entry.young = true;
            entry.soft_dirty |= write && soft_dirty;
            self.idle.remove(&entry.pfn);
        }
    }

    /// The page frame of a present page.
    pub fn pfn_of(&self, pid: u32, page: u64) -> Option<u64> {
        Some(self.processes.get(&pid)?.pages.get(&page)?.pfn)
    }

    fn process(&mut self, pid: u32) -> io::Result<&mut FakeProcess> {
        self.processes
            .get_mut(&pid)
            .filter(|p| p.attached)
            .ok_or_else(|| gone(pid))
    }
}

impl RefsKernel for RecordingRefs {
    fn attach(&mut self, pid: u32) -> io::Result<()> {
        let p = self.processes.get_mut(&pid).ok_or_else(|| gone(pid))?;
        p.attached = true;
        Ok(())
    }

    fn detach(&mut self, pid: u32) {
        if let Some(p) = self.processes.get_mut(&pid) {
            p.attached = false;
        }
    }

    fn smaps(&mut self, pid: u32) -> io::Result<Vec<Vma>> {
        let p = self.process(pid)?;
        Ok(p.vmas
            .iter()
            .map(|(&start, &(end, sd))| Vma {
                start,
                end,
                resident_bytes: p.pages.range(start..end).count() as u64 * 4096,
                referenced_bytes: p.pages.range(start..end).filter(|(_, pg)| pg.young).count()
                    as u64
                    * 4096,
                soft_dirty_flag: sd,
            })
            .collect())
    }

    fn pagemap(&mut self, pid: u32, first_page: u64, out: &mut [u64]) -> io::Result<()> {
        let p = self.process(pid)?;
        for (i, entry) in out.iter_mut().enumerate() {
            let address = (first_page + i as u64) * 4096;
            let vma_sd = p
                .vmas
                .range(..=address)
                .next_back()
                .is_some_and(|(_, &(end, sd))| address < end && sd);
            *entry = match p.pages.get(&address) {
                Some(pg) => {
                    PM_PRESENT
                        | pg.pfn
                        | if pg.soft_dirty || vma_sd {
                            PM_SOFT_DIRTY
                        } else {
                            0
                        }
                }
                None if vma_sd => PM_SOFT_DIRTY,
                None => 0,
            };
        }
        Ok(())
    }

    fn clear_refs(&mut self, pid: u32, what: ClearRefs) -> io::Result<()> {
        let soft_dirty = self.soft_dirty;
        let p = self.process(pid)?;
        match what {
            ClearRefs::Anonymous => p.pages.values_mut().for_each(|pg| pg.young = false),
            ClearRefs::SoftDirty if soft_dirty => {
                p.pages.values_mut().for_each(|pg| pg.soft_dirty = false);
                p.vmas.values_mut().for_each(|v| v.1 = false);
            }
            ClearRefs::SoftDirty => {}
        }
        self.writes.push(RefsWrite::ClearRefs { pid, what });
        Ok(())
    }

    fn read_idle(&mut self, first_word: u64, out: &mut [u64]) -> io::Result<()> {
        for (i, word) in out.iter_mut().enumerate() {
            let base = (first_word + i as u64) * 64;
            *word = (0..64)
                .filter(|bit| self.idle.contains(&(base + bit)))
                .fold(0, |w, bit| w | 1 << bit);
        }
        Ok(())
    }

    fn mark_idle(&mut self, first_word: u64, words: &[u64]) -> io::Result<()> {
        for (i, &word) in words.iter().enumerate() {
            let base = (first_word + i as u64) * 64;
            for bit in (0..64).filter(|b| word & 1 << b != 0) {
                self.idle.insert(base + bit);
            }
        }
        self.writes.push(RefsWrite::MarkIdle {
            first_word,
            words: words.to_vec(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/proc");
        std::fs::read_to_string(root.join(name)).unwrap()
    }

    /// On the real kernel: clearing this process's accessed bits makes its next pass over its
    /// pages slower, by a plausible amount (not negative, under 100 µs a page).
    #[test]
    fn clearing_reference_bits_has_a_measured_cost() {
        if !Path::new("/proc/self/clear_refs").exists() {
            eprintln!("no /proc/self/clear_refs (CONFIG_PROC_PAGE_MONITOR): nothing to measure");
            return;
        }
        let cost = reference_clear_cost(Path::new("/proc"), &[ClearRefs::Anonymous]).unwrap();
        assert!(
            cost < std::time::Duration::from_micros(100),
            "{cost:?} a page"
        );
        // A proc root without the file is an error that names it, not a made-up cost.
        let missing = reference_clear_cost(Path::new("/nonexistent"), &[ClearRefs::Anonymous]);
        assert!(missing.is_err());
    }

    /// A process that exited but was not reaped yet (a zombie, as every process is for a moment
    /// when the daemon follows it at an interval's end) has a `/proc/PID` but no memory: the
    /// error of following it must say "gone", so the daemon forgets it without a warning.
    #[test]
    fn following_a_zombie_is_gone_not_an_error() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let stat = format!("/proc/{pid}/stat");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // The state is the field after the command's closing parenthesis.
        let zombie = || {
            std::fs::read_to_string(&stat).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        };
        while !zombie() {
            assert!(
                std::time::Instant::now() < deadline,
                "pid {pid} never became a zombie"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut refs = ProcRefs::new(Path::new("/proc"), Path::new("/sys"));
        let result = refs.attach(pid);
        child.wait().unwrap();
        let e = result.expect_err("a zombie has no memory to follow");
        assert!(
            is_gone(&e),
            "{e} (kind {:?}) is not recognised as gone",
            e.kind()
        );
    }

    #[test]
    fn parses_smaps_referenced_bytes_and_the_soft_dirty_flag() {
        let vmas = parse_smaps(&fixture("smaps-6.12-debian"));
        assert!(vmas.len() > 10);
        assert!(vmas.windows(2).all(|w| w[0].end <= w[1].start));
        assert!(vmas.iter().all(|v| v.start < v.end));
        // A kernel with CONFIG_MEM_SOFT_DIRTY flags a fresh process's mappings `sd` (all but
        // the stack, set up before the flag is).
        let flagged = vmas.iter().filter(|v| v.soft_dirty_flag).count();
        assert_eq!(flagged, vmas.len() - 1, "{vmas:?}");
        assert!(vmas.iter().any(|v| v.referenced_bytes > 0));

        let vmas = parse_smaps(&fixture("smaps-6.18"));
        assert!(vmas.len() > 10);
        assert!(
            vmas.iter().all(|v| !v.soft_dirty_flag),
            "no sd without soft-dirty"
        );
    }

    #[test]
    fn parses_an_objtier_chunk_after_clear_refs() {
        // tests/host/hot_object.c preloaded, 0.5 s after `clear_refs 2`: of its eight 1 MiB
        // objects (at 0x7f5080000000, one chunk mapping) it rewrote only one meanwhile.
        let vmas = parse_smaps(&fixture("smaps-6.18-objtier"));
        let chunk = vmas
            .iter()
            .find(|v| v.start == 0x7f50_8000_0000)
            .expect("the chunk mapping");
        assert_eq!(chunk.end - chunk.start, 1 << 30);
        assert_eq!(chunk.referenced_bytes, 1 << 20, "{chunk:?}");
        assert_eq!(chunk.resident_bytes, 8196 << 10, "{chunk:?}");
    }

    #[test]
    fn odd_smaps_lines_are_skipped() {
        let vmas = parse_smaps(
            "Referenced: 4 kB\n\
             1000-3000 rw-p 00000000 00:00 0 \n\
             Referenced:            8 kB\n\
             NewField: whatever\n\
             VmFlags: rd wr sd\n\
             garbage\n\
             5000-6000 r--p 00000000 fe:00 12 /with space/file\n\
             Referenced: lots kB\n",
        );
        assert_eq!(
            vmas,
            vec![
                Vma {
                    start: 0x1000,
                    end: 0x3000,
                    resident_bytes: 0,
                    referenced_bytes: 8192,
                    soft_dirty_flag: true
                },
                Vma {
                    start: 0x5000,
                    end: 0x6000,
                    resident_bytes: 0,
                    referenced_bytes: 0,
                    soft_dirty_flag: false
                }
            ]
        );
    }

    #[test]
    fn support_and_precision_from_captured_trees() {
        let dir = tempfile::tempdir().unwrap();
        let (proc, sys) = (dir.path().join("proc"), dir.path().join("sys"));
        assert_eq!(Support::probe(&proc, &sys), Support::default());
        let why = Precision::choose(&Support::default(), 0).unwrap_err();
        assert!(why.contains("CONFIG_PROC_PAGE_MONITOR"), "{why}");

        std::fs::create_dir_all(proc.join("self")).unwrap();
        for f in ["clear_refs", "pagemap"] {
            std::fs::write(proc.join("self").join(f), "").unwrap();
        }
        std::fs::write(proc.join("self/smaps"), fixture("smaps-6.18")).unwrap();
        let support = Support::probe(&proc, &sys);
        assert_eq!(
            support,
            Support {
                page_monitor: true,
                soft_dirty: false,
                idle_bitmap: false
            }
        );
        let (precision, why) = Precision::choose(&support, 0).unwrap();
        assert_eq!(precision, Precision::Referenced { soft_dirty: false });
        assert!(why[0].contains("CONFIG_IDLE_PAGE_TRACKING"), "{why:?}");
        assert!(why[1].contains("CONFIG_MEM_SOFT_DIRTY"), "{why:?}");
        assert!(precision
            .describe()
            .contains("per mapping for reads and writes"));

        std::fs::write(proc.join("self/smaps"), fixture("smaps-6.12-debian")).unwrap();
        let support = Support::probe(&proc, &sys);
        assert!(support.soft_dirty);
        let (precision, _) = Precision::choose(&support, 1000).unwrap();
        assert_eq!(precision, Precision::Referenced { soft_dirty: true });
        assert!(precision
            .describe()
            .contains("per mapping for reads, per page for writes"));

        std::fs::create_dir_all(sys.join("kernel/mm/page_idle")).unwrap();
        std::fs::write(sys.join("kernel/mm/page_idle/bitmap"), "").unwrap();
        let support = Support::probe(&proc, &sys);
        assert_eq!(
            Precision::choose(&support, 0).unwrap().0,
            Precision::IdlePages
        );
        let (precision, why) = Precision::choose(&support, 1000).unwrap();
        assert_eq!(precision, Precision::Referenced { soft_dirty: true });
        assert!(why[0].contains("root"), "{why:?}");
    }

    /// The real files, on this very process: clear_refs, smaps and pagemap agree on a page we
    /// write (soft-dirty only where the kernel has it).
    #[test]
    fn real_proc_files_on_this_process() {
        let mut refs = ProcRefs::new(Path::new("/proc"), Path::new("/sys"));
        let pid = std::process::id();
        if refs.attach(pid).is_err() {
            return; // no CONFIG_PROC_PAGE_MONITOR
        }
        let support = Support::probe(Path::new("/proc"), Path::new("/sys"));
        let mut buffer = vec![0u8; 8 * 4096];
        let page = (buffer.as_ptr() as u64).next_multiple_of(4096);
        let index = (page - buffer.as_ptr() as u64) as usize;
        buffer[index] = 1;
        refs.clear_refs(pid, ClearRefs::SoftDirty).unwrap();
        refs.clear_refs(pid, ClearRefs::Anonymous).unwrap();
        let mut entry = [0u64];
        refs.pagemap(pid, page / 4096, &mut entry).unwrap();
        assert_ne!(entry[0] & PM_PRESENT, 0, "{:#x}", entry[0]);
        assert_eq!(entry[0] & PM_SOFT_DIRTY, 0, "{:#x}", entry[0]);
        // SAFETY: a volatile write to our own buffer, so it is not optimised away.
        unsafe { std::ptr::write_volatile(buffer.as_mut_ptr().add(index), 2) };
        refs.pagemap(pid, page / 4096, &mut entry).unwrap();
        assert_eq!(entry[0] & PM_SOFT_DIRTY != 0, support.soft_dirty);
        let vma = refs
            .smaps(pid)
            .unwrap()
            .into_iter()
            .find(|v| v.start <= page && page < v.end)
            .unwrap();
        assert!(vma.referenced_bytes >= 4096, "{vma:?}");
        refs.detach(pid);
        assert!(is_gone(&refs.smaps(pid).unwrap_err()));
    }

    #[test]
    fn the_fake_behaves_like_the_kernel() {
        let mut k = RecordingRefs::new(true);
        k.map(7, 0x10000, 0x20000);
        assert!(k.smaps(7).is_err(), "not attached");
        k.attach(7).unwrap();
        k.touch(7, 0x10000, 0x12000, true);
        k.touch(7, 0x12000, 0x13000, false);
        let mut e = [0u64; 4];
        k.pagemap(7, 0x10, &mut e).unwrap();
        // A fresh mapping reports every page soft-dirty, even absent ones.
        assert!(e.iter().all(|x| x & PM_SOFT_DIRTY != 0));
        assert_eq!(e[3] & PM_PRESENT, 0);
        k.clear_refs(7, ClearRefs::SoftDirty).unwrap();
        k.clear_refs(7, ClearRefs::Anonymous).unwrap();
        k.touch(7, 0x11000, 0x12000, true);
        k.pagemap(7, 0x10, &mut e).unwrap();
        let dirty: Vec<bool> = e.iter().map(|x| x & PM_SOFT_DIRTY != 0).collect();
        assert_eq!(dirty, [false, true, false, false]);
        assert_eq!(k.smaps(7).unwrap()[0].referenced_bytes, 4096);
        let pfn = k.pfn_of(7, 0x10000).unwrap();
        k.mark_idle(pfn / 64, &[1 << (pfn % 64)]).unwrap();
        let mut w = [0u64];
        k.read_idle(pfn / 64, &mut w).unwrap();
        assert_eq!(w[0], 1 << (pfn % 64));
        k.touch(7, 0x10000, 0x10001, false);
        k.read_idle(pfn / 64, &mut w).unwrap();
        assert_eq!(w[0], 0);
        assert_eq!(k.writes.len(), 3);
    }
}
