//! Options from the command line, a file and the defaults, and what each becomes in the
//! daemon's configuration.

use super::values::*;
use super::*;
use clap::Parser;
use objtier_daemon::config::SourceChoice;
use objtier_policy::{Prioritization, SitePlacement};
use std::time::Duration;

#[test]
fn sizes_durations_tiers() {
    assert_eq!(parse_size("512M"), Ok(512 << 20));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert!(parse_size("lots").is_err());
    assert!(parse_size("3Q").is_err());
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
    assert!(parse_duration("2").is_err());
    assert!(parse_duration("-1s").is_err());
    assert_eq!("0;1-2".parse(), Ok(Tiers(vec![vec![0], vec![1, 2]])));
    assert!("0;;1".parse::<Tiers>().is_err());
    assert!("1.5".parse::<Fraction>().is_err());
    assert_eq!("20-2000".parse(), Ok(Regions(20, 2000)));
    assert!("2-100"
        .parse::<Regions>()
        .unwrap_err()
        .contains("at least 3"));
    assert!("50-10"
        .parse::<Regions>()
        .unwrap_err()
        .contains("at least MIN"));
    assert!("many".parse::<Regions>().is_err());
}

#[test]
fn the_load_latency_threshold_comes_from_ldlat() {
    let c = config_from(&["objtier", "daemon", "--ldlat", "64"]).unwrap();
    assert_eq!(c.perf_ldlat, 64);
    assert!(config_from(&["objtier", "daemon", "--ldlat", "0"]).is_err());
    assert!(config_from(&["objtier", "daemon", "--ldlat", "70000"]).is_err());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objtier.toml");
    std::fs::write(&file, "ldlat = 50\n").unwrap();
    let path = file.to_str().unwrap();
    let c = config_from(&["objtier", "daemon", "--config", path]).unwrap();
    assert_eq!(c.perf_ldlat, 50);
    std::fs::write(&file, "ldlat = 0\n").unwrap();
    let err = config_from(&["objtier", "daemon", "--config", path]).unwrap_err();
    assert!(format!("{err:#}").contains("1 to 65535"), "{err:#}");
}

