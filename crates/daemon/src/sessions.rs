//! Profile sessions: every process of one `objtier profile` run, recorded into one profile.
//!
//! `objtier profile` asks the daemon for a session (`{"cmd": "profile-start"}`) and gets a
//! token, which it hands the command through `OBJTIER_PROFILE`; the library sends it in its
//! hello, so forks, exec'd children and MPI ranks that keep the environment join the session
//! (a process of another user cannot: the token is checked against the session's uid). Each
//! joined process gets a [`Recorder`]; at each interval's end the session's timeline gains an
//! interval and every joined process closes its row; a process that detaches leaves its
//! recording with the session. When the command has exited, `objtier profile` asks for the
//! profile (`profile-finish`): the session answers "pending" while some of its processes are
//! still attached (a child that outlives the command, for a while), then merges its
//! processes' recordings into one [`Profile`] and forgets itself.
//!
//! A session nobody finishes (its `objtier profile` was killed) is dropped once it has had no
//! process for an hour, and there are at most [`MAX_SESSIONS`]: what a client can make the
//! daemon keep is bounded.

use crate::recorder::{Finished, Footprint, Recorder};
use objtier_profile::merge::{merge, MergeBy};
use objtier_profile::profile::{Interval, Measurement, ProcessInfo, TierInfo};
use objtier_profile::{Module, Profile, Program, Source};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most sessions open at once.
pub const MAX_SESSIONS: usize = 256;
/// A session with no process attached for this long, and not finished, is dropped.
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);

/// What a profiled process leaves its session when it detaches.
#[derive(Debug)]
pub struct ProcessRecording {
    pub pid: u32,
    pub exe: String,
    pub attached_ns: u64,
    pub detached_ns: u64,
    pub dropped_events: u64,
    pub finished: Finished,
    /// The modules its frames name, with their build-ids.
    pub modules: Vec<Module>,
}

/// One `objtier profile` run.
#[derive(Debug)]
pub struct Session {
    pub uid: u32,
    /// `objtier profile --observe-only`: its processes' pages are never moved.
    pub observe_only: bool,
    pub command: Vec<String>,
    footprint: Arc<Footprint>,
    /// The timeline's boundaries (`CLOCK_MONOTONIC` ns): the first process's attach, then
    /// each interval's end while a process was attached.
    boundaries: Vec<u64>,
    /// Daemon ids of the processes attached now.
    attached: BTreeSet<u64>,
    recordings: Vec<ProcessRecording>,
    /// The first process's executable: the profile's program.
    program: Option<String>,
    /// The command's executable, as the client resolved it: the program of a profile no
    /// process attached to.
    command_exe: Option<String>,
    /// The source's weight for the session's processes, and the part that fell on objects.
    sampled: f64,
    attributed: f64,
    last_active: Instant,
}

/// Every open session, by token.
#[derive(Debug, Default)]
pub struct Sessions {
    sessions: HashMap<u64, Session>,
}

/// What finishing a session gives.
#[derive(Debug)]
pub enum Finish {
    /// Its processes still attached, by pid.
    Pending(Vec<u32>),
    Done(Box<Profile>),
}

/// What the daemon knows of itself that a profile records.
pub struct ProfileContext<'a> {
    pub source: Source,
    pub source_description: String,
    pub interval_s: f64,
    pub tiers: Vec<TierInfo>,
    /// Daemon id → pid, of the session's processes still attached (for a forced finish).
    pub attached_pids: &'a dyn Fn(u64) -> Option<u32>,
}

impl Sessions {
    /// Opens a session for a client of `uid` running `command` (whose executable the client
    /// resolved as `exe`: the profile's program should no process of it attach); None when too
    /// many are open.
    pub fn start(
        &mut self,
        uid: u32,
        command: Vec<String>,
        exe: Option<String>,
        observe_only: bool,
    ) -> Option<u64> {
        self.sessions
            .retain(|_, s| !(s.attached.is_empty() && s.last_active.elapsed() > ABANDONED_AFTER));
        if self.sessions.len() >= MAX_SESSIONS {
            return None;
        }
        let token = loop {
            let token = random_token();
            if token != 0 && !self.sessions.contains_key(&token) {
                break token;
            }
        };
        self.sessions.insert(
            token,
            Session {
                uid,
                observe_only,
                command,
                footprint: Arc::new(Footprint::default()),
                boundaries: Vec::new(),
                attached: BTreeSet::new(),
                recordings: Vec::new(),
                program: None,
                command_exe: exe,
                sampled: 0.0,
                attributed: 0.0,
                last_active: Instant::now(),
            },
        );
        Some(token)
    }

