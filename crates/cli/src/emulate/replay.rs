//! The plugin's traces, one per emulated process, turned into a profile: each process's
//! records replayed, in the order of the emulated clock across processes, into the daemon's
//! own profile recorder and session (`objtier_daemon::recorder`, `sessions`), so an emulated
//! profile counts allocations, lifetimes, footprints and series exactly as a sampled one does;
//! only its accesses are every miss of the modeled cache, and its time the emulated clock.

use anyhow::Context as _;
use objtier_daemon::recorder::{Recorder, SiteKey};
use objtier_daemon::sessions::{Finish, ProcessRecording, ProfileContext, Sessions};
use objtier_daemon::source::AccessKind;
use objtier_emulate::trace::{self, Key, Record};
use objtier_profile::pages::SitePages;
use objtier_profile::{Module, Profile, SiteKind, Source};
use objtier_sys::maps::Maps;
use objtier_wire::EventKind;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::path::Path;

/// One process's trace, read.
struct Trace {
    pid: u32,
    records: Vec<Record>,
    /// Each record's time: its own, or the last one before it.
    times: Vec<u64>,
    maps: Option<Maps>,
}

/// What the replay learnt besides the profile.
pub struct Replayed {
    pub profile: Profile,
    /// Processes whose trace was cut short without an exec (killed under the emulation).
    pub cut_short: Vec<u32>,
    /// Processes that exec'd: their new program ran natively.
    pub execed: Vec<u32>,
}

/// What the profile says of its source.
pub struct Context {
    pub command: Vec<String>,
    /// The program's executable (a script's interpreter).
    pub exe: String,
    pub interval_ns: u64,
    pub description: String,
}

fn read_traces(dir: &Path) -> anyhow::Result<Vec<Trace>> {
    let mut traces = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix("trace.").and_then(|p| p.parse().ok()) else {
            continue;
        };
        let file = std::fs::File::open(entry.path())?;
        let records = trace::read(std::io::BufReader::new(file))
            .with_context(|| format!("cannot read the emulation's trace {name}"))?;
        let mut now = 0;
        let times = records
            .iter()
            .map(|r| {
                now = match *r {
                    Record::Start { time, .. }
                    | Record::Attached { time, .. }
                    | Record::IntervalEnd { time, .. }
                    | Record::Exec { time }
                    | Record::Exit { time } => time,
                    Record::Event(e) => e.time_ns.max(now),
                    _ => now,
                };
                now
            })
            .collect();
        let maps = std::fs::read_to_string(dir.join(format!("maps.{pid}")))
            .ok()
            .map(|text| Maps::parse(&text));
        traces.push(Trace {
            pid,
            records,
            times,
            maps,
        });
    }
    traces.sort_by_key(|t| t.pid);
    Ok(traces)
}

/// A live process of the replay.
struct Live {
    recorder: Recorder,
    /// Tracked objects and blocks: start → (key, bytes, born).
    objects: HashMap<u64, (SiteKey, u64, u64)>,
    /// Site id → its frames' return addresses, in order.
    frames: HashMap<u64, Vec<(u32, u64)>>,
    guest_base: u64,
    started: u64,
    pages: BTreeMap<Key, SitePages>,
}

fn site_key(key: Key) -> SiteKey {
    match key {
        Key::Site(id) => SiteKey::Site(id),
        Key::SmallObjects => SiteKey::SmallObjects,
        Key::Unknown => SiteKey::Unknown,
    }
}

