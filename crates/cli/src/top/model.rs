//! What `objtier top` shows, computed from the daemon's `{"cmd":"status"}` answers (the JSON
//! of `objtier_daemon::status`): pure, so that it is tested on answers written by hand.
//!
//! Rates (migrations, the source's CPU and observations) are the difference between two
//! answers over the time between them; with one answer only (the first refresh, `--once`),
//! they are averages since the daemon started, and say so.

use serde_json::Value;

/// One refresh of the view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct View {
    pub daemon_pid: u64,
    pub uptime_s: f64,
    pub source: String,
    pub interval_ms: u64,
    pub policy: String,
    /// The access source's CPU, as a share of one CPU, and its observations per second.
    pub source_cpu_share: Option<f64>,
    pub observations_per_s: Option<f64>,
    pub samples_lost: u64,
    /// The last interval's share of sampled accesses that fell on tracked objects.
    pub attributed_share: Option<f64>,
    /// Pages promoted, demoted and failed per second.
    pub promoted_per_s: f64,
    pub demoted_per_s: f64,
    pub failed_per_s: f64,
    /// What the rates are over: the last refresh's seconds, or `None` for since the start.
    pub rates_over_s: Option<f64>,
    pub tiers: Vec<TierRow>,
    pub processes: Vec<ProcessRow>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TierRow {
    pub tier: u64,
    pub nodes: String,
    pub capacity_bytes: u64,
    /// Used by anything (capacity less free), of which objtier's attached processes hold
    /// `objtier_bytes` (their tracked objects' resident bytes there).
    pub used_bytes: u64,
    pub objtier_bytes: u64,
    pub free_bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessRow {
    pub pid: u64,
    pub name: String,
    pub tracked_bytes: u64,
    /// Resident bytes of its tracked objects per tier, at the last interval.
    pub bytes_per_tier: Vec<u64>,
    /// The share of those in tier 0: where the daemon keeps its hottest objects.
    pub fast_share: Option<f64>,
    pub profiled: bool,
    pub no_migrate: bool,
    /// The placement file it runs with, if any.
    pub placement: Option<String>,
    pub hottest: Vec<HotSite>,
}

/// A site of a process, by the daemon's access estimates of its records (else by bytes).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HotSite {
    pub site: String,
    /// Its innermost frame, `module+0xoffset` shortened to the module's file name.
    pub frame: String,
    pub bytes: u64,
    /// The sum of its records' access estimates (an EMA per interval); 0 where none.
    pub accesses: f64,
}

/// Sites listed per process.
pub const HOT_SITES: usize = 3;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// The view of `now`, with rates since `before` (an earlier answer and the seconds between
/// the two) when given; `name_of` names a pid (its command, from /proc where it can).
pub fn view(now: &Value, before: Option<(&Value, f64)>, name_of: &dyn Fn(u64) -> String) -> View {
    let d = &now["daemon"];
    let uptime = f(&d["uptime_seconds"]).unwrap_or(0.0);
    let totals = &d["totals"];
    let cost = &d["source_cost"];
    // Differences over the refresh, or totals over the uptime.
    let (span, base_totals, base_cost) = match before {
        Some((b, seconds)) if seconds > 0.0 => (
            Some(seconds),
            b["daemon"]["totals"].clone(),
            b["daemon"]["source_cost"].clone(),
        ),
        _ => (None, Value::Null, Value::Null),
    };
    let seconds = span.unwrap_or(uptime);
    let rate = |now: &Value, base: &Value| -> f64 {
        let delta = now.as_f64().unwrap_or(0.0) - base.as_f64().unwrap_or(0.0);
        if seconds > 0.0 {
            delta.max(0.0) / seconds
        } else {
            0.0
        }
    };
    let has_cost = cost["cpu_seconds"].is_number();
    let processes_json = now["processes"].as_array().cloned().unwrap_or_default();
    let tiers = now["tiers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let tier = u(&t["tier"]);
            let capacity = u(&t["capacity_bytes"]);
            let free = u(&t["free_bytes"]);
            TierRow {
                tier,
                nodes: t["nodes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                capacity_bytes: capacity,
                used_bytes: capacity.saturating_sub(free),
                objtier_bytes: processes_json
                    .iter()
                    .map(|p| u(&p["bytes_per_tier"][tier as usize]))
                    .sum(),
                free_bytes: free,
            }
        })
        .collect();
    let mut processes: Vec<ProcessRow> = processes_json
        .iter()
        .map(|p| {
            let pid = u(&p["pid"]);
            let bytes_per_tier: Vec<u64> = p["bytes_per_tier"]
                .as_array()
                .into_iter()
                .flatten()
                .map(u)
                .collect();
            let resident: u64 = bytes_per_tier.iter().sum();
            ProcessRow {
                pid,
                name: name_of(pid),
                tracked_bytes: u(&p["tracked_bytes"]),
                fast_share: (resident > 0)
                    .then(|| bytes_per_tier.first().copied().unwrap_or(0) as f64 / resident as f64),
                bytes_per_tier,
                profiled: p["profiled"] == true,
                no_migrate: p["no_migrate"] == true,
                placement: p["placement"]["file"].as_str().map(str::to_string),
                hottest: hottest(p),
            }
        })
        .collect();
    processes.sort_by_key(|p| (std::cmp::Reverse(p.tracked_bytes), p.pid));
    View {
        daemon_pid: u(&d["pid"]),
        uptime_s: uptime,
        source: d["source_detail"]
            .as_str()
            .or(d["source"].as_str())
            .unwrap_or("?")
            .to_string(),
        interval_ms: u(&d["interval_ms"]),
        policy: d["policy"].as_str().unwrap_or("").to_string(),
        source_cpu_share: has_cost.then(|| rate(&cost["cpu_seconds"], &base_cost["cpu_seconds"])),
        observations_per_s: has_cost
            .then(|| rate(&cost["observations"], &base_cost["observations"])),
        samples_lost: u(&cost["lost"]),
        attributed_share: f(&d["last_interval"]["attributed_share"]),
        promoted_per_s: rate(&totals["promoted_pages"], &base_totals["promoted_pages"]),
        demoted_per_s: rate(&totals["demoted_pages"], &base_totals["demoted_pages"]),
        failed_per_s: rate(&totals["failed_pages"], &base_totals["failed_pages"]),
        rates_over_s: span,
        tiers,
        processes,
    }
}

