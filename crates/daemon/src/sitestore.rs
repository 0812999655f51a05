//! Warm start: what one run of a program learnt about its allocation sites (their placements,
//! and which are short-lived), saved, and applied from the start of its next run (paper §3.5:
//! site knowledge "saved at exit and loaded at the next run").
//!
//! **Program identity.** A program is its executable, as `/proc/PID/exe` names it when the
//! process attaches, together with the uid it runs as (a root daemon serves every user, and one
//! user's runs never steer another's). Arguments are not part of it: runs of one binary with
//! other arguments execute the same code, a site cold in one run is likely cold in the next, and
//! the live proactive policy corrects what is not. The exception is an interpreter, whose scripts
//! all share its one file. The executable's size and modification time are recorded too: a file
//! saved for another build of the program is not used (its offsets name other code) and is
//! replaced at the next save.
//!
//! **Keys.** A site is stored as its call path, each frame `module+0xoffset`
//! (`objtier_sys::maps`), which ASLR does not change; raw return addresses and site ids (hashes
//! of them) differ from run to run. Call paths with a frame no file maps (`?+0x...`, JIT code)
//! are not stored.
//!
//! **Files.** One JSON file per program in the store directory, named after the executable's
//! file name and a hash of its path and uid:
//!
//! ```json
//! {"format": "objtier-sites", "version": 2,
//!  "program": {"exe": "/usr/bin/app", "uid": 1000, "exe_size": 81234, "exe_mtime_ns": 1735...},
//!  "saved_unix_seconds": 1735...,
//!  "sites": [{"frames": ["/usr/bin/app+0x1234", "/usr/lib/x86_64-linux-gnu/libc.so.6+0x2724a"],
//!             "tier": 1, "learnt": "proactive"},
//!            {"frames": ["/usr/bin/app+0x1300"], "short_lived": true}]}
//! ```
//!
//! `learnt` says who placed the site in the run that saved it (`proactive` or `hand`, for
//! `objtier place`); at the next run both are warm-start placements, which the proactive policy
//! may override like its own. `short_lived` marks a site whose objects all died young
//! (`objtier_policy::lifetimes`): the next run reports one in `SHORT_LIVED_SAMPLE` of them from
//! its first, and unmarks the site as soon as a sample lives long. A site is placed or
//! short-lived, or both in a file two runs wrote; placement wins when the file is applied.
//! Version 1 files (placements only) are read as they are; the daemon writes version 2. Files are written to a temporary file and renamed over the old
//! one, so a reader, or a daemon killed mid-write, finds the old file or the new one. A file that
//! cannot be read, is not JSON, is of another format version, or describes another program is
//! reported (its path and what is wrong) and ignored; the daemon carries on without it and
//! replaces it at its next save.
//!
//! **When.** Loaded when a process attaches. Saved when it detaches, when the daemon stops, and
//! at the end of each interval in which a placement it records changed (so a killed daemon loses
//! at most one interval's). A save merges with the file as it is then: call paths this run saw
//! get this run's placement (or lose it if the site is not placed now), and this run's verdict on
//! whether they are short-lived if it has one (enough objects seen; see
//! `objtier_policy::lifetimes::run_verdict`); the others keep theirs, so concurrent runs of one
//! program and code paths a run did not take both survive.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The `format` field of every store file.
pub const FORMAT: &str = "objtier-sites";
/// The store file version this daemon writes.
pub const VERSION: u32 = 2;
/// The oldest version it reads (version 1 had placements only).
const OLDEST_VERSION: u32 = 1;
/// Most sites kept per program (the placement table in shared memory has 4,096 slots, which the
/// live policy needs too).
pub const MAX_SITES_PER_PROGRAM: usize = 1024;
/// Longest call path kept (the library sends at most 64 frames).
const MAX_FRAMES: usize = 64;
/// Largest store file read: far beyond what `MAX_SITES_PER_PROGRAM` sites take.
const MAX_FILE_BYTES: u64 = 8 << 20;

/// Who placed a stored site in the run that saved it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Learnt {
    /// `objtier place`.
    Hand,
    /// The proactive policy.
    Proactive,
}

