//! The modeled last-level cache's size and associativity: `--emulate-cache SIZE,WAYS`, or the
//! machine's own last-level cache as sysfs describes cpu0's.

use anyhow::{bail, Context};
use std::path::Path;

/// A cache's bytes and ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSpec {
    pub bytes: u64,
    pub ways: usize,
}

impl std::fmt::Display for CacheSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (n, unit) = if self.bytes.is_multiple_of(1 << 20) {
            (self.bytes >> 20, "MiB")
        } else {
            (self.bytes >> 10, "KiB")
        };
        write!(f, "{n} {unit} {}-way", self.ways)
    }
}

/// Parses `SIZE,WAYS` (`2M,8`, `32MiB,16`, `1048576,4`).
pub fn parse(spec: &str) -> anyhow::Result<CacheSpec> {
    let (size, ways) = spec
        .split_once(',')
        .with_context(|| format!("--emulate-cache {spec}: want SIZE,WAYS (e.g. 2M,8)"))?;
    let bytes = objtier_policy::units::parse_size(size.trim())
        .map_err(|e| anyhow::anyhow!("--emulate-cache {spec}: {e}"))?;
    let ways: usize = ways
        .trim()
        .parse()
        .ok()
        .filter(|&w| w > 0)
        .with_context(|| format!("--emulate-cache {spec}: the ways must be a positive number"))?;
    check(CacheSpec { bytes, ways }).with_context(|| format!("--emulate-cache {spec}"))
}

fn check(spec: CacheSpec) -> anyhow::Result<CacheSpec> {
    if let Err(e) = objtier_cache_model::Cache::sets_for(spec.bytes, spec.ways) {
        bail!("{e}");
    }
    if spec.bytes > 4 << 30 {
        bail!("a modeled cache of more than 4 GiB is not a last-level cache");
    }
    Ok(spec)
}

/// The machine's last-level cache: the highest-level data or unified cache of cpu0 under
/// `sys_root` (`/sys` on a live system).
pub fn of_machine(sys_root: &Path) -> anyhow::Result<CacheSpec> {
    let dir = sys_root.join("devices/system/cpu/cpu0/cache");
    let read = |index: &Path, name: &str| -> Option<String> {
        std::fs::read_to_string(index.join(name))
            .ok()
            .map(|s| s.trim().to_string())
    };
    let mut best: Option<(u32, CacheSpec)> = None;
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let index = entry.path();
        if !entry.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        if read(&index, "type").as_deref() == Some("Instruction") {
            continue;
        }
        let (Some(level), Some(size), Some(ways)) = (
            read(&index, "level").and_then(|l| l.parse::<u32>().ok()),
            read(&index, "size"),
            read(&index, "ways_of_associativity").and_then(|w| w.parse::<usize>().ok()),
        ) else {
            continue;
        };
        let Ok(bytes) = objtier_policy::units::parse_size(&size) else {
            continue;
        };
        if ways == 0 || best.is_some_and(|(l, _)| l >= level) {
            continue;
        }
        best = Some((level, CacheSpec { bytes, ways }));
    }
    let Some((_, spec)) = best else {
        bail!(
            "{} describes no data cache of this machine (a VM may hide it): give the cache to \
             model with --emulate-cache SIZE,WAYS (e.g. 32M,16)",
            dir.display()
        );
    };
    check(spec).with_context(|| format!("the last-level cache {} describes", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(
            parse("2M,8").unwrap(),
            CacheSpec {
                bytes: 2 << 20,
                ways: 8
            }
        );
        assert_eq!(parse("300MiB, 20").unwrap().to_string(), "300 MiB 20-way");
        for (bad, says) in [
            ("2M", "SIZE,WAYS"),
            ("2M,0", "positive"),
            ("x,8", "--emulate-cache x,8"),
            ("1000,8", "cannot have"),
            ("8G,16", "4 GiB"),
        ] {
            let e = format!("{:#}", parse(bad).unwrap_err());
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_machines_last_level_cache() {
        let sys = tempfile::tempdir().unwrap();
        let cache = sys.path().join("devices/system/cpu/cpu0/cache");
        for (i, level, kind, size, ways) in [
            (0, "1", "Data", "48K", "12"),
            (1, "1", "Instruction", "32K", "8"),
            (2, "2", "Unified", "2048K", "16"),
            (3, "3", "Unified", "307200K", "20"),
        ] {
            let d = cache.join(format!("index{i}"));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [
                ("level", level),
                ("type", kind),
                ("size", size),
                ("ways_of_associativity", ways),
            ] {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
        }
        assert_eq!(
            of_machine(sys.path()).unwrap(),
            CacheSpec {
                bytes: 300 << 20,
                ways: 20
            }
        );
        let none = tempfile::tempdir().unwrap();
        let e = of_machine(none.path()).unwrap_err().to_string();
        assert!(e.contains("--emulate-cache"), "{e}");
    }
}