    /// Process `id` (of `uid`, running `exe`) attached with `token`: its recorder, and whether
    /// the session observes only. None for an unknown token or another user's session.
    pub fn join(
        &mut self,
        token: u64,
        uid: u32,
        id: u64,
        exe: &str,
        now_ns: u64,
        interval_ns: u64,
    ) -> Option<(Recorder, bool)> {
        let s = self.sessions.get_mut(&token)?;
        if s.uid != uid && s.uid != 0 {
            return None;
        }
        if s.boundaries.is_empty() {
            s.boundaries.push(now_ns);
        }
        s.attached.insert(id);
        s.program.get_or_insert_with(|| exe.to_string());
        s.last_active = Instant::now();
        Some((
            Recorder::new(interval_ns, s.footprint.clone()),
            s.observe_only,
        ))
    }

    /// An interval ended at `now_ns`: each session with a process attached gains an interval.
    /// Returns (token, the interval's index) for each, for its processes to close their rows.
    pub fn interval_ended(&mut self, now_ns: u64) -> Vec<(u64, usize)> {
        let mut ended = Vec::new();
        for (&token, s) in &mut self.sessions {
            if !s.attached.is_empty() {
                s.boundaries.push(now_ns);
                ended.push((token, s.boundaries.len() - 2));
            }
        }
        ended
    }

    /// The interval under way in `token`'s timeline, if any: what a process that detaches now
    /// closes its last row as.
    pub fn current_interval(&self, token: u64) -> Option<usize> {
        self.sessions
            .get(&token)
            .and_then(|s| s.boundaries.len().checked_sub(1))
    }

    /// `token`'s timeline so far, in seconds since its start, the interval under way ending now.
    pub fn timeline(&self, token: u64, now_ns: u64) -> Vec<Interval> {
        let Some(s) = self.sessions.get(&token) else {
            return Vec::new();
        };
        let start = s.boundaries.first().copied().unwrap_or(now_ns);
        let seconds = |ns: u64| ns.saturating_sub(start) as f64 / 1e9;
        let mut out: Vec<Interval> = s
            .boundaries
            .windows(2)
            .map(|w| Interval {
                start_s: seconds(w[0]),
                end_s: seconds(w[1]),
            })
            .collect();
        if let Some(&last) = s.boundaries.last() {
            out.push(Interval {
                start_s: seconds(last),
                end_s: seconds(now_ns.max(last)),
            });
        }
        out
    }

    /// Counts the source's weight for a process of `token`, and what of it was attributed.
    pub fn account(&mut self, token: u64, sampled: f64, attributed: f64) {
        if let Some(s) = self.sessions.get_mut(&token) {
            s.sampled += sampled;
            s.attributed += attributed;
        }
    }

    /// Process `id` of `token` detached and left `recording`.
    pub fn detached(&mut self, token: u64, id: u64, recording: ProcessRecording) {
        if let Some(s) = self.sessions.get_mut(&token) {
            s.attached.remove(&id);
            s.recordings.push(recording);
            s.last_active = Instant::now();
        }
    }

    /// Whether any session is open (a daemon that exits when idle waits for them).
    pub fn any_open(&self) -> bool {
        !self.sessions.is_empty()
    }

    /// Finishes `token` for a client of `uid`: pending while its processes are attached
    /// (unless `force`: they are left out, and the profile says which), else the profile. The
    /// error says what is wrong (no such session, another user's).
    pub fn finish(
        &mut self,
        token: u64,
        uid: u32,
        force: bool,
        now_ns: u64,
        context: &ProfileContext<'_>,
    ) -> Result<Finish, String> {
        let Some(s) = self.sessions.get(&token) else {
            return Err(
                "no such profile session: the daemon may have restarted since it began \
                        (its recording is lost); profile again"
                    .into(),
            );
        };
        if s.uid != uid && uid != 0 {
            return Err("that profile session belongs to another user".into());
        }
        if !s.attached.is_empty() && !force {
            let pids = s
                .attached
                .iter()
                .filter_map(|&id| (context.attached_pids)(id))
                .collect();
            return Ok(Finish::Pending(pids));
        }
        let s = self.sessions.remove(&token).expect("looked up above");
        Ok(Finish::Done(Box::new(s.into_profile(now_ns, context))))
    }
}