/// One remembered site.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSite {
    /// The call path, innermost first, as `module+0xoffset`.
    pub frames: Vec<String>,
    /// The tier new objects of the site started in (with `learnt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learnt: Option<Learnt>,
    /// Its objects all died young.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub short_lived: bool,
}

impl StoredSite {
    /// The remembered placement: tier and who learnt it.
    pub fn placed(&self) -> Option<(u32, Learnt)> {
        self.tier.zip(self.learnt)
    }
}

/// What identifies a program across runs (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    /// The executable's path.
    pub exe: String,
    pub uid: u32,
    /// Size and modification time of the executable: another build is another profile.
    pub exe_size: u64,
    pub exe_mtime_ns: i64,
}

impl Program {
    /// The program process `pid` (running as `uid`) runs, from `<proc_root>/PID/exe`.
    pub fn of_process(proc_root: &Path, pid: u32, uid: u32) -> std::io::Result<Program> {
        use std::os::unix::fs::MetadataExt;
        let link = proc_root.join(pid.to_string()).join("exe");
        let target = std::fs::read_link(&link)?;
        let exe = target.to_str().ok_or_else(|| {
            std::io::Error::other(format!("the executable's path {target:?} is not UTF-8"))
        })?;
        // The link names the file even after it was deleted or replaced (a new build installed
        // while this one runs); metadata through the link is the running file's, so the
        // fingerprint below still tells the builds apart.
        let exe = exe.strip_suffix(" (deleted)").unwrap_or(exe).to_string();
        let meta = std::fs::metadata(&link)?;
        Ok(Program {
            exe,
            uid,
            exe_size: meta.len(),
            exe_mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        })
    }

    fn same_build(&self, other: &Program) -> bool {
        self.exe_size == other.exe_size && self.exe_mtime_ns == other.exe_mtime_ns
    }
}

/// A store file as written.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct StoreFile {
    format: String,
    version: u32,
    program: Program,
    saved_unix_seconds: u64,
    sites: Vec<StoredSite>,
}

/// A call path seen in a run, and what the run knows of its site.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    pub frames: Vec<String>,
    /// Its placement now (None: not placed).
    pub placed: Option<(u32, Learnt)>,
    /// Whether it is short-lived, if the run could tell (None: keep what the file says).
    pub short_lived: Option<bool>,
}

/// The directory of store files.
#[derive(Debug)]
pub struct SiteStore {
    dir: PathBuf,
    /// A save failed already (later failures are logged at debug level only).
    failed: std::sync::atomic::AtomicBool,
}

impl SiteStore {
    /// The store in `dir`, which is created (mode 0700) by the first save: a daemon that
    /// learns nothing leaves no trace.
    pub fn new(dir: PathBuf) -> SiteStore {
        SiteStore {
            dir,
            failed: Default::default(),
        }
    }

    /// The store in `dir`, created now: for a directory the user asked for, so that a wrong one
    /// is an error at start-up rather than a warning at the first save.
    pub fn create(dir: PathBuf) -> std::io::Result<SiteStore> {
        let store = SiteStore::new(dir);
        store.create_dir()?;
        Ok(store)
    }

