//! The daemon's side of `objtier profile`: the control requests that open and finish a profile
//! session, and the points where a profiled process joins its session, closes an interval's
//! row and leaves its recording (see [`crate::sessions`] for the design).

use crate::clock::monotonic_ns;
use crate::daemon::Daemon;
use crate::process::Process;
use crate::recorder::SiteKey;
use crate::sessions::{Finish, ProcessRecording, ProfileContext};
use objtier_profile::profile::TierInfo;
use objtier_profile::{file_name, parse_frame, Module, Source};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;

impl Daemon {
    /// `{"cmd":"profile-start","command":[...],"observe_only":B}`: opens a session for the
    /// client's user; answers `{"token":N}`.
    pub(crate) fn profile_start(
        &mut self,
        request: &Value,
        peer_uid: Option<u32>,
    ) -> Result<Value, String> {
        let uid = peer_uid.ok_or("cannot tell who asked (SO_PEERCRED failed)")?;
        if self.euid != 0 && uid != self.euid {
            return Err(format!(
                "this daemon runs as uid {} and serves only that user; use a daemon of your own \
                 (objtier profile starts one on your socket)",
                self.euid
            ));
        }
        let command = request
            .get("command")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .take(256)
                    .filter_map(Value::as_str)
                    .map(|s| s.chars().take(4096).collect())
                    .collect()
            })
            .unwrap_or_default();
        let observe_only = request
            .get("observe_only")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let exe = request
            .get("exe")
            .and_then(Value::as_str)
            .map(|e| e.chars().take(4096).collect());
        let token = self
            .sessions
            .start(uid, command, exe, observe_only)
            .ok_or("too many profile sessions are open; finish some first")?;
        tracing::info!(uid, observe_only, "profile session opened");
        Ok(json!({
            "token": token,
            "source": self.source.name(),
            "interval_ms": self.config.interval.as_millis() as u64,
        }))
    }

    /// `{"cmd":"profile-finish","token":N,"force":B}`: `{"pending":[pids]}` while processes of
    /// the session are attached (unless `force`), else `{"profile":{...}}`.
    pub(crate) fn profile_finish(
        &mut self,
        request: &Value,
        peer_uid: Option<u32>,
    ) -> Result<Value, String> {
        let uid = peer_uid.ok_or("cannot tell who asked (SO_PEERCRED failed)")?;
        let token = request
            .get("token")
            .and_then(Value::as_u64)
            .ok_or("profile-finish needs a \"token\"")?;
        let force = request
            .get("force")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if force {
            // Whatever is still attached leaves its recording as it stands.
            let ids: Vec<u64> = self
                .processes
                .iter()
                .filter(|(_, p)| p.profile_token == token && p.recorder.is_some())
                .map(|(&id, _)| id)
                .collect();
            for id in ids {
                if let Some(mut p) = self.processes.remove(&id) {
                    p.drain();
                    self.leave_profile(&mut p);
                    self.processes.insert(id, p);
                }
            }
        }
        let source = self.profile_source();
        let description = self.source.describe();
        let tiers = self.profile_tiers();
        let processes = &self.processes;
        let context = ProfileContext {
            source,
            source_description: description,
            interval_s: self.config.interval.as_secs_f64(),
            tiers,
            attached_pids: &|id| processes.get(&id).map(|p| p.pid),
        };
        match self
            .sessions
            .finish(token, uid, force, monotonic_ns(), &context)?
        {
            Finish::Pending(pids) => Ok(json!({ "pending": pids })),
            Finish::Done(profile) => {
                tracing::info!(
                    sites = profile.sites.len(),
                    processes = profile.processes.len(),
                    "profile session finished"
                );
                Ok(json!({ "profile": *profile }))
            }
        }
    }

    /// `{"cmd":"profile-snapshot","pid":P}`: what the daemon has seen of an attached process so
    /// far, as a profile (`objtier report --pid`): its recording as it stands when it is
    /// profiled, else its live objects by site, their accesses (the records' access estimates)
    /// and where their pages are. Only root or the process's owner may ask.
    pub(crate) fn profile_snapshot(
        &mut self,
        request: &Value,
        peer_uid: Option<u32>,
    ) -> Result<Value, String> {
        let pid = request
            .get("pid")
            .and_then(Value::as_u64)
            .ok_or("profile-snapshot needs a \"pid\"")?;
        let tiers = self.topology.tiers.len();
        let context_tiers = self.profile_tiers();
        let source = self.profile_source();
        let description = self.source.describe();
        let interval_s = self.config.interval.as_secs_f64();
        let proc_root = self.config.proc_root.clone();
        let p = self
            .processes
            .values_mut()
            .filter(|p| p.pid as u64 == pid)
            .max_by_key(|p| p.id)
            .ok_or_else(|| {
                format!("pid {pid} is not attached to this daemon (see `objtier status`)")
            })?;
        if peer_uid.is_none_or(|uid| uid != 0 && uid != p.uid) {
            return Err(format!("pid {pid} is another user's process"));
        }
        let now = monotonic_ns();
        let exe = std::fs::read_link(proc_root.join(p.pid.to_string()).join("exe"))
            .map(|e| e.display().to_string())
            .unwrap_or_default();
        let mut profile =
            objtier_profile::Profile::new(source, objtier_profile::Program::of_exe(&exe, None));
        if p.has_unnamed_sites() {
            if let Some(maps) = p.last_maps.take() {
                p.name_sites(&maps);
                p.last_maps = Some(maps);
            }
        }
        profile.intervals = if p.recorder.is_some() {
            self.sessions.timeline(p.profile_token, now)
        } else {
            vec![objtier_profile::profile::Interval {
                start_s: 0.0,
                end_s: now.saturating_sub(p.attached_ns) as f64 / 1e9,
            }]
        };
        let frames_of = |id: u64| {
            p.sites
                .get(&id)
                .and_then(|f| f.names.clone())
                .filter(|names| !names.iter().any(|n| n.starts_with("?+")))
        };
        let mut page_moves = None;
        match &p.recorder {
            Some(recorder) => {
                let live: Vec<(SiteKey, u64)> = p
                    .objects
                    .objects()
                    .iter()
                    .filter(|(start, _)| !p.objects.blocks().contains_key(start))
                    .map(|(_, o)| (SiteKey::of_object(o.site), now.saturating_sub(o.created_ns)))
                    .collect();
                let finished = recorder.clone().finish(frames_of, live.into_iter(), None);
                profile.sites = finished.sites;
                profile.peak_footprint_bytes = finished.peak_live_bytes;
                page_moves = finished.page_moves;
            }
            None => {
                profile.sites = snapshot_sites(p, tiers, &frames_of);
                profile.peak_footprint_bytes =
                    profile.sites.iter().map(|s| s.peak_live_bytes).sum();
            }
        }
        profile.command = vec![exe.clone()];
        profile.duration_s = now.saturating_sub(p.attached_ns) as f64 / 1e9;
        profile.tiers = context_tiers;
        profile.objtier_version = env!("CARGO_PKG_VERSION").to_string();
        profile.measurement = objtier_profile::profile::Measurement {
            description: if p.recorder.is_some() {
                description
            } else {
                format!("{description}; a live process not profiled: its live objects now, and its records' access estimates (an EMA per interval)")
            },
            access_unit: crate::sessions::access_unit(source).to_string(),
            weight_unit: profile
                .sites
                .iter()
                .any(|s| s.weight.is_some())
                .then(|| "latency cycles".to_string()),
            interval_s,
            page_moves,
            ..Default::default()
        };
        profile
            .sites
            .sort_by(|a, b| b.accesses.total_cmp(&a.accesses));
        Ok(json!({ "profile": profile, "profiled": p.recorder.is_some() }))
    }

    fn profile_source(&self) -> Source {
        match self.source.name() {
            "perf" => Source::Perf,
            "damon" => Source::Damon,
            "proc" => Source::Proc,
            _ => Source::None,
        }
    }

    /// The machine's tiers, with the read and write latencies the kernel reports for each
    /// tier's first node (HMAT), where it does.
    fn profile_tiers(&self) -> Vec<TierInfo> {
        self.topology
            .tiers
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let latency = |what: &str| {
                    t.nodes.first().and_then(|node| {
                        std::fs::read_to_string(self.config.sys_root.join(format!(
                            "devices/system/node/node{node}/access0/initiators/{what}_latency"
                        )))
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                    })
                };
                TierInfo {
                    nodes: t.nodes.clone(),
                    capacity_bytes: self.topology.tier_bytes(i).0,
                    read_latency_ns: latency("read"),
                    write_latency_ns: latency("write"),
                }
            })
            .collect()
    }

    /// Process `id` attached with a profile token: it joins its session, or is told why not.
    pub(crate) fn join_profile(&mut self, id: u64) {
        let interval_ns = self.config.interval.as_nanos() as u64;
        let proc_root = self.config.proc_root.clone();
        let Some(p) = self.processes.get_mut(&id) else {
            return;
        };
        let exe = std::fs::read_link(proc_root.join(p.pid.to_string()).join("exe"))
            .map(|e| e.display().to_string())
            .unwrap_or_default();
        match self.sessions.join(
            p.profile_token,
            p.uid,
            id,
            &exe,
            monotonic_ns(),
            interval_ns,
        ) {
            Some((recorder, observe_only)) => {
                p.recorder = Some(recorder);
                p.no_migrate |= observe_only;
                // Every object's lifetime is the profile's: no sampling of short-lived sites,
                // and the library reports every free instead of taking allocations back.
                p.lifetimes.set_young_ns(None);
                p.ring
                    .control()
                    .flags
                    .fetch_or(objtier_wire::control_flags::PROFILING, Ordering::Relaxed);
                if p.last_maps.is_none() {
                    p.last_maps = objtier_sys::maps::Maps::read(&proc_root, p.pid).ok();
                }
                tracing::info!(pid = p.pid, exe, "process joined its profile session");
            }
            None => {
                tracing::warn!(
                    pid = p.pid,
                    "process brought a profile token of no session of its user (the daemon \
                     restarted, or the token is another's): it is tiered but not profiled"
                );
                p.profile_token = 0;
            }
        }
    }

    /// A profiled process leaves its recording with its session (it detached, or its
    /// session was finished by force).
    pub(crate) fn leave_profile(&mut self, p: &mut Process) {
        let proc_root = self.config.proc_root.clone();
        let Some(recorder) = p.recorder.take() else {
            return;
        };
        // Sites the library described since the last interval, named with the map read last.
        if p.has_unnamed_sites() {
            if let Some(maps) = p.last_maps.take() {
                p.name_sites(&maps);
                p.last_maps = Some(maps);
            }
        }
        let now = monotonic_ns();
        let live: Vec<(SiteKey, u64)> = p
            .objects
            .objects()
            .iter()
            .filter(|(start, _)| !p.objects.blocks().contains_key(start))
            .map(|(_, o)| o)
            .chain(p.objects.pending().values())
            .map(|o| (SiteKey::of_object(o.site), now.saturating_sub(o.created_ns)))
            .collect();
        let sites = &p.sites;
        let last = self.sessions.current_interval(p.profile_token);
        let finished = recorder.finish(
            |id| {
                sites
                    .get(&id)
                    .and_then(|f| f.names.clone())
                    .filter(|names| !names.iter().any(|n| n.starts_with("?+")))
            },
            live.into_iter(),
            last,
        );
        let modules = modules_of(&proc_root, &finished, p.pid);
        let exe = std::fs::read_link(proc_root.join(p.pid.to_string()).join("exe"))
            .map(|e| e.display().to_string())
            .ok()
            .or_else(|| p.warm.as_ref().map(|w| w.program.exe.clone()))
            .unwrap_or_default();
        self.sessions.detached(
            p.profile_token,
            p.id,
            ProcessRecording {
                pid: p.pid,
                exe,
                attached_ns: p.attached_ns,
                detached_ns: now,
                dropped_events: p.ring.header().dropped.load(Ordering::Relaxed),
                finished,
                modules,
            },
        );
    }

    /// An interval ended: each session's timeline gains it, and its processes close their rows.
    pub(crate) fn profile_interval_ended(&mut self) {
        let ended = self.sessions.interval_ended(monotonic_ns());
        if ended.is_empty() {
            return;
        }
        let index: BTreeMap<u64, usize> = ended.into_iter().collect();
        let tiers = self.topology.tiers.len();
        for p in self.processes.values_mut() {
            if let Some(&i) = index.get(&p.profile_token) {
                let small = p.objects.small_object_resident_bytes(tiers);
                let where_ = resident_by_site(p, tiers);
                if let Some(r) = p.recorder.as_mut() {
                    r.small_objects_resident(small);
                    r.end_interval(i, &where_);
                }
            }
        }
    }
}

