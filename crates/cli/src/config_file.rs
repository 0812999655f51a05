//! `objtier daemon --config FILE`: the daemon's options in a TOML file.
//!
//! Keys are the long option names (`fast-capacity = "8G"`, `interval = "2s"`,
//! `proactive = false`); an option given on the command line wins over the file, and the file
//! wins over the built-in default. Unknown keys are errors that name the key and the file, so a
//! typo never silently leaves a default in place.
//!
//! | key | value | command-line option |
//! |---|---|---|
//! | `socket` | path | `--socket` |
//! | `interval` | duration (`"2s"`, `"500ms"`) | `--interval` |
//! | `startup-interval` | duration, or `"off"` | `--startup-interval` |
//! | `startup-window` | duration | `--startup-window` |
//! | `alpha` | number in (0, 1] | `--alpha` |
//! | `fill` | number in (0, 1] | `--fill` |
//! | `split` | size (bytes, or `"64M"`); default: 64M, or a 32nd of the fast tier when less | `--split` |
//! | `prioritization` | `"apb"`, `"lru"` or `"fifo"` | `--prioritization` |
//! | `trigger` | `"time:5"`, or a list (`["time:5", "alloc:1G"]`) | `--trigger` |
//! | `source` | `"auto"`, `"perf"`, `"damon"`, `"proc"` or `"none"` | `--source` |
//! | `tiers` | `"0;1"` | `--tiers` |
//! | `fast-capacity` | size | `--fast-capacity` |
//! | `fast-reserve` | size | `--fast-reserve` |
//! | `reclaim-cache` | boolean | `--reclaim-cache on\|off` |
//! | `whole-records` | boolean | `--whole-records` |
//! | `proactive` | boolean, or `"conservative"`, `"threshold[:F]"`, `"off"` | `--proactive` |
//! | `warm-start` | boolean | `--warm-start on\|off` |
//! | `short-lived-sites` | boolean | `--short-lived-sites on\|off` |
//! | `site-store` | path of a directory | `--site-store` |
//! | `rate-limit` | size (bytes per second) | `--rate-limit` |
//! | `event` | perf event name | `--event` |
//! | `sample-period` | number of events | `--sample-period` |
//! | `ldlat` | cycles | `--ldlat` |
//! | `damon-sample` | duration | `--damon-sample` |
//! | `damon-aggregate` | duration | `--damon-aggregate` |
//! | `damon-snapshots` | number, 2 to 20 | `--damon-snapshots` |
//! | `proc-budget` | percentage (`"1%"`, or a number of percent), or `"off"` | `--proc-budget` |
//! | `damon-regions` | `"MIN-MAX"` (`"10-1000"`) | `--damon-regions` |

use anyhow::Context;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A size written as a number of bytes or as text with a suffix ("512M").
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

impl SizeValue {
    pub fn bytes(&self, key: &str) -> anyhow::Result<u64> {
        match self {
            SizeValue::Bytes(b) => Ok(*b),
            SizeValue::Text(t) => crate::parse_size(t).map_err(|e| anyhow::anyhow!("{key}: {e}")),
        }
    }
}

/// `proactive = false` (as before) or `proactive = "threshold:0.8"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum SwitchOrText {
    Switch(bool),
    Text(String),
}

impl SwitchOrText {
    pub fn text(&self) -> String {
        match self {
            SwitchOrText::Switch(true) => "on".into(),
            SwitchOrText::Switch(false) => "off".into(),
            SwitchOrText::Text(t) => t.clone(),
        }
    }
}

/// `trigger = "alloc:1G"` or `trigger = ["time:5", "alloc:1G"]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn items(&self) -> Vec<String> {
        match self {
            OneOrMany::One(t) => t.split(',').map(|s| s.trim().to_owned()).collect(),
            OneOrMany::Many(list) => list.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DaemonFile {
    pub socket: Option<PathBuf>,
    pub interval: Option<String>,
    pub startup_interval: Option<String>,
    pub startup_window: Option<String>,
    pub alpha: Option<f64>,
    pub fill: Option<f64>,
    pub split: Option<SizeValue>,
    pub prioritization: Option<String>,
    pub trigger: Option<OneOrMany>,
    pub source: Option<String>,
    pub tiers: Option<String>,
    pub fast_capacity: Option<SizeValue>,
    pub fast_reserve: Option<SizeValue>,
    pub reclaim_cache: Option<bool>,
    pub whole_records: Option<bool>,
    pub proactive: Option<SwitchOrText>,
    pub warm_start: Option<bool>,
    pub short_lived_sites: Option<bool>,
    pub site_store: Option<PathBuf>,
    pub rate_limit: Option<SizeValue>,
    pub event: Option<String>,
    pub sample_period: Option<u64>,
    pub ldlat: Option<u64>,
    pub damon_sample: Option<String>,
    pub damon_aggregate: Option<String>,
    pub damon_snapshots: Option<u32>,
    pub damon_regions: Option<String>,
    pub proc_budget: Option<NumberOrText>,
}

/// `proc-budget = 0.5` (percent) or `proc-budget = "0.5%"` / `"off"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum NumberOrText {
    Number(f64),
    Text(String),
}

impl NumberOrText {
    pub fn text(&self) -> String {
        match self {
            NumberOrText::Number(n) => n.to_string(),
            NumberOrText::Text(t) => t.clone(),
        }
    }
}

impl DaemonFile {
    pub fn read(path: &Path) -> anyhow::Result<DaemonFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the config file {}", path.display()))?;
        DaemonFile::parse(&text).with_context(|| format!("in the config file {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<DaemonFile> {
        toml::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "{}; the keys are the daemon's long options: socket, interval, startup-interval, \
                 startup-window, alpha, fill, \
                 split, prioritization, trigger, source, tiers, fast-capacity, fast-reserve, \
                 reclaim-cache, whole-records, proactive, warm-start, short-lived-sites, site-store, rate-limit, event, sample-period, ldlat, \
                 damon-sample, damon-aggregate, damon-snapshots, damon-regions, proc-budget",
                e.to_string().trim_end()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_key_and_refuses_unknown_ones() {
        let file = DaemonFile::parse(
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
        assert_eq!(file.interval.as_deref(), Some("1s"));
        assert_eq!(file.fill, Some(0.8));
        assert_eq!(file.split.unwrap().bytes("split").unwrap(), 32 << 20);
        assert_eq!(file.fast_capacity.unwrap().bytes("x").unwrap(), 1 << 30);
        assert_eq!(file.proactive, Some(SwitchOrText::Switch(false)));
        assert_eq!(file.warm_start, Some(false));
        assert_eq!(file.whole_records, Some(true));
        assert_eq!(
            file.site_store.as_deref(),
            Some(Path::new("/srv/objtier/sites"))
        );
        assert_eq!(file.rate_limit.unwrap().bytes("x").unwrap(), 512 << 20);
        let file =
            DaemonFile::parse("proactive = \"threshold\"\ntrigger = \"time:3, alloc\"").unwrap();
        assert_eq!(file.proactive.unwrap().text(), "threshold");
        assert_eq!(file.trigger.unwrap().items(), ["time:3", "alloc"]);
        let err = DaemonFile::parse("fast_capacity = \"1G\"").unwrap_err();
        assert!(format!("{err:#}").contains("fast_capacity"), "{err:#}");
        assert!(format!("{err:#}").contains("fast-capacity"), "{err:#}");
        assert!(DaemonFile::parse("fill = \"lots\"").is_err());
        assert!(DaemonFile::parse("split = \"3Q\"")
            .unwrap()
            .split
            .unwrap()
            .bytes("split")
            .is_err());
    }
}
