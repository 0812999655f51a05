//! objtier-emulate-plugin: the QEMU TCG plugin of `objtier profile --source emulate`.
//!
//! ```text
//! qemu-x86_64 -plugin libobjtier_emulate.so,dir=DIR,cache_bytes=N,cache_ways=W,interval_ns=N PROGRAM...
//! ```
//!
//! Every guest data load and store goes through one modeled last-level cache per process
//! (`objtier-cache-model`, shared by the process's threads as a real one is by cores); each
//! miss goes to the object that `libobjtier.so`, preloaded in the guest, reported there
//! (`objtier-emulate`'s attribution). The library and the plugin meet in DIR, the emulation
//! channel (`objtier_wire::emulate`): the plugin keeps the emulated clock there (instructions
//! retired, counted as each translated block starts), and takes the library's events from a
//! ring there each time the library executes its drain marker. Each process writes
//! `DIR/trace.PID` (`objtier_emulate::trace`) and, at its end, `DIR/maps.PID` (its memory map,
//! for naming sites); a forked child starts its own trace; a process that `exec`s ends its
//! trace there (its new program runs natively, outside QEMU).

#[cfg(not(test))]
mod plugin;

/// The plugin's arguments.
#[derive(Debug, PartialEq)]
pub(crate) struct Config {
    pub dir: String,
    pub cache_bytes: u64,
    pub cache_ways: usize,
    pub interval_ns: u64,
}

pub(crate) fn parse_args(raw: &[String]) -> Result<Config, String> {
    let (mut dir, mut bytes, mut ways, mut interval) = (None, None, None, 2_000_000_000u64);
    for arg in raw {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("argument '{arg}' is not KEY=VALUE"))?;
        let number = || {
            value
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{key}={value}: want a positive whole number"))
        };
        match key {
            "dir" => dir = Some(value.to_string()),
            "cache_bytes" => bytes = Some(number()?),
            "cache_ways" => ways = Some(number()? as usize),
            "interval_ns" => interval = number()?,
            _ => {
                return Err(format!(
                    "unknown argument '{key}' (known: dir, cache_bytes, cache_ways, interval_ns)"
                ))
            }
        }
    }
    let config = Config {
        dir: dir.ok_or("missing dir=DIR (the emulation channel's directory)")?,
        cache_bytes: bytes.ok_or("missing cache_bytes=N (the modeled cache's size)")?,
        cache_ways: ways.ok_or("missing cache_ways=N (the modeled cache's associativity)")?,
        interval_ns: interval,
    };
    objtier_cache_model::Cache::sets_for(config.cache_bytes, config.cache_ways)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let c = parse_args(&args(&[
            "dir=/tmp/x",
            "cache_bytes=2097152",
            "cache_ways=8",
            "interval_ns=1000",
        ]))
        .unwrap();
        assert_eq!(
            c,
            Config {
                dir: "/tmp/x".into(),
                cache_bytes: 2 << 20,
                cache_ways: 8,
                interval_ns: 1000
            }
        );
        for (bad, says) in [
            (&["cache_bytes=64", "cache_ways=1"][..], "missing dir"),
            (&["dir=/x", "cache_ways=1"][..], "missing cache_bytes"),
            (
                &["dir=/x", "cache_bytes=64", "cache_ways=0"][..],
                "cache_ways=0",
            ),
            (
                &["dir=/x", "cache_bytes=100", "cache_ways=1"][..],
                "cannot have",
            ),
            (&["dir=/x", "colour=red"][..], "unknown argument 'colour'"),
            (&["dir"][..], "not KEY=VALUE"),
        ] {
            let e = parse_args(&args(bad)).err().unwrap();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