    /// Creates the directory (mode 0700) if it is missing, and checks that it is the daemon's
    /// own: a directory another user owns or may write into could hold their files, or links
    /// that a root daemon would write through.
    fn create_dir(&self) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let meta = std::fs::symlink_metadata(&self.dir)?;
        // SAFETY: geteuid has no failure mode.
        let euid = unsafe { libc::geteuid() };
        if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o022 != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not a directory of this daemon's own (owner uid {}, mode {:o}; it \
                     must be a directory owned by uid {euid} that no one else may write into): \
                     fix it with `chown {euid} DIR && chmod 700 DIR`, or give another \
                     --site-store",
                    self.dir.display(),
                    meta.uid(),
                    meta.mode() & 0o7777
                ),
            ));
        }
        Ok(())
    }

    /// Logs a failed save: a warning the first time, then quietly (a read-only or full disk
    /// would otherwise repeat it at every change).
    pub fn report_failure(&self, file: &Path, error: &std::io::Error) {
        if self.failed.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::debug!(
                "cannot save the site store file {}: {error}",
                file.display()
            );
        } else {
            tracing::warn!(
                "cannot save the site store file {}: {error}; warm start will not remember this \
                 run (further failures are logged at debug level)",
                file.display()
            );
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of a program: its executable's name (for people listing the directory) and a
    /// hash of its path and uid (which make it unique).
    pub fn file_of(&self, program: &Program) -> PathBuf {
        let name: String = Path::new(&program.exe)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        let mut key = program.uid.to_le_bytes().to_vec();
        key.extend_from_slice(program.exe.as_bytes());
        self.dir.join(format!("{name}-{:016x}.json", fnv1a(&key)))
    }

    /// The sites remembered for `program`. A file that is missing gives none; one that is bad,
    /// or for another build, gives none and says why in the log.
    pub fn load(&self, program: &Program) -> Vec<StoredSite> {
        let path = self.file_of(program);
        match read(&path) {
            Ok(None) => Vec::new(),
            Ok(Some(file))
                if file.program.exe != program.exe || file.program.uid != program.uid =>
            {
                tracing::warn!(
                    "ignoring the site store file {}: it is for {} (uid {}), not {} (uid {})",
                    path.display(),
                    file.program.exe,
                    file.program.uid,
                    program.exe,
                    program.uid
                );
                Vec::new()
            }
            Ok(Some(file)) if !file.program.same_build(program) => {
                tracing::info!(
                    "not using the site store file {}: it was saved for another build of {} \
                     (size or modification time differ); it is replaced at the next save",
                    path.display(),
                    program.exe
                );
                Vec::new()
            }
            Ok(Some(file)) => file.sites,
            Err(what) => {
                tracing::warn!(
                    "ignoring the site store file {}: {what}; warm start goes without it, and it \
                     is replaced at the next save",
                    path.display()
                );
                Vec::new()
            }
        }
    }

    /// Merges what a run saw (see the module doc) into `program`'s file. Returns whether the
    /// file was written (not when nothing in it would change).
    pub fn save(&self, program: &Program, seen: &[Seen]) -> std::io::Result<bool> {
        let path = self.file_of(program);
        let old = match read(&path) {
            Ok(Some(file)) if file.program == *program => Some(file.sites),
            _ => None,
        };
        let sites = merge(old.clone().unwrap_or_default(), seen);
        if old.as_ref() == Some(&sites) || (old.is_none() && sites.is_empty()) {
            return Ok(false);
        }
        let file = StoreFile {
            format: FORMAT.to_string(),
            version: VERSION,
            program: program.clone(),
            saved_unix_seconds: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            sites,
        };
        let mut text = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
        text.push(b'\n');
        self.create_dir()?;
        write_atomically(&path, &text)?;
        Ok(true)
    }
}

/// Reads and checks a store file: Ok(None) if there is none, Err(what is wrong) if it is bad.
fn read(path: &Path) -> Result<Option<StoreFile>, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read it: {e}")),
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "it is {} bytes, more than a store file can be ({MAX_FILE_BYTES})",
            meta.len()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    parse(&text).map(Some)
}

/// A store file's text, checked.
pub(crate) fn parse(text: &str) -> Result<StoreFile, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("it is not JSON ({e})"))?;
    // Format and version first: a file of another version may be laid out otherwise entirely.
    match value.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT) => {}
        other => {
            return Err(format!(
                "it is not an objtier site store file (\"format\" is {}, not \"{FORMAT}\")",
                other.map_or("missing".to_string(), |f| format!("{f:?}"))
            ))
        }
    }
    match value.get("version").and_then(|v| v.as_u64()) {
        Some(v) if (OLDEST_VERSION as u64..=VERSION as u64).contains(&v) => {}
        Some(v) => {
            return Err(format!(
                "it is of format version {v}; this objtier reads versions {OLDEST_VERSION} to \
                 {VERSION}"
            ))
        }
        None => return Err("it has no \"version\" number".to_string()),
    }
    let file: StoreFile =
        serde_json::from_value(value).map_err(|e| format!("it is malformed: {e}"))?;
    for (i, site) in file.sites.iter().enumerate() {
        if site.frames.is_empty() || site.frames.len() > MAX_FRAMES {
            return Err(format!(
                "site {i} has {} frames (1 to {MAX_FRAMES} expected)",
                site.frames.len()
            ));
        }
        match (site.tier, site.learnt) {
            (Some(tier), Some(_)) if tier as usize >= objtier_wire::MAX_TIERS => {
                return Err(format!("site {i} has tier {tier}"))
            }
            (Some(_), Some(_)) => {}
            (None, None) if site.short_lived => {}
            (None, None) => return Err(format!("site {i} has neither a tier nor \"short_lived\"")),
            _ => {
                return Err(format!(
                    "site {i} has one of \"tier\" and \"learnt\" without the other"
                ))
            }
        }
    }
    if file.sites.len() > MAX_SITES_PER_PROGRAM {
        return Err(format!(
            "it has {} sites, more than {MAX_SITES_PER_PROGRAM}",
            file.sites.len()
        ));
    }
    Ok(file)
}