impl Session {
    fn into_profile(self, now_ns: u64, context: &ProfileContext<'_>) -> Profile {
        let start = self.boundaries.first().copied().unwrap_or(now_ns);
        let seconds = |ns: u64| ns.saturating_sub(start) as f64 / 1e9;
        let mut intervals: Vec<Interval> = self
            .boundaries
            .windows(2)
            .map(|w| Interval {
                start_s: seconds(w[0]),
                end_s: seconds(w[1]),
            })
            .collect();
        // The interval under way when the last process left.
        let last_end = self
            .recordings
            .iter()
            .map(|r| r.detached_ns)
            .max()
            .unwrap_or(now_ns);
        if let Some(&last) = self.boundaries.last() {
            if last_end > last || intervals.is_empty() {
                intervals.push(Interval {
                    start_s: seconds(last),
                    end_s: seconds(last_end.max(last)),
                });
            }
        }
        let exe = self
            .program
            .clone()
            .or(self.command_exe.clone())
            .unwrap_or_default();
        let mut modules: BTreeMap<String, Option<String>> = BTreeMap::new();
        for r in &self.recordings {
            for m in &r.modules {
                modules
                    .entry(m.path.clone())
                    .or_insert_with(|| m.build_id.clone());
            }
        }
        let program = Program::of_exe(&exe, modules.get(&exe).cloned().flatten());
        let kinds = self.recordings.iter().any(|r| r.finished.saw_kinds)
            && !self.recordings.iter().any(|r| r.finished.saw_unknown_kind);
        // Each process as a profile of its own, merged by sum: sites by frames, series by
        // interval, lifetimes by bucket.
        let parts: Vec<(PathBuf, Profile)> = self
            .recordings
            .into_iter()
            .map(|r| {
                let mut p = Profile::new(context.source, program.clone());
                p.intervals = intervals.clone();
                p.sites = r.finished.sites;
                p.peak_footprint_bytes = r.finished.peak_live_bytes;
                p.measurement.page_moves = r.finished.page_moves;
                p.processes.push(ProcessInfo {
                    pid: r.pid,
                    exe: r.exe,
                    attached_s: seconds(r.attached_ns),
                    detached_s: seconds(r.detached_ns),
                    peak_live_bytes: r.finished.peak_live_bytes,
                    dropped_events: r.dropped_events,
                });
                (PathBuf::from(format!("pid {}", r.pid)), p)
            })
            .collect();
        let mut profile = match merge(&parts, MergeBy::Sum) {
            Ok((merged, _)) => merged,
            // No process ever attached: an empty profile says so.
            Err(_) => Profile::new(context.source, program.clone()),
        };
        profile.program = program;
        profile.command = self.command;
        profile.created_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        profile.objtier_version = env!("CARGO_PKG_VERSION").to_string();
        profile.intervals = intervals;
        profile.duration_s = seconds(last_end);
        profile.peak_footprint_bytes = self.footprint.peak_bytes();
        profile.tiers = context.tiers.clone();
        profile.modules = modules
            .into_iter()
            .map(|(path, build_id)| Module { path, build_id })
            .collect();
        profile.merged_runs = 1;
        profile.merged_by = None;
        profile.measurement = Measurement {
            description: context.source_description.clone(),
            access_unit: access_unit(context.source).to_string(),
            loads_and_stores: kinds,
            weight_unit: profile
                .sites
                .iter()
                .any(|s| s.weight.is_some())
                .then(|| "latency cycles".to_string()),
            sampled: self.sampled,
            attributed: self.attributed,
            attributed_share: (self.sampled > 0.0).then(|| self.attributed / self.sampled),
            interval_s: context.interval_s,
            page_moves: profile.measurement.page_moves.take(),
        };
        // Largest first: what a reader looks for.
        profile.sites.sort_by(|a, b| {
            b.accesses
                .total_cmp(&a.accesses)
                .then(b.peak_live_bytes.cmp(&a.peak_live_bytes))
        });
        profile
    }
}

/// What one unit of a source's accesses is.
pub fn access_unit(source: Source) -> &'static str {
    match source {
        Source::Perf => "samples (one every --sample-period events)",
        Source::Damon => {
            "page accesses sampled by DAMON (nr_accesses per aggregation, times pages)"
        }
        Source::Proc => "pages found referenced per scan",
        Source::Emulate => "accesses that missed the modeled last-level cache",
        Source::None => "none (no access source)",
    }
}

