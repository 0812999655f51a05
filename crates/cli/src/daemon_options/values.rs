//! The kinds of value a daemon option takes, each read the same way from the command line
//! (`FromStr`) and from the TOML file (`Deserialize`, which also takes the file's own numbers
//! and booleans where they say the same thing), with the same errors.

use objtier_daemon::config::SourceChoice;
use objtier_policy::{Prioritization, SitePlacement, TriggerSpec};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Implements `Deserialize` for a `FromStr` type by reading a string.
macro_rules! from_text {
    ($ty:ty) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(de::Error::custom)
            }
        }
    };
}

/// A visitor that takes a TOML string, integer, float or boolean and hands its text to
/// `FromStr` (what the option would have been given on the command line).
struct AsText<T>(std::marker::PhantomData<T>, &'static str);

impl<T: FromStr<Err = String>> Visitor<'_> for AsText<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.1)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        v.to_string().parse().map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        v.to_string().parse().map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        v.to_string().parse().map_err(E::custom)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        if v { "on" } else { "off" }.parse().map_err(E::custom)
    }
}

/// Implements `Deserialize` for a `FromStr` type from any TOML scalar (see [`AsText`]).
macro_rules! from_scalar {
    ($ty:ty, $expecting:literal) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(AsText(std::marker::PhantomData, $expecting))
            }
        }
    };
}

pub fn parse_size(text: &str) -> Result<u64, String> {
    objtier_policy::units::parse_size(text)
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(format!(
            "{text:?} is not a duration: use e.g. 2s, 500ms or 5000us"
        ));
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: use e.g. 2s, 500ms"))?;
    if !(value > 0.0 && value.is_finite()) {
        return Err(format!("{text:?}: a duration must be positive"));
    }
    // Found by the config fuzzer: `from_secs_f64` panics on durations past u64 seconds.
    Duration::try_from_secs_f64(value * scale)
        .map_err(|_| format!("{text:?}: a duration that long is not one objtier can wait"))
}

/// A duration: `2s`, `500ms`, `5000us`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Time(pub Duration);

impl FromStr for Time {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        parse_duration(text).map(Time)
    }
}
from_text!(Time);

/// A duration, or "off" (None).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeOrOff(pub Option<Duration>);

impl FromStr for TimeOrOff {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim() == "off" {
            return Ok(TimeOrOff(None));
        }
        parse_duration(text)
            .map(|d| TimeOrOff(Some(d)))
            .map_err(|e| format!("{e}, or off"))
    }
}
from_text!(TimeOrOff);

/// A share written as a percentage ("1%", "0.5%", or "1" alone), or "off" (None).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PercentOrOff(pub Option<f64>);

impl FromStr for PercentOrOff {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "off" {
            return Ok(PercentOrOff(None));
        }
        match text.strip_suffix('%').unwrap_or(text).trim().parse::<f64>() {
            Ok(v) if v > 0.0 && v <= 100.0 => Ok(PercentOrOff(Some(v / 100.0))),
            _ => Err(format!(
                "{text:?}: give a percentage above 0 and at most 100 (e.g. 1% or 0.5%), or off"
            )),
        }
    }
}
from_scalar!(
    PercentOrOff,
    "a percentage (a number, or text such as \"1%\") or \"off\""
);

/// A number in (0, 1].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fraction(pub f64);

impl FromStr for Fraction {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.parse::<f64>() {
            Ok(v) if v > 0.0 && v <= 1.0 => Ok(Fraction(v)),
            _ => Err(format!("{text:?} must be a number in (0, 1]")),
        }
    }
}

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A number in the file (a string is not one).
        let v = f64::deserialize(d)?;
        v.to_string().parse().map_err(de::Error::custom)
    }
}

/// A size: bytes, or text with a suffix (`512M`, `1G`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Size(pub u64);

impl FromStr for Size {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        parse_size(text).map(Size)
    }
}
from_scalar!(Size, "a size (a number of bytes, or text such as \"512M\")");

/// On or off: `on`/`off` on the command line, a boolean in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

impl Switch {
    pub fn on(self) -> bool {
        self == Switch::On
    }
}

impl<'de> Deserialize<'de> for Switch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(if bool::deserialize(d)? {
            Switch::On
        } else {
            Switch::Off
        })
    }
}