/// The stored sites after a run that saw `seen`: the call paths it saw have its placement (or
/// none) and, where it has a verdict, its word on being short-lived; the others keep what they
/// had. Sorted by call path; at most `MAX_SITES_PER_PROGRAM`, this run's first.
pub fn merge(old: Vec<StoredSite>, seen: &[Seen]) -> Vec<StoredSite> {
    // One entry per call path; should two sites of this run share a path, a placement wins,
    // and so does a site seen living long over one seen short-lived.
    type Now = (Option<(u32, Learnt)>, Option<bool>);
    let mut now: BTreeMap<&Vec<String>, Now> = BTreeMap::new();
    for site in seen {
        let entry = now
            .entry(&site.frames)
            .or_insert((site.placed, site.short_lived));
        entry.0 = entry.0.or(site.placed);
        entry.1 = match (entry.1, site.short_lived) {
            (Some(a), Some(b)) => Some(a && b),
            (a, b) => a.or(b),
        };
    }
    let old_short_lived: std::collections::HashSet<&Vec<String>> = old
        .iter()
        .filter(|s| s.short_lived)
        .map(|s| &s.frames)
        .collect();
    let mut sites: Vec<StoredSite> = now
        .iter()
        .filter_map(|(frames, (placed, short_lived))| {
            let short_lived = short_lived.unwrap_or_else(|| old_short_lived.contains(*frames));
            (placed.is_some() || short_lived).then(|| StoredSite {
                frames: (*frames).clone(),
                tier: placed.map(|(tier, _)| tier),
                learnt: placed.map(|(_, learnt)| learnt),
                short_lived,
            })
        })
        .collect();
    sites.extend(old.into_iter().filter(|s| !now.contains_key(&s.frames)));
    sites.truncate(MAX_SITES_PER_PROGRAM);
    sites.sort_by(|a, b| a.frames.cmp(&b.frames));
    sites.dedup_by(|a, b| a.frames == b.frames);
    sites
}

