//! The report's figures as CSV tables, one file per table, for scripts and spreadsheets. Each
//! table is long ("tidy"): one row per profile and item, the profile's label in the first
//! column, so that several profiles share a file and tiers, intervals and sites are rows,
//! never a varying number of columns. Numbers are written in full; an unknown value is empty.

use super::pages::PagesFigure;
use super::Report;

/// A CSV table being written.
struct Table {
    text: String,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        let mut t = Table {
            text: String::new(),
        };
        t.row(header.iter().map(|h| h.to_string()));
        t
    }

    fn row(&mut self, cells: impl IntoIterator<Item = String>) {
        let cells: Vec<String> = cells.into_iter().map(|c| field(&c)).collect();
        self.text.push_str(&cells.join(","));
        self.text.push('\n');
    }
}

/// A field, quoted when it holds a comma, a quote or a line break.
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

/// Every table: its file name and its text.
pub fn tables(reports: &[Report]) -> Vec<(&'static str, String)> {
    let mut summary = Table::new(&[
        "profile",
        "program",
        "exe",
        "command",
        "duration_s",
        "source",
        "access_unit",
        "sampled",
        "attributed",
        "attributed_share",
        "total_accesses",
        "peak_footprint_bytes",
        "intervals",
        "interval_s",
        "processes",
        "sites",
        "located",
        "live_pid",
        "live_profiled",
    ]);
    let mut tiers = Table::new(&[
        "profile",
        "tier",
        "nodes",
        "capacity_bytes",
        "read_latency_ns",
        "write_latency_ns",
    ]);
    let mut curve = Table::new(&[
        "profile",
        "algorithm",
        "capacity_percent",
        "capacity_bytes",
        "fast_share",
    ]);
    let mut needed = Table::new(&[
        "profile",
        "algorithm",
        "target_share",
        "capacity_percent",
        "capacity_bytes",
    ]);
    let mut observed = Table::new(&[
        "profile",
        "tiers",
        "fast_bytes_peak",
        "fast_share_of_footprint",
        "fast_share",
        "located_share",
    ]);
    let mut sites = Table::new(&[
        "profile",
        "rank",
        "id",
        "kind",
        "label",
        "frames",
        "allocations",
        "bytes_allocated",
        "peak_live_bytes",
        "accesses",
        "access_share",
        "accesses_per_mib",
        "loads",
        "stores",
        "weight",
        "freed",
        "lifetime_min_s",
        "lifetime_median_s",
        "lifetime_max_s",
        "past_one_interval",
        "live_at_exit",
        "unlocated_accesses",
    ]);
    let mut site_tiers = Table::new(&["profile", "id", "tier", "accesses"]);
    let mut tier_top = Table::new(&[
        "profile", "tier", "rank", "id", "label", "accesses", "share",
    ]);
    let mut intervals = Table::new(&[
        "profile",
        "interval",
        "start_s",
        "end_s",
        "allocations",
        "unlocated_bytes",
        "promoted_bytes",
        "demoted_bytes",
        "ping_pong_pages",
    ]);
    let mut tier_bytes = Table::new(&["profile", "interval", "tier", "bytes"]);
    let mut site_intervals = Table::new(&["profile", "id", "interval", "measure", "value"]);
    let mut moved = Table::new(&[
        "profile",
        "id",
        "label",
        "promoted_bytes",
        "demoted_bytes",
        "ping_pong_pages",
    ]);
    let mut levels = Table::new(&[
        "profile",
        "tier",
        "level",
        "accesses",
        "share",
        "weight",
        "mean_weight",
        "tlb_miss_share",
        "hitm_share",
    ]);
    let mut pages = Table::new(&[
        "profile",
        "detail",
        "pages",
        "touched_once",
        "touched_twice",
        "touched_more",
        "reuse_site_id",
        "reuse_pages",
        "reuse_min_s",
        "reuse_p25_s",
        "reuse_median_s",
        "reuse_mean_s",
        "reuse_p75_s",
        "reuse_max_s",
    ]);
    let mut latency = Table::new(&[
        "profile",
        "tier",
        "accesses",
        "weight",
        "share",
        "mean_weight",
    ]);
    for r in reports {
        let p = r.summary.label.clone();
        let s = &r.summary;
        summary.row([
            p.clone(),
            s.program.clone(),
            s.exe.clone(),
            s.command.join(" "),
            s.duration_s.to_string(),
            s.source.to_string(),
            s.access_unit.clone(),
            s.sampled.to_string(),
            s.attributed.to_string(),
            opt(s.attributed_share),
            s.total_accesses.to_string(),
            s.peak_footprint_bytes.to_string(),
            s.intervals.to_string(),
            s.interval_s.to_string(),
            s.processes.to_string(),
            s.sites.to_string(),
            s.located.to_string(),
            opt(s.live.as_ref().map(|l| l.pid)),
            opt(s.live.as_ref().map(|l| l.profiled)),
        ]);
        for t in &s.tiers {
            tiers.row([
                p.clone(),
                t.tier.to_string(),
                t.nodes
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
                t.capacity_bytes.to_string(),
                opt(t.read_latency_ns),
                opt(t.write_latency_ns),
            ]);
        }
        let c = &r.curve;
        for a in &c.algorithms {
            for ((percent, bytes), share) in
                c.percents.iter().zip(&c.capacities_bytes).zip(&a.shares)
            {
                curve.row([
                    p.clone(),
                    a.algorithm.to_string(),
                    percent.to_string(),
                    bytes.to_string(),
                    share.to_string(),
                ]);
            }
        }
        for n in &c.needed {
            needed.row([
                p.clone(),
                n.algorithm.to_string(),
                n.target.to_string(),
                opt(n.percent),
                opt(n.bytes),
            ]);
        }
        if let Some(o) = &c.observed {
            observed.row([
                p.clone(),
                o.tiers.to_string(),
                o.fast_bytes_peak.to_string(),
                o.fast_share_of_footprint.to_string(),
                o.share.to_string(),
                o.located_share.to_string(),
            ]);
        }
        for site in &r.sites {
            sites.row([
                p.clone(),
                site.rank.to_string(),
                site.id.clone(),
                site.kind.to_string(),
                site.label.clone(),
                site.frames.join(" < "),
                site.allocations.to_string(),
                site.bytes_allocated.to_string(),
                site.peak_live_bytes.to_string(),
                site.accesses.to_string(),
                site.access_share.to_string(),
                site.accesses_per_mib.to_string(),
                opt(site.loads),
                opt(site.stores),
                opt(site.weight),
                site.lifetime.freed.to_string(),
                opt(site.lifetime.min_s),
                opt(site.lifetime.median_s),
                opt(site.lifetime.max_s),
                site.lifetime.past_one_interval.to_string(),
                site.lifetime.live_at_exit.to_string(),
                site.unlocated_accesses.to_string(),
            ]);
            for (tier, accesses) in site.tier_accesses.iter().flatten().enumerate() {
                site_tiers.row([
                    p.clone(),
                    site.id.clone(),
                    tier.to_string(),
                    accesses.to_string(),
                ]);
            }
        }
        for t in r.tier_top.iter().flatten() {
            for (rank, site) in t.sites.iter().enumerate() {
                tier_top.row([
                    p.clone(),
                    t.tier.to_string(),
                    (rank + 1).to_string(),
                    site.id.clone(),
                    site.label.clone(),
                    site.accesses.to_string(),
                    site.share.to_string(),
                ]);
            }
        }
        let t = &r.over_time;
        let m = t.migrations.as_ref();
        for (i, [start, end]) in t.intervals.iter().enumerate() {
            intervals.row([
                p.clone(),
                i.to_string(),
                start.to_string(),
                end.to_string(),
                t.allocations[i].to_string(),
                t.unlocated_bytes[i].to_string(),
                opt(m.map(|m| m.promoted_bytes[i])),
                opt(m.map(|m| m.demoted_bytes[i])),
                opt(m.and_then(|m| m.ping_pong_pages.as_ref().map(|p| p[i]))),
            ]);
            for (tier, bytes) in t.resident_by_tier.iter().flatten().enumerate() {
                tier_bytes.row([
                    p.clone(),
                    i.to_string(),
                    tier.to_string(),
                    bytes[i].to_string(),
                ]);
            }
        }
        for row in &t.heat {
            for (i, v) in row.values.iter().enumerate() {
                site_intervals.row([
                    p.clone(),
                    row.id.clone(),
                    i.to_string(),
                    "accesses".into(),
                    v.to_string(),
                ]);
            }
        }
        for row in &t.fast_share {
            for (i, v) in row.values.iter().enumerate() {
                site_intervals.row([
                    p.clone(),
                    row.id.clone(),
                    i.to_string(),
                    "fast_share".into(),
                    opt(*v),
                ]);
            }
        }
        for row in &t.live_by_site {
            for (i, v) in row.values.iter().enumerate() {
                site_intervals.row([
                    p.clone(),
                    row.id.clone(),
                    i.to_string(),
                    "live_bytes".into(),
                    v.to_string(),
                ]);
            }
        }
        for s in m.map(|m| m.sites.as_slice()).unwrap_or(&[]) {
            moved.row([
                p.clone(),
                s.id.clone(),
                s.label.clone(),
                s.promoted_bytes.to_string(),
                s.demoted_bytes.to_string(),
                opt(s.ping_pong_pages),
            ]);
        }
        match &r.pages {
            PagesFigure::Absent { .. } => {
                let mut row = vec![p.clone(), "absent".to_string()];
                row.resize(14, String::new());
                pages.row(row);
            }
            PagesFigure::Present(f) => {
                let id = f
                    .reuse_site
                    .and_then(|i| r.sites.iter().find(|s| s.index == i))
                    .map(|s| s.id.clone());
                let q = f.reuse_s.as_ref();
                pages.row([
                    p.clone(),
                    "present".to_string(),
                    f.pages.to_string(),
                    f.touched_once.to_string(),
                    f.touched_twice.to_string(),
                    f.touched_more.to_string(),
                    opt(id),
                    opt(q.map(|q| q.count)),
                    opt(q.map(|q| q.min)),
                    opt(q.map(|q| q.p25)),
                    opt(q.map(|q| q.median)),
                    opt(q.map(|q| q.mean)),
                    opt(q.map(|q| q.p75)),
                    opt(q.map(|q| q.max)),
                ]);
            }
        }
        let all = r
            .latency
            .levels
            .iter()
            .map(|rows| ("all".to_string(), rows));
        let per_tier = r
            .latency
            .levels_by_tier
            .iter()
            .flatten()
            .enumerate()
            .map(|(t, rows)| (t.to_string(), rows));
        for (tier, rows) in all.chain(per_tier) {
            for l in rows {
                levels.row([
                    p.clone(),
                    tier.clone(),
                    l.level.clone(),
                    l.accesses.to_string(),
                    l.share.to_string(),
                    l.weight.to_string(),
                    opt(l.mean_weight),
                    l.tlb_miss_share.to_string(),
                    l.hitm_share.to_string(),
                ]);
            }
        }
        for t in r.latency.by_tier.iter().flatten() {
            latency.row([
                p.clone(),
                t.tier.to_string(),
                t.accesses.to_string(),
                t.weight.to_string(),
                t.share.to_string(),
                opt(t.mean_weight),
            ]);
        }
    }
    vec![
        ("summary.csv", summary.text),
        ("tiers.csv", tiers.text),
        ("curve.csv", curve.text),
        ("needed.csv", needed.text),
        ("observed.csv", observed.text),
        ("sites.csv", sites.text),
        ("site_tiers.csv", site_tiers.text),
        ("tier_top.csv", tier_top.text),
        ("intervals.csv", intervals.text),
        ("tier_bytes.csv", tier_bytes.text),
        ("site_intervals.csv", site_intervals.text),
        ("migrations_by_site.csv", moved.text),
        ("pages.csv", pages.text),
        ("latency.csv", latency.text),
        ("levels.csv", levels.text),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_profiles::{profile, site};
    use crate::report::{build, Input};

    #[test]
    fn fields_are_quoted_where_they_must_be() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn every_table_has_a_row_per_item_and_a_header() {
        let mut p = profile(2, 2);
        let mut s = site("/bin/app+0x10", 4096, &[1.0, 2.0]);
        s.series.tier_bytes = Some(vec![vec![4096, 0], vec![0, 4096]]);
        p.sites = vec![s, site("/bin/app+0x20", 8192, &[0.5, 0.0])];
        p.peak_footprint_bytes = 12288;
        let r = build(&Input {
            label: "a, b.json".into(),
            profile: p,
            live: None,
        });
        let tables = tables(&[r]);
        let get = |name: &str| &tables.iter().find(|(n, _)| *n == name).unwrap().1;
        assert!(get("summary.csv")
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("\"a, b.json\",app,"));
        assert_eq!(get("curve.csv").lines().count(), 1 + 4 * 100);
        assert_eq!(get("sites.csv").lines().count(), 3);
        assert_eq!(get("intervals.csv").lines().count(), 3);
        assert!(
            get("intervals.csv")
                .lines()
                .nth(2)
                .unwrap()
                .ends_with(",0,4096,"),
            "demoted"
        );
        assert_eq!(get("tier_bytes.csv").lines().count(), 1 + 2 * 2);
        assert!(get("pages.csv")
            .lines()
            .nth(1)
            .unwrap()
            .contains(",absent,"));
        assert!(get("site_intervals.csv").contains(",S1,1,fast_share,0\n"));
        for (name, text) in &tables {
            let columns = text.lines().next().unwrap().split(',').count();
            assert!(columns >= 4, "{name} has a header");
        }
    }

    #[test]
    fn recorded_moves_and_levels_have_their_columns() {
        let r = build(&Input {
            label: "c.json".into(),
            profile: crate::report::test_profiles::recorded(),
            live: None,
        });
        let tables = tables(&[r]);
        let get = |name: &str| &tables.iter().find(|(n, _)| *n == name).unwrap().1;
        assert!(get("intervals.csv").contains(",8192,0,2\n"), "interval 3");
        assert!(get("migrations_by_site.csv").ends_with(",16384,8192,3\n"));
        let levels = get("levels.csv");
        assert_eq!(levels.lines().count(), 1 + 3 + 2);
        assert!(levels.contains("c.json,1,cxl,2,1,1200,600,0.5,0\n"));
    }
}