/// A process's hottest sites: its records' access estimates summed by site, hottest first;
/// where none was sampled, its sites holding the most bytes.
fn hottest(p: &Value) -> Vec<HotSite> {
    let sites = p["sites"].as_array().cloned().unwrap_or_default();
    let frame_of = |site: &str| -> (String, u64) {
        sites
            .iter()
            .find(|s| s["site"].as_str() == Some(site))
            .map(|s| {
                let frame = s["frames"][0].as_str().map_or_else(
                    || {
                        if site
                            .trim_start_matches("0x")
                            .trim_start_matches('0')
                            .is_empty()
                        {
                            "(small objects)".to_string()
                        } else {
                            "(frames not yet known)".to_string()
                        }
                    },
                    short_frame,
                );
                (frame, u(&s["bytes"]))
            })
            .unwrap_or_else(|| ("(not among the largest sites)".to_string(), 0))
    };
    let mut by_site: Vec<(String, f64)> = Vec::new();
    for r in p["hottest_records"].as_array().into_iter().flatten() {
        let (Some(site), Some(ema)) = (r["site"].as_str(), r["ema_accesses"].as_f64()) else {
            continue;
        };
        match by_site.iter_mut().find(|(s, _)| s == site) {
            Some(entry) => entry.1 += ema,
            None => by_site.push((site.to_string(), ema)),
        }
    }
    if by_site.is_empty() {
        // The status lists sites by their live bytes already.
        return sites
            .iter()
            .take(HOT_SITES)
            .filter_map(|s| s["site"].as_str())
            .map(|site| {
                let (frame, bytes) = frame_of(site);
                HotSite {
                    site: site.to_string(),
                    frame,
                    bytes,
                    accesses: 0.0,
                }
            })
            .collect();
    }
    by_site.sort_by(|a, b| b.1.total_cmp(&a.1));
    by_site
        .into_iter()
        .take(HOT_SITES)
        .map(|(site, accesses)| {
            let (frame, bytes) = frame_of(&site);
            HotSite {
                site,
                frame,
                bytes,
                accesses,
            }
        })
        .collect()
}