#[test]
fn the_proc_budget_is_a_percentage_or_off() {
    let c = config_from(&["objtier", "daemon"]).unwrap();
    assert_eq!(c.proc_budget, Some(0.01), "1 % by default");
    let c = config_from(&["objtier", "daemon", "--proc-budget", "0.5%"]).unwrap();
    assert_eq!(c.proc_budget, Some(0.005));
    let c = config_from(&["objtier", "daemon", "--proc-budget", "2"]).unwrap();
    assert_eq!(c.proc_budget, Some(0.02));
    let c = config_from(&["objtier", "daemon", "--proc-budget", "off"]).unwrap();
    assert_eq!(c.proc_budget, None);
    for bad in ["0", "101%", "lots", "1%%"] {
        let err = config_from(&["objtier", "daemon", "--proc-budget", bad]).unwrap_err();
        assert!(err.to_string().contains("or off"), "{bad}: {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objtier.toml");
    let path = file.to_str().unwrap();
    std::fs::write(&file, "proc-budget = \"3%\"\n").unwrap();
    let c = config_from(&["objtier", "daemon", "--config", path]).unwrap();
    assert_eq!(c.proc_budget, Some(0.03));
    std::fs::write(&file, "proc-budget = 0.5\n").unwrap();
    let c = config_from(&["objtier", "daemon", "--config", path]).unwrap();
    assert_eq!(c.proc_budget, Some(0.005));
    std::fs::write(&file, "proc-budget = \"off\"\n").unwrap();
    let c = config_from(&["objtier", "daemon", "--config", path]).unwrap();
    assert_eq!(c.proc_budget, None);
    std::fs::write(&file, "proc-budget = \"much\"\n").unwrap();
    let err = config_from(&["objtier", "daemon", "--config", path]).unwrap_err();
    assert!(format!("{err:#}").contains("proc-budget"), "{err:#}");
    // The command line wins over the file.
    std::fs::write(&file, "proc-budget = \"3%\"\n").unwrap();
    let c = config_from(&[
        "objtier",
        "daemon",
        "--config",
        path,
        "--proc-budget",
        "off",
    ])
    .unwrap();
    assert_eq!(c.proc_budget, None);
}

#[test]
fn the_startup_interval_can_be_set_or_turned_off() {
    let c = config_from(&["objtier", "daemon"]).unwrap();
    assert_eq!(c.startup_interval, None, "off by default");
    assert_eq!(c.startup_window, Duration::from_secs(10));
    let c = config_from(&["objtier", "daemon", "--startup-interval", "500ms"]).unwrap();
    assert_eq!(c.startup_interval, Some(Duration::from_millis(500)));
    let c = config_from(&["objtier", "daemon", "--startup-interval", "off"]).unwrap();
    assert_eq!(c.startup_interval, None);
    let c = config_from(&[
        "objtier",
        "daemon",
        "--startup-interval",
        "250ms",
        "--startup-window",
        "30s",
    ])
    .unwrap();
    assert_eq!(c.startup_interval, Some(Duration::from_millis(250)));
    assert_eq!(c.startup_window, Duration::from_secs(30));
    let err = config_from(&["objtier", "daemon", "--startup-interval", "soon"]).unwrap_err();
    assert!(err.to_string().contains("or off"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objtier.toml");
    std::fs::write(
        &file,
        "startup-interval = \"off\"\nstartup-window = \"5s\"\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let c = config_from(&["objtier", "daemon", "--config", path]).unwrap();
    assert_eq!(c.startup_interval, None);
    assert_eq!(c.startup_window, Duration::from_secs(5));
}

fn config_from(args: &[&str]) -> anyhow::Result<DaemonConfig> {
    let cli = crate::Cli::try_parse_from(args).map_err(|e| anyhow::anyhow!("{e}"))?;
    match cli.command {
        crate::Cmd::Daemon(options) => options.config(),
        _ => unreachable!("a daemon command line"),
    }
}

#[test]
fn daemon_options_come_from_the_command_line_then_the_file_then_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("objtier.toml");
    std::fs::write(
        &file,
        "fill = 0.8\ninterval = \"1s\"\nprioritization = \"lru\"\nsource = \"none\"\n\
         rate-limit = \"256M\"\nproactive = false\ntrigger = [\"time:2\", \"alloc:512M\"]\n\
         warm-start = false\nsite-store = \"/srv/sites\"\ndamon-regions = \"20-2000\"\n\
         reclaim-cache = false\ndamon-snapshots = 8\nshort-lived-sites = false\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let c = config_from(&["objtier", "daemon", "--config", path, "--fill", "0.5"]).unwrap();
    assert_eq!(c.fill, 0.5, "the command line wins");
    assert_eq!(c.interval, Duration::from_secs(1), "then the file");
    assert_eq!(c.prioritization, Prioritization::Lru);
    assert_eq!(c.source, SourceChoice::None);
    assert_eq!(c.rate_limit_bytes_per_second, Some(256 << 20));
    assert_eq!(c.proactive, SitePlacement::Off);
    assert_eq!(
        c.triggers,
        vec![TriggerSpec::Time(2), TriggerSpec::Allocation(512 << 20)]
    );
    assert!(!c.warm_start);
    assert!(!c.reclaim_cache);
    assert!(!c.short_lived_sites);
    assert_eq!(
        c.site_store.as_deref(),
        Some(std::path::Path::new("/srv/sites"))
    );
    assert_eq!((c.damon.min_regions, c.damon.max_regions), (20, 2000));
    assert_eq!(c.damon_snapshots, 8);
    assert_eq!(
        c.perf_ldlat, 30,
        "perf mem's load latency threshold by default"
    );
    let c = config_from(&[
        "objtier",
        "daemon",
        "--config",
        path,
        "--warm-start",
        "on",
        "--site-store",
        "/elsewhere",
        "--reclaim-cache",
        "on",
        "--short-lived-sites",
        "on",
    ])
    .unwrap();
    assert!(c.short_lived_sites);
    assert!(c.warm_start);
    assert!(c.reclaim_cache, "the command line wins");
    assert_eq!(
        c.site_store.as_deref(),
        Some(std::path::Path::new("/elsewhere"))
    );
    assert_eq!(c.alpha, objtier_policy::DEFAULT_ALPHA, "then the default");
    assert_eq!(c.split_bytes, None, "automatic unless given");
    let c = config_from(&["objtier", "daemon", "--split", "8M"]).unwrap();
    assert_eq!(c.split_bytes, Some(8 << 20));
    let c = config_from(&["objtier", "daemon", "--split", "10000"]).unwrap();
    assert_eq!(c.split_bytes, Some(8192), "whole pages");
    let defaults = config_from(&["objtier", "daemon"]).unwrap();
    assert_eq!(defaults.interval, Duration::from_secs(2));
    assert_eq!(defaults.damon_snapshots, 4);
    let c = config_from(&["objtier", "daemon", "--damon-snapshots", "12"]).unwrap();
    assert_eq!(c.damon_snapshots, 12);
    for (args, error) in [
        (
            &["objtier", "daemon", "--damon-snapshots", "1"][..],
            "not in 2..=20",
        ),
        (
            &["objtier", "daemon", "--damon-snapshots", "many"][..],
            "invalid digit",
        ),
    ] {
        let e = config_from(args).unwrap_err().to_string();
        assert!(e.contains(error), "{e}");
    }
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "damon-snapshots = 50\n").unwrap();
    let e = config_from(&["objtier", "daemon", "--config", bad.to_str().unwrap()]).unwrap_err();
    assert!(format!("{e:#}").contains("2 to 20"), "{e:#}");
    assert_eq!(defaults.proactive, SitePlacement::Conservative);
    assert_eq!(defaults.triggers, vec![TriggerSpec::Time(1)]);
    assert!(defaults.warm_start);
    assert!(defaults.reclaim_cache);
    assert!(defaults.short_lived_sites);
    assert_eq!(
        defaults.site_store, None,
        "the default directory is chosen at start-up"
    );
    let c = config_from(&[
        "objtier",
        "daemon",
        "--config",
        path,
        "--trigger",
        "alloc:1G,pressure",
        "--proactive",
        "threshold:0.9",
    ])
    .unwrap();
    assert_eq!(
        c.triggers,
        vec![
            TriggerSpec::Allocation(1 << 30),
            TriggerSpec::Pressure(0.05)
        ],
        "the command line's triggers replace the file's"
    );
    assert_eq!(c.proactive, SitePlacement::Threshold(0.9));
    assert!(config_from(&["objtier", "daemon", "--trigger", "sometimes"]).is_err());
    std::fs::write(&file, "prioritization = \"random\"\n").unwrap();
    let err = config_from(&["objtier", "daemon", "--config", path]).unwrap_err();
    assert!(
        format!("{err:#}").contains("not apb, lru or fifo"),
        "{err:#}"
    );
    let err = config_from(&["objtier", "daemon", "--config", "/nonexistent.toml"]).unwrap_err();
    assert!(
        format!("{err:#}").contains("cannot read the config file"),
        "{err:#}"
    );
}

#[test]
fn reads_every_key_and_refuses_unknown_ones() {
    let file = DaemonOptions::parse(
        r#"
        interval = "1s"
        fill = 0.8
        split = "32M"
        fast-capacity = 1073741824
        proactive = false
        warm-start = false
        site-store = "/srv/objtier/sites"
        rate-limit = "512M"
        tiers = "0;1"
        whole-records = true
        "#,
    )
    .unwrap();
    assert_eq!(file.interval, Some(Time(Duration::from_secs(1))));
    assert_eq!(file.fill, Some(Fraction(0.8)));
    assert_eq!(file.split, Some(Size(32 << 20)));
    assert_eq!(file.fast_capacity, Some(Size(1 << 30)));
    assert_eq!(file.proactive, Some(Proactive(SitePlacement::Off)));
    assert_eq!(file.warm_start, Some(Switch::Off));
    assert!(file.whole_records);
    assert_eq!(
        file.site_store.as_deref(),
        Some(Path::new("/srv/objtier/sites"))
    );
    assert_eq!(file.rate_limit, Some(Size(512 << 20)));
    let file =
        DaemonOptions::parse("proactive = \"threshold\"\ntrigger = \"time:3, alloc\"").unwrap();
    assert_eq!(
        file.proactive,
        Some(Proactive(SitePlacement::Threshold(
            objtier_policy::DEFAULT_SITE_THRESHOLD
        )))
    );
    assert_eq!(
        file.trigger,
        [
            TriggerSpec::Time(3),
            TriggerSpec::Allocation(objtier_policy::routines::DEFAULT_ALLOCATION_TRIGGER_BYTES)
        ]
    );
    let err = DaemonOptions::parse("fast_capacity = \"1G\"").unwrap_err();
    assert!(format!("{err:#}").contains("fast_capacity"), "{err:#}");
    assert!(format!("{err:#}").contains("fast-capacity"), "{err:#}");
    assert!(DaemonOptions::parse("fill = \"lots\"").is_err());
    assert!(DaemonOptions::parse("split = \"3Q\"").is_err());
    // Options only the command line gives are not keys of the file.
    assert!(DaemonOptions::parse("dry-run = true").is_err());
}

/// docs/daemon.md's table of options lists exactly the options of `objtier daemon` (all but the
/// hidden one `objtier run` passes).
#[test]
fn the_documented_options_are_the_declared_ones() {
    let doc = include_str!("../../../../docs/daemon.md");
    let table = doc
        .split("\n## Options\n")
        .nth(1)
        .expect("docs/daemon.md has an Options section");
    let mut documented: Vec<String> = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .flat_map(|row| {
            let first = row.split('|').nth(1).unwrap_or_default();
            first
                .split(',')
                .filter_map(|name| {
                    let name = name.trim().trim_matches('`');
                    name.strip_prefix("--").map(str::to_owned)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let mut declared: Vec<String> = option_names()
        .into_iter()
        .filter(|name| name != "exit-with-pid")
        .collect();
    documented.sort();
    declared.sort();
    assert_eq!(documented, declared, "docs/daemon.md's options table");
    // Every key a file may give is an option of the table, too.
    assert!(file_keys().iter().all(|k| declared.contains(k)));
}

/// The package's commented default /etc/objtier/objtier.toml shows every option a file may give
/// (but the two the service's command line sets), and uncommented as it stands it reads.
#[test]
fn the_packaged_config_shows_every_option_and_reads_uncommented() {
    let text = include_str!("../../../../packaging/objtier.toml");
    let uncommented: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| l.contains(" = "))
        .map(|l| format!("{l}\n"))
        .collect();
    let options = DaemonOptions::parse(&uncommented).unwrap();
    options.clone().config().unwrap();
    let mut shown: Vec<&str> = uncommented
        .lines()
        .map(|l| l.split(" = ").next().unwrap())
        .collect();
    shown.sort();
    let mut keys: Vec<String> = file_keys()
        .into_iter()
        .filter(|k| k != "socket" && k != "site-store")
        .collect();
    keys.sort();
    assert_eq!(shown, keys, "packaging/objtier.toml");
}

/// The config fuzzer's saved corpus (`fuzz/corpus/config`, kept by `bench/fuzz/run`) parses or
/// is refused with an error, never a panic.
#[test]
fn the_fuzzers_config_corpus_is_parsed_or_refused() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/config");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        if let Ok(mut options) = DaemonOptions::parse(&String::from_utf8_lossy(&data)) {
            options.config = None;
            let _ = options.config();
        }
        n += 1;
    }
    assert!(n > 0, "{} is empty", dir.display());
}

/// A duration too long for `Duration` (found by the config fuzzer) is an error, not a panic.
#[test]
fn an_endless_duration_is_refused() {
    let e = parse_duration("222222222222222222222222222222222s").unwrap_err();
    assert!(e.contains("that long"), "{e}");
    let e = DaemonOptions::parse("interval = \"2222222222222222222222222222s\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("that long"), "{e}");
}