/// A process not profiled, as profile sites: its live objects per site now (and the small-object
/// blocks' resident bytes), their records' access estimates, and one row of where their pages
/// are.
fn snapshot_sites(
    p: &Process,
    tiers: usize,
    frames_of: &dyn Fn(u64) -> Option<Vec<String>>,
) -> Vec<objtier_profile::Site> {
    use objtier_profile::{Site, SiteKind};
    let where_ = resident_by_site(p, tiers);
    let mut by_site: std::collections::HashMap<SiteKey, (u64, u64, f64)> = Default::default();
    for (start, o) in p.objects.objects().iter() {
        if p.objects.blocks().contains_key(start) {
            continue;
        }
        let e = by_site.entry(SiteKey::of_object(o.site)).or_default();
        e.0 += 1;
        e.1 += o.len;
    }
    by_site.entry(SiteKey::SmallObjects).or_default().1 =
        p.objects.small_object_resident_bytes(tiers);
    for (start, r) in p.records().iter() {
        let in_block = r.site == 0
            && p.objects
                .blocks()
                .range(..=start)
                .next_back()
                .is_some_and(|(&s, &l)| start < s + l);
        let key = if in_block {
            SiteKey::SmallObjects
        } else {
            SiteKey::of_object(r.site)
        };
        by_site.entry(key).or_default().2 += r.ema_accesses as f64;
    }
    by_site
        .into_iter()
        .filter(|(_, (objects, bytes, _))| *objects > 0 || *bytes > 0)
        .map(|(key, (objects, bytes, accesses))| {
            let (kind, frames) = match key {
                SiteKey::Site(id) => match frames_of(id) {
                    Some(frames) => (SiteKind::Site, frames),
                    None => (SiteKind::Unknown, Vec::new()),
                },
                SiteKey::SmallObjects => (SiteKind::SmallObjects, Vec::new()),
                SiteKey::Unknown => (SiteKind::Unknown, Vec::new()),
            };
            let mut site = Site {
                kind,
                frames,
                allocations: objects,
                bytes_allocated: bytes,
                peak_live_bytes: bytes,
                accesses,
                ..Site::default()
            };
            site.series.push(0, bytes, accesses, None, None, 0);
            if let Some(t) = where_.get(&key) {
                site.series.set_last_tier_bytes(t.clone());
            }
            site
        })
        .collect()
}