/// Replays every trace in `dir` into one profile.
pub fn replay(dir: &Path, context: &Context) -> anyhow::Result<Replayed> {
    let traces = read_traces(dir)?;
    let mut sessions = Sessions::default();
    let token = sessions
        .start(0, context.command.clone(), Some(context.exe.clone()), true)
        .context("no profile session")?;
    let interval = context.interval_ns.max(1);
    let mut next_boundary = interval;
    // The k-way merge by time, each trace in its own order.
    let mut heads: BinaryHeap<std::cmp::Reverse<(u64, usize, usize)>> = traces
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.records.is_empty())
        .map(|(i, t)| std::cmp::Reverse((t.times[0], i, 0)))
        .collect();
    let mut live: HashMap<usize, Live> = HashMap::new();
    let (mut sampled, mut attributed) = (0.0, 0.0);
    let mut all_pages: Vec<Vec<SitePages>> = Vec::new();
    let (mut cut_short, mut execed) = (Vec::new(), Vec::new());
    let mut end = 0;
    while let Some(std::cmp::Reverse((time, t, i))) = heads.pop() {
        let tr = &traces[t];
        end = end.max(time);
        while time >= next_boundary && !live.is_empty() {
            sessions.interval_ended(next_boundary);
            next_boundary += interval;
        }
        let record = tr.records[i];
        if let Record::Start { pid, .. } = record {
            let (recorder, _) = sessions
                .join(token, 0, pid as u64, &context.exe, time, interval)
                .context("the session refused a process")?;
            live.insert(
                t,
                Live {
                    recorder,
                    objects: HashMap::new(),
                    frames: HashMap::new(),
                    guest_base: 0,
                    started: time,
                    pages: BTreeMap::new(),
                },
            );
        }
        let Some(p) = live.get_mut(&t) else {
            // Records before a Start: not a trace this objtier wrote.
            anyhow::bail!(
                "the emulation's trace of pid {} does not begin with its start",
                tr.pid
            );
        };
        match record {
            Record::Start { .. } => {}
            Record::Attached { guest_base, .. } => p.guest_base = guest_base,
            Record::Event(e) => replay_event(p, e),
            Record::Misses { key, loads, stores } => {
                let key = site_key(key);
                p.recorder
                    .accessed(key, AccessKind::Load, loads as f64, None);
                p.recorder
                    .accessed(key, AccessKind::Store, stores as f64, None);
                sampled += (loads + stores) as f64;
                attributed += (loads + stores) as f64;
            }
            Record::Unattributed { loads, stores } => sampled += (loads + stores) as f64,
            Record::SmallObjectBytes { bytes } => p.recorder.small_objects_resident(bytes),
            Record::IntervalEnd { index, .. } => {
                p.recorder.end_interval(index as usize, &HashMap::new())
            }
            Record::Pages {
                key,
                once,
                twice,
                more,
            } => {
                let pages = p.pages.entry(key).or_default();
                pages.touched_once += once;
                pages.touched_twice += twice;
                pages.touched_more += more;
            }
            Record::Reuse { key, gap } => p
                .pages
                .entry(key)
                .or_default()
                .reuse_s
                .push(gap as f64 / 1e9),
            Record::Exec { .. } | Record::Exit { .. } => {}
        }
        if i + 1 < tr.records.len() {
            heads.push(std::cmp::Reverse((tr.times[i + 1].max(time), t, i + 1)));
            continue;
        }
        // The trace's last record: the process is done.
        let p = live.remove(&t).expect("live above");
        match record {
            Record::Exit { .. } => {}
            Record::Exec { .. } => execed.push(tr.pid),
            _ => cut_short.push(tr.pid),
        }
        let (recording, pages) = finish(tr, p, time, interval, &context.exe);
        all_pages.push(pages);
        sessions.detached(token, tr.pid as u64, recording);
    }
    sessions.account(token, sampled, attributed);
    let profile_context = ProfileContext {
        source: Source::Emulate,
        source_description: context.description.clone(),
        interval_s: interval as f64 / 1e9,
        tiers: Vec::new(),
        attached_pids: &|_| None,
    };
    let Finish::Done(profile) = sessions
        .finish(token, 0, true, end, &profile_context)
        .map_err(|e| anyhow::anyhow!(e))?
    else {
        anyhow::bail!("the emulated profile's session is still pending");
    };
    let mut profile = *profile;
    profile.pages = objtier_profile::pages::merge(all_pages.iter().map(Vec::as_slice));
    Ok(Replayed {
        profile,
        cut_short,
        execed,
    })
}