/// A session token: 64 random bits from the kernel, so that a token cannot be guessed.
fn random_token() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most the buffer's length into it.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr() as *mut libc::c_void, 8, 0) };
    if n != 8 {
        // No getrandom (a very old kernel): the clock and the pid, which only the user could
        // guess; tokens are checked against the session's uid anyway.
        return crate::clock::monotonic_ns() ^ (std::process::id() as u64) << 40;
    }
    u64::from_ne_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::SiteKey;
    use crate::source::AccessKind;

    fn context() -> ProfileContext<'static> {
        ProfileContext {
            source: Source::Damon,
            source_description: "damon".into(),
            interval_s: 2.0,
            tiers: vec![],
            attached_pids: &|id| Some(id as u32 + 100),
        }
    }

    fn recording(
        pid: u32,
        recorder: Recorder,
        attached_ns: u64,
        detached_ns: u64,
    ) -> ProcessRecording {
        ProcessRecording {
            pid,
            exe: "/usr/bin/app".into(),
            attached_ns,
            detached_ns,
            dropped_events: 0,
            finished: recorder.finish(
                |id| Some(vec![format!("/usr/bin/app+{id:#x}")]),
                std::iter::empty(),
                None,
            ),
            modules: vec![Module {
                path: "/usr/bin/app".into(),
                build_id: Some("ab".into()),
            }],
        }
    }

    #[test]
    fn two_processes_make_one_profile_on_one_timeline() {
        let mut sessions = Sessions::default();
        let token = sessions
            .start(1000, vec!["app".into()], None, false)
            .unwrap();
        assert!(
            sessions
                .join(token, 2000, 1, "/usr/bin/app", 0, 1)
                .is_none(),
            "another user"
        );
        let (mut a, observe_only) = sessions
            .join(token, 1000, 1, "/usr/bin/app", 1_000_000_000, 1)
            .unwrap();
        assert!(!observe_only);
        let (mut b, _) = sessions
            .join(token, 1000, 2, "/usr/bin/app", 1_500_000_000, 1)
            .unwrap();
        a.allocated(SiteKey::Site(0x10), 4096);
        b.allocated(SiteKey::Site(0x10), 8192);
        b.allocated(SiteKey::Site(0x20), 4096);
        a.accessed(SiteKey::Site(0x10), AccessKind::Any, 3.0, None);
        for (t, index) in sessions.interval_ended(3_000_000_000) {
            assert_eq!((t, index), (token, 0));
            a.end_interval(index, &Default::default());
            b.end_interval(index, &Default::default());
        }
        assert!(matches!(
            sessions.finish(token, 1000, false, 0, &context()).unwrap(),
            Finish::Pending(p) if p == vec![101, 102]
        ));
        sessions.detached(token, 1, recording(11, a, 1_000_000_000, 3_500_000_000));
        sessions.detached(token, 2, recording(12, b, 1_500_000_000, 4_000_000_000));
        assert!(
            sessions.finish(token, 2000, false, 0, &context()).is_err(),
            "another user"
        );
        let Finish::Done(profile) = sessions
            .finish(token, 1000, false, 5_000_000_000, &context())
            .unwrap()
        else {
            panic!("both processes detached");
        };
        assert_eq!(profile.program.name, "app");
        assert_eq!(profile.program.build_id.as_deref(), Some("ab"));
        assert_eq!(profile.processes.len(), 2);
        assert_eq!(profile.peak_footprint_bytes, 16384);
        assert_eq!(
            profile.intervals.len(),
            2,
            "one ended, one under way at the last detach"
        );
        assert_eq!(profile.duration_s, 3.0);
        let site = &profile.sites[0];
        assert_eq!(site.frames, vec!["/usr/bin/app+0x10".to_string()]);
        assert_eq!((site.allocations, site.accesses), (2, 3.0));
        assert_eq!(site.series.interval, vec![0]);
        Profile::from_json(std::path::Path::new("p"), &profile.to_json()).unwrap();
        assert!(!sessions.any_open());
        assert!(
            sessions.finish(token, 1000, false, 0, &context()).is_err(),
            "gone"
        );
    }

    #[test]
    fn sessions_are_bounded() {
        let mut sessions = Sessions::default();
        for _ in 0..MAX_SESSIONS {
            assert!(sessions.start(1, vec![], None, false).is_some());
        }
        assert!(sessions.start(1, vec![], None, false).is_none());
    }
}