/// Writes `path` through a temporary file in the same directory, synced, and a rename, then
/// syncs the directory: a daemon killed at any point leaves the old file or the new one, and
/// after a crash of the machine the rename is not lost.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
    // A temporary a killed daemon of the same pid left.
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        // A new file, never one found there (nor a link's target).
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// 64-bit FNV-1a: a hash that stays the same across Rust versions (file names depend on it).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program() -> Program {
        Program {
            exe: "/usr/bin/app".into(),
            uid: 1000,
            exe_size: 4096,
            exe_mtime_ns: 1_700_000_000_000_000_000,
        }
    }

    fn path(frames: &[&str]) -> Vec<String> {
        frames.iter().map(|f| f.to_string()).collect()
    }

    fn stored(frames: Vec<String>, tier: u32, learnt: Learnt) -> StoredSite {
        StoredSite {
            frames,
            tier: Some(tier),
            learnt: Some(learnt),
            short_lived: false,
        }
    }

    fn seen_site(
        frames: Vec<String>,
        placed: Option<(u32, Learnt)>,
        short_lived: Option<bool>,
    ) -> Seen {
        Seen {
            frames,
            placed,
            short_lived,
        }
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = SiteStore::new(dir.path().join("a/sites"));
        let p = program();
        assert!(store.load(&p).is_empty(), "no file yet");
        assert!(
            !store.save(&p, &[]).unwrap(),
            "nothing to remember: no file"
        );
        assert!(!dir.path().join("a").exists(), "nor a directory");
        let cold = path(&["/usr/bin/app+0x1234", "/usr/lib/libc.so.6+0x2724a"]);
        let hot = path(&["/usr/bin/app+0x1300", "/usr/lib/libc.so.6+0x2724a"]);
        let placed = path(&["/usr/bin/app+0x1400"]);
        let seen = vec![
            seen_site(cold.clone(), Some((1, Learnt::Proactive)), None),
            seen_site(hot, None, None),
            seen_site(placed.clone(), Some((0, Learnt::Hand)), None),
        ];
        assert!(store.save(&p, &seen).unwrap());
        let file = store.file_of(&p);
        assert!(file.starts_with(dir.path().join("a/sites")));
        assert!(file
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("app-"));
        let mut loaded = store.load(&p);
        loaded.sort_by(|a, b| a.frames.cmp(&b.frames));
        assert_eq!(
            loaded,
            vec![
                stored(cold, 1, Learnt::Proactive),
                stored(placed, 0, Learnt::Hand),
            ]
        );
        assert!(
            !store.save(&p, &seen).unwrap(),
            "nothing changed: not rewritten"
        );
        // Another uid's run of the same executable has a file of its own.
        let other = Program {
            uid: 0,
            ..p.clone()
        };
        assert_ne!(store.file_of(&other), file);
        assert!(store.load(&other).is_empty());
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path().join("a/sites"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        // A store that cannot be written says so (the caller warns and carries on).
        let blocked = SiteStore::new(file.join("sites"));
        assert!(blocked.save(&p, &seen).is_err());
        assert!(SiteStore::create(file.join("sites")).is_err());
    }

    #[test]
    fn a_save_merges_with_what_the_file_remembers() {
        let a = path(&["/usr/bin/app+0x10"]);
        let b = path(&["/usr/bin/app+0x20"]);
        let c = path(&["/usr/bin/app+0x30"]);
        let old = vec![
            stored(a.clone(), 1, Learnt::Proactive),
            stored(b.clone(), 1, Learnt::Proactive),
        ];
        // This run saw a (now wanted fast: no placement) and c (placed); it never saw b.
        let merged = merge(
            old,
            &[
                seen_site(a, None, None),
                seen_site(c.clone(), Some((2, Learnt::Hand)), None),
            ],
        );
        assert_eq!(
            merged,
            vec![stored(b, 1, Learnt::Proactive), stored(c, 2, Learnt::Hand),]
        );
    }

    #[test]
    fn short_lived_verdicts_merge_with_what_the_file_remembers() {
        let [a, b, c, d, e] =
            [0x10, 0x20, 0x30, 0x40, 0x50].map(|o| path(&[&format!("/usr/bin/app+{o:#x}")]));
        let short = |frames: &Vec<String>| StoredSite {
            frames: frames.clone(),
            short_lived: true,
            ..Default::default()
        };
        let old = vec![
            short(&a),
            short(&b),
            short(&c),
            stored(d.clone(), 1, Learnt::Proactive),
        ];
        let merged = merge(
            old,
            &[
                // a: no verdict this run (too few objects): still short-lived.
                seen_site(a.clone(), None, None),
                // b: one of its objects lived long.
                seen_site(b.clone(), None, Some(false)),
                // d: was placed, is no longer, and is short-lived now.
                seen_site(d.clone(), None, Some(true)),
                // e: new, short-lived and placed by hand (placement wins when applied).
                seen_site(e.clone(), Some((0, Learnt::Hand)), Some(true)),
            ],
        );
        assert_eq!(
            merged,
            vec![
                short(&a),
                short(&c),
                short(&d),
                StoredSite {
                    short_lived: true,
                    ..stored(e, 0, Learnt::Hand)
                },
            ]
        );
        // Two sites of one run with one call path: one seen living long is enough.
        let merged = merge(
            vec![short(&a)],
            &[
                seen_site(a.clone(), None, Some(true)),
                seen_site(a, None, Some(false)),
            ],
        );
        assert!(merged.is_empty(), "{merged:?}");
    }

    #[test]
    fn bad_files_are_ignored_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let store = SiteStore::create(dir.path().to_owned()).unwrap();
        let p = program();
        let file = store.file_of(&p);
        let good = format!(
            r#"{{"format": "objtier-sites", "version": 1, "program": {},
                "saved_unix_seconds": 1, "sites": [{{"frames": ["/usr/bin/app+0x10"], "tier": 1, "learnt": "proactive"}}]}}"#,
            serde_json::to_string(&p).unwrap()
        );
        std::fs::write(&file, &good).unwrap();
        assert_eq!(store.load(&p).len(), 1, "the well-formed file is read");
        // Version 2 adds short-lived sites.
        let v2 = good.replace("\"version\": 1", "\"version\": 2").replace(
            "\"proactive\"}]}",
            "\"proactive\"}, {\"frames\": [\"/usr/bin/app+0x20\"], \"short_lived\": true}]}",
        );
        std::fs::write(&file, &v2).unwrap();
        let loaded = store.load(&p);
        assert_eq!(loaded.len(), 2, "{v2}");
        assert_eq!(loaded[0].placed(), Some((1, Learnt::Proactive)));
        assert!(loaded[1].short_lived && loaded[1].placed().is_none());
        let bad = [
            (
                "{\"format\": \"objtier-sites\", \"vers".to_string(),
                "not JSON",
            ),
            ("[1, 2]".to_string(), "not an objtier site store file"),
            (
                good.replace("\"version\": 1", "\"version\": 3"),
                "format version 3",
            ),
            (
                good.replace(", \"learnt\": \"proactive\"", ""),
                "one of \"tier\" and \"learnt\"",
            ),
            (
                good.replace(
                    "\"tier\": 1, \"learnt\": \"proactive\"",
                    "\"short_lived\": false",
                ),
                "neither a tier nor",
            ),
            (
                good.replace("\"version\": 1", "\"version\": \"1\""),
                "no \"version\"",
            ),
            (good.replace("\"tier\": 1", "\"tier\": -1"), "malformed"),
            (good.replace("\"tier\": 1", "\"tier\": 99"), "tier 99"),
            (good.replace("[\"/usr/bin/app+0x10\"]", "[]"), "0 frames"),
            (good.replace("proactive", "magic"), "malformed"),
        ];
        for (text, why) in bad {
            std::fs::write(&file, &text).unwrap();
            let err = read(&file).err().unwrap_or_default();
            assert!(err.contains(why), "{text}: {err}");
            assert!(store.load(&p).is_empty(), "{text}");
        }
        // A bad file is replaced by the next save.
        let seen = vec![seen_site(
            path(&["/usr/bin/app+0x20"]),
            Some((1, Learnt::Proactive)),
            None,
        )];
        assert!(store.save(&p, &seen).unwrap());
        assert_eq!(store.load(&p).len(), 1);
    }

    #[test]
    fn another_build_of_the_program_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let store = SiteStore::create(dir.path().to_owned()).unwrap();
        let p = program();
        let seen = vec![seen_site(
            path(&["/usr/bin/app+0x20"]),
            Some((1, Learnt::Proactive)),
            None,
        )];
        store.save(&p, &seen).unwrap();
        let rebuilt = Program {
            exe_mtime_ns: p.exe_mtime_ns + 1,
            ..p.clone()
        };
        assert_eq!(store.file_of(&rebuilt), store.file_of(&p));
        assert!(store.load(&rebuilt).is_empty());
        // Its first save replaces the old build's sites instead of merging with them.
        let seen = vec![seen_site(
            path(&["/usr/bin/app+0x90"]),
            Some((1, Learnt::Proactive)),
            None,
        )];
        assert!(store.save(&rebuilt, &seen).unwrap());
        let loaded = store.load(&rebuilt);
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].frames, seen[0].frames);
    }

    #[test]
    fn the_program_of_this_process() {
        let pid = std::process::id();
        let p = Program::of_process(Path::new("/proc"), pid, 5).unwrap();
        assert_eq!(
            Path::new(&p.exe),
            std::env::current_exe().unwrap().as_path()
        );
        assert_eq!(p.uid, 5);
        assert!(p.exe_size > 0);
    }
}