fn replay_event(p: &mut Live, e: objtier_wire::Event) {
    let t = e.time_ns;
    match EventKind::from_raw(e.kind) {
        Some(EventKind::Alloc) => {
            let key = SiteKey::of_object(e.site);
            if let Some((old, len, born)) = p.objects.insert(e.addr, (key, e.len, t)) {
                p.recorder.freed(old, len, born, t);
            }
            p.recorder.allocated(key, e.len);
        }
        Some(EventKind::Free) => {
            if let Some((key, len, born)) = p.objects.remove(&e.addr) {
                p.recorder.freed(key, len, born, t);
            }
        }
        Some(EventKind::Moved) => {
            let (key, old_len, born) =
                p.objects
                    .remove(&e.site)
                    .unwrap_or((SiteKey::Unknown, 0, t));
            p.recorder.resized(key, old_len, e.len);
            p.objects.insert(e.addr, (key, e.len, born));
        }
        Some(EventKind::BlockMap) => {
            p.recorder.block_mapped();
        }
        Some(EventKind::SiteFrame) => {
            let index = (e.len >> 32) as u32;
            p.frames.entry(e.site).or_default().push((index, e.addr));
        }
        _ => {}
    }
}

/// A process's end: its recording, named with its memory map, and its page detail.
fn finish(
    tr: &Trace,
    p: Live,
    end: u64,
    interval: u64,
    exe: &str,
) -> (ProcessRecording, Vec<SitePages>) {
    let maps = tr.maps.clone().unwrap_or_default();
    let base = p.guest_base;
    let names: HashMap<u64, Vec<String>> = p
        .frames
        .iter()
        .filter_map(|(&site, frames)| {
            let mut frames = frames.clone();
            frames.sort_unstable();
            frames.dedup_by_key(|f| f.0);
            let names: Option<Vec<String>> = frames
                .iter()
                .map(|&(_, ip)| maps.describe(ip.wrapping_add(base)))
                .collect();
            Some((site, names?))
        })
        .collect();
    let live: Vec<(SiteKey, u64)> = p
        .objects
        .values()
        .filter(|(key, _, _)| *key != SiteKey::SmallObjects)
        .map(|&(key, _, born)| (key, end.saturating_sub(born)))
        .collect();
    let finished = p.recorder.finish(
        |id| names.get(&id).cloned(),
        live.into_iter(),
        Some((end / interval) as usize),
    );
    let mut paths: Vec<&str> = finished
        .sites
        .iter()
        .flat_map(|s| s.frames.iter())
        .filter_map(|f| objtier_profile::parse_frame(f).map(|(m, _)| m))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let modules = paths
        .into_iter()
        .map(|path| Module {
            path: path.to_string(),
            build_id: objtier_sys::elf::build_id(Path::new(path)).ok().flatten(),
        })
        .collect();
    let pages = p
        .pages
        .into_iter()
        .filter_map(|(key, mut pages)| {
            let (kind, frames) = match key {
                Key::Site(id) => (SiteKind::Site, names.get(&id)?.clone()),
                Key::SmallObjects => (SiteKind::SmallObjects, Vec::new()),
                Key::Unknown => (SiteKind::Unknown, Vec::new()),
            };
            pages.kind = kind;
            pages.frames = frames;
            Some(pages)
        })
        .collect();
    (
        ProcessRecording {
            pid: tr.pid,
            exe: exe.to_string(),
            attached_ns: p.started,
            detached_ns: end,
            dropped_events: 0,
            finished,
            modules,
        },
        pages,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use objtier_emulate::trace::{Sink, Writer};
    use objtier_wire::Event;

    fn event(kind: EventKind, addr: u64, len: u64, site: u64, time_ns: u64) -> Record {
        Record::Event(Event {
            kind: kind as u32,
            flags: 0,
            addr,
            len,
            time_ns,
            site,
        })
    }

    /// A parent and its forked child, replayed: each object's misses on its site, lifetimes
    /// in emulated time, frames named through the saved map and the guest base, intervals
    /// of the emulated clock, page detail by frames.
    #[test]
    fn traces_become_one_profile() {
        let dir = tempfile::tempdir().unwrap();
        let write = |pid: u32, records: &[Record]| {
            let mut w = Writer::new(Vec::new());
            for &r in records {
                w.record(r);
            }
            std::fs::write(dir.path().join(format!("trace.{pid}")), w.into_inner()).unwrap();
            std::fs::write(
                dir.path().join(format!("maps.{pid}")),
                "4000000000-4000010000 r--p 00000000 fe:00 7 /usr/bin/app\n",
            )
            .unwrap();
        };
        let start = |pid, parent, time| Record::Start {
            pid,
            parent,
            time,
            cache_bytes: 2 << 20,
            cache_ways: 8,
        };
        write(
            10,
            &[
                start(10, 0, 0),
                Record::Attached {
                    time: 5,
                    guest_base: 0,
                },
                event(EventKind::Alloc, 0x7000_0000, 8192, 77, 10),
                event(EventKind::SiteFrame, 0x40_0000_1234, 1, 77, 10),
                Record::Misses {
                    key: Key::Site(77),
                    loads: 100,
                    stores: 20,
                },
                Record::Unattributed {
                    loads: 30,
                    stores: 0,
                },
                Record::IntervalEnd {
                    index: 0,
                    time: 1000,
                },
                Record::Misses {
                    key: Key::Site(77),
                    loads: 1,
                    stores: 2,
                },
                event(EventKind::Free, 0x7000_0000, 0, 0, 1500),
                Record::IntervalEnd {
                    index: 1,
                    time: 2000,
                },
                Record::Pages {
                    key: Key::Site(77),
                    once: 1,
                    twice: 1,
                    more: 0,
                },
                Record::Reuse {
                    key: Key::Site(77),
                    gap: 500_000_000,
                },
                Record::Exit { time: 2500 },
            ],
        );
        write(11, &[start(11, 10, 1200), Record::Exec { time: 1300 }]);
        let r = replay(
            dir.path(),
            &Context {
                command: vec!["app".into()],
                exe: "/usr/bin/app".into(),
                interval_ns: 1000,
                description: "emulate".into(),
            },
        )
        .unwrap();
        assert_eq!(r.execed, vec![11]);
        assert!(r.cut_short.is_empty());
        let p = r.profile;
        assert_eq!(p.source, Source::Emulate);
        assert_eq!(p.processes.len(), 2);
        let site = p
            .sites
            .iter()
            .find(|s| s.frames == ["/usr/bin/app+0x1234"])
            .expect("the site, named");
        assert_eq!(
            (site.loads, site.stores, site.accesses),
            (Some(101.0), Some(22.0), 123.0)
        );
        assert_eq!(site.lifetime.freed, 1);
        assert_eq!(site.lifetime.max_s, Some(1490e-9));
        assert_eq!(site.series.interval, vec![0, 1]);
        assert_eq!(site.series.loads, Some(vec![100.0, 1.0]));
        assert_eq!(p.measurement.sampled, 153.0);
        assert_eq!(p.measurement.attributed, 123.0);
        assert_eq!(p.intervals.len(), 3);
        assert!((p.duration_s - 2500e-9).abs() < 1e-15);
        assert_eq!(p.pages.len(), 1);
        assert_eq!(p.pages[0].frames, ["/usr/bin/app+0x1234"]);
        assert_eq!(
            (p.pages[0].touched_once, p.pages[0].reuse_s.clone()),
            (1, vec![0.5])
        );
    }
}