/// Explicit tiers, fastest first: node lists separated by ';' (`"0;1"`, `"0-1;2"`).
#[derive(Clone, Debug, PartialEq)]
pub struct Tiers(pub Vec<Vec<u32>>);

impl FromStr for Tiers {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        text.split(';')
            .map(|tier| {
                objtier_sys::topology::parse_list(tier)
                    .filter(|l| !l.is_empty())
                    .ok_or_else(|| {
                        format!("bad tier {tier:?} in {text:?}: use e.g. \"0;1\" or \"0-1;2\"")
                    })
            })
            .collect::<Result<_, _>>()
            .map(Tiers)
    }
}
from_text!(Tiers);

/// DAMON's region bounds, "MIN-MAX": DAMON itself refuses fewer than 3, or a minimum above the
/// maximum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Regions(pub u64, pub u64);

impl FromStr for Regions {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: expected MIN-MAX region counts, e.g. 10-1000");
        let (min, max) = s.trim().split_once('-').ok_or_else(bad)?;
        let (min, max): (u64, u64) = (
            min.trim().parse().map_err(|_| bad())?,
            max.trim().parse().map_err(|_| bad())?,
        );
        if min < 3 {
            return Err(format!("{s:?}: DAMON needs at least 3 regions (MIN >= 3)"));
        }
        if max < min {
            return Err(format!("{s:?}: MAX must be at least MIN"));
        }
        Ok(Regions(min, max))
    }
}
from_text!(Regions);

/// Mem-loads' load-latency threshold, in cycles: 1 to 65535.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cycles(pub u64);

impl FromStr for Cycles {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let v: u64 = text.trim().parse().map_err(|e| format!("{text:?}: {e}"))?;
        if !(1..=65535).contains(&v) {
            return Err(format!(
                "{v} is not in 1..=65535: the load latency threshold is 1 to 65535 cycles"
            ));
        }
        Ok(Cycles(v))
    }
}
from_scalar!(Cycles, "a number of cycles, 1 to 65535");

/// DAMON snapshots read per interval: 2 to 20.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Snapshots(pub u32);

impl FromStr for Snapshots {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let v: u32 = text.trim().parse().map_err(|e| format!("{text:?}: {e}"))?;
        if !(2..=20).contains(&v) {
            return Err(format!(
                "{v} is not in 2..=20: read 2 to 20 DAMON snapshots an interval"
            ));
        }
        Ok(Snapshots(v))
    }
}
from_scalar!(Snapshots, "a number of snapshots, 2 to 20");

/// How objects are ranked: apb, lru or fifo.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranking(pub Prioritization);

impl FromStr for Ranking {
    type Err = String;
    fn from_str(t: &str) -> Result<Self, String> {
        t.parse()
            .map(Ranking)
            .map_err(|_| format!("{t:?} is not apb, lru or fifo"))
    }
}
from_text!(Ranking);

/// The access source: auto, perf, damon, proc or none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Source(pub SourceChoice);

impl FromStr for Source {
    type Err = String;
    fn from_str(t: &str) -> Result<Self, String> {
        t.parse()
            .map(Source)
            .map_err(|_| format!("{t:?} is not auto, perf, damon, proc or none"))
    }
}
from_text!(Source);

/// Proactive placement: conservative (or on), `threshold[:SHARE]`, off; a boolean in the file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Proactive(pub SitePlacement);

impl FromStr for Proactive {
    type Err = String;
    fn from_str(t: &str) -> Result<Self, String> {
        t.parse().map(Proactive)
    }
}
from_scalar!(
    Proactive,
    "a boolean, or \"conservative\", \"threshold[:SHARE]\" or \"off\""
);

/// The triggers of a file: `trigger = "time:3, alloc"` or `trigger = ["time:5", "alloc:1G"]`.
pub fn triggers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TriggerSpec>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    let items: Vec<String> = match OneOrMany::deserialize(d)? {
        OneOrMany::One(t) => t.split(',').map(|s| s.trim().to_owned()).collect(),
        OneOrMany::Many(list) => list,
    };
    items
        .iter()
        .map(|t| t.parse().map_err(de::Error::custom))
        .collect()
}

/// Where `--metrics` listens: HOST:PORT or a Unix socket path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsAt(pub objtier_daemon::metrics::MetricsAddress);

impl FromStr for MetricsAt {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        text.parse().map(MetricsAt)
    }
}

from_text!(MetricsAt);