/// Where each site's records' pages are, bytes per tier, as last located (records never
/// located, or moved since, left out).
fn resident_by_site(p: &Process, tiers: usize) -> std::collections::HashMap<SiteKey, Vec<u64>> {
    let mut out: std::collections::HashMap<SiteKey, Vec<u64>> = Default::default();
    for (start, record) in p.records().iter() {
        if !record.resident.known() {
            continue;
        }
        let in_block = record.site == 0
            && p.objects
                .blocks()
                .range(..=start)
                .next_back()
                .is_some_and(|(&s, &l)| start < s + l);
        let key = if in_block {
            SiteKey::SmallObjects
        } else {
            SiteKey::of_object(record.site)
        };
        let sums = out.entry(key).or_insert_with(|| vec![0; tiers]);
        for (sum, b) in sums.iter_mut().zip(record.resident.bytes(tiers)) {
            *sum += b;
        }
    }
    out
}

/// The modules a recording's frames name, each with its build-id (read from the file, through
/// the process's root while it still has one).
fn modules_of(proc_root: &Path, finished: &crate::recorder::Finished, pid: u32) -> Vec<Module> {
    let mut paths: Vec<&str> = finished
        .sites
        .iter()
        .flat_map(|s| s.frames.iter())
        .filter_map(|f| parse_frame(f).map(|(m, _)| m))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    paths
        .into_iter()
        .map(|path| {
            let through_root = format!("{}/{pid}/root{path}", proc_root.display());
            let build_id = objtier_sys::elf::build_id(Path::new(&through_root))
                .or_else(|_| objtier_sys::elf::build_id(Path::new(path)))
                .ok()
                .flatten();
            if build_id.is_none() {
                tracing::debug!(module = file_name(path), "no build-id");
            }
            Module {
                path: path.to_string(),
                build_id,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::process::tests::{process, push, push_site};
    use objtier_wire::{control_flags, EventKind};
    use serde_json::json;

    /// A profile session through the daemon: a process joins with its token (and the library
    /// is told to report every free), its objects and site are recorded over an interval, it
    /// detaches, and the finish gives the profile, pending until then.
    #[test]
    fn a_session_records_a_process_from_attach_to_detach() {
        let sys = tempfile::tempdir().unwrap();
        let mut config = crate::config::DaemonConfig::new(sys.path().join("sock"));
        config.sys_root = sys.path().to_owned();
        let mut d = crate::daemon::Daemon::on_fake_kernel(
            config,
            objtier_sys::topology::Topology::two_tiers(64 << 20, 64 << 20, 1 << 30),
        );
        let started = d
            .profile_start(
                &json!({"cmd": "profile-start", "command": ["app", "in"]}),
                Some(0),
            )
            .unwrap();
        let token = started["token"].as_u64().unwrap();
        let (mut p, _peer) = process();
        p.profile_token = token;
        d.processes.insert(p.id, p);
        d.join_profile(1);
        let p = d.processes.get_mut(&1).unwrap();
        assert!(p.recorder.is_some() && p.lifetimes.young_ns().is_none());
        assert!(p.ring.control().has_flag(control_flags::PROFILING));
        // Two objects of site 9 (push's), its frames, then one freed.
        push(p, EventKind::Alloc, 0x10_0000, 0x4000, 0);
        push(p, EventKind::Alloc, 0x20_0000, 0x2000, 0);
        push_site(p, 9, &[0x5555_0000_1234]);
        p.drain();
        d.interval();
        let pending = d.profile_finish(&json!({"token": token}), Some(0)).unwrap();
        assert_eq!(
            pending["pending"],
            json!([1]),
            "its process is still attached"
        );
        let p = d.processes.get_mut(&1).unwrap();
        push(p, EventKind::Free, 0x20_0000, 0, 0);
        p.last_maps = Some(objtier_sys::maps::Maps::parse(
            "555500000000-555500010000 r-xp 00000000 fe:00 7 /usr/bin/app\n",
        ));
        d.detach(1);
        let done = d
            .profile_finish(&json!({"token": token}), Some(1000))
            .unwrap_err();
        assert!(done.contains("another user"), "{done}");
        let done = d.profile_finish(&json!({"token": token}), Some(0)).unwrap();
        let profile: objtier_profile::Profile =
            serde_json::from_value(done["profile"].clone()).unwrap();
        assert_eq!(profile.command, ["app", "in"]);
        let site = profile
            .sites
            .iter()
            .find(|s| s.frames == ["/usr/bin/app+0x1234"])
            .expect("the site, named by its frame");
        assert_eq!(
            (site.allocations, site.bytes_allocated, site.peak_live_bytes),
            (2, 0x6000, 0x6000)
        );
        assert_eq!((site.lifetime.freed, site.lifetime.live_at_exit), (1, 1));
        assert!(!profile.intervals.is_empty());
        assert_eq!(profile.peak_footprint_bytes, 0x6000);
        assert!(!d.sessions.any_open(), "finished: forgotten");
    }

    /// A process that is not profiled still has a snapshot: its live objects by site.
    #[test]
    fn a_live_process_is_snapshotted_by_site() {
        let sys = tempfile::tempdir().unwrap();
        let mut config = crate::config::DaemonConfig::new(sys.path().join("sock"));
        config.sys_root = sys.path().to_owned();
        let mut d = crate::daemon::Daemon::on_fake_kernel(
            config,
            objtier_sys::topology::Topology::two_tiers(64 << 20, 64 << 20, 1 << 30),
        );
        let (p, _peer) = process();
        d.processes.insert(p.id, p);
        let p = d.processes.get_mut(&1).unwrap();
        push(
            p,
            EventKind::Alloc,
            0x10_0000,
            0x4000,
            objtier_wire::event_flags::SNAPSHOT,
        );
        push_site(p, 9, &[0x5555_0000_1234]);
        p.drain();
        p.last_maps = Some(objtier_sys::maps::Maps::parse(
            "555500000000-555500010000 r-xp 00000000 fe:00 7 /usr/bin/app\n",
        ));
        assert!(d
            .profile_snapshot(&json!({"pid": 1}), Some(1000))
            .unwrap_err()
            .contains("another user"));
        assert!(d
            .profile_snapshot(&json!({"pid": 77}), Some(0))
            .unwrap_err()
            .contains("not attached"));
        let reply = d.profile_snapshot(&json!({"pid": 1}), Some(0)).unwrap();
        assert_eq!(reply["profiled"], false);
        let profile: objtier_profile::Profile =
            serde_json::from_value(reply["profile"].clone()).unwrap();
        profile.check(std::path::Path::new("snapshot")).unwrap();
        let site = profile
            .sites
            .iter()
            .find(|s| s.frames == ["/usr/bin/app+0x1234"])
            .unwrap();
        assert_eq!((site.allocations, site.peak_live_bytes), (1, 0x4000));
    }
}