/// `/usr/bin/app+0x1234` as `app+0x1234`.
fn short_frame(frame: &str) -> String {
    match frame.rsplit_once('+') {
        Some((module, offset)) => format!("{}+{offset}", objtier_profile::file_name(module)),
        None => frame.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A status answer as `objtier_daemon::status::status_json` writes it (the fields the view
    /// reads), of a daemon up `uptime` seconds that has promoted `promoted` pages.
    pub fn status(uptime: f64, promoted: u64, cpu: f64) -> Value {
        json!({
            "daemon": {
                "pid": 77, "uptime_seconds": uptime, "interval_ms": 2000,
                "source": "damon", "source_detail": "damon (fvaddr, 4 snapshots an interval)",
                "policy": "apb",
                "source_cost": {"cpu_seconds": cpu, "observations": 1000, "lost": 0},
                "totals": {"promoted_pages": promoted, "demoted_pages": 10, "failed_pages": 0},
                "last_interval": {"attributed_share": 0.875},
            },
            "tiers": [
                {"tier": 0, "nodes": [0], "capacity_bytes": 1000, "free_bytes": 400},
                {"tier": 1, "nodes": [1, 2], "capacity_bytes": 8000, "free_bytes": 7000},
            ],
            "processes": [
                {
                    "pid": 10, "tracked_bytes": 100, "bytes_per_tier": [25, 75],
                    "profiled": false, "no_migrate": false, "placement": null,
                    "sites": [], "hottest_records": [],
                },
                {
                    "pid": 20, "tracked_bytes": 500, "bytes_per_tier": [300, 100],
                    "profiled": true, "no_migrate": true,
                    "placement": {"file": "/tmp/app.placement.json"},
                    "sites": [
                        {"site": "0x00000000000000aa", "bytes": 300, "frames": ["/usr/bin/tierbench+0x3f707"]},
                        {"site": "0x00000000000000bb", "bytes": 100, "frames": null},
                        {"site": "0x0000000000000000", "bytes": 50, "frames": null},
                    ],
                    "hottest_records": [
                        {"site": "0x00000000000000bb", "ema_accesses": 3.0},
                        {"site": "0x00000000000000aa", "ema_accesses": 2.0},
                        {"site": "0x00000000000000aa", "ema_accesses": 2.5},
                    ],
                },
            ],
        })
    }

    #[test]
    fn tiers_and_processes_from_one_answer() {
        let v = view(&status(100.0, 400, 2.0), None, &|pid| format!("p{pid}"));
        assert_eq!(v.daemon_pid, 77);
        assert_eq!(v.source, "damon (fvaddr, 4 snapshots an interval)");
        assert_eq!(v.tiers[0].used_bytes, 600);
        assert_eq!(v.tiers[0].objtier_bytes, 325);
        assert_eq!(v.tiers[1].nodes, "1,2");
        assert_eq!(v.tiers[1].objtier_bytes, 175);
        // The largest first.
        assert_eq!(v.processes[0].pid, 20);
        assert_eq!(v.processes[0].name, "p20");
        assert_eq!(v.processes[0].fast_share, Some(0.75));
        assert!(v.processes[0].profiled && v.processes[0].no_migrate);
        assert_eq!(
            v.processes[0].placement.as_deref(),
            Some("/tmp/app.placement.json")
        );
        let hot = &v.processes[0].hottest;
        assert_eq!(
            hot[0].frame, "tierbench+0x3f707",
            "4.5 of estimate, summed by site"
        );
        assert_eq!(hot[0].accesses, 4.5);
        assert_eq!(hot[0].bytes, 300);
        assert_eq!(hot[1].frame, "(frames not yet known)");
        // No sample: no hottest.
        assert!(v.processes[1].hottest.is_empty());
        assert_eq!(v.attributed_share, Some(0.875));
        // Rates since the start.
        assert_eq!(v.rates_over_s, None);
        assert_eq!(v.promoted_per_s, 4.0);
        assert_eq!(v.source_cpu_share, Some(0.02));
        assert_eq!(v.observations_per_s, Some(10.0));
    }

    #[test]
    fn rates_over_a_refresh() {
        let before = status(100.0, 400, 2.0);
        let now = status(102.0, 500, 2.1);
        let v = view(&now, Some((&before, 2.0)), &|_| String::new());
        assert_eq!(v.rates_over_s, Some(2.0));
        assert_eq!(v.promoted_per_s, 50.0);
        assert_eq!(v.demoted_per_s, 0.0);
        assert!((v.source_cpu_share.unwrap() - 0.05).abs() < 1e-9);
        assert_eq!(v.observations_per_s, Some(0.0));
    }

    #[test]
    fn without_samples_the_largest_sites_are_shown() {
        let mut s = status(1.0, 0, 0.0);
        s["processes"][1]["hottest_records"] = json!([]);
        let v = view(&s, None, &|_| String::new());
        let hot = &v.processes[0].hottest;
        assert_eq!(hot.len(), 3);
        assert_eq!(hot[0].bytes, 300);
        assert_eq!(hot[2].frame, "(small objects)");
        assert_eq!(hot[0].accesses, 0.0);
    }

    #[test]
    fn an_old_or_odd_answer_is_no_crash() {
        let v = view(&json!({}), None, &|_| String::new());
        assert!(v.tiers.is_empty() && v.processes.is_empty());
        assert_eq!(v.source_cpu_share, None);
        assert_eq!(v.promoted_per_s, 0.0);
    }
}
