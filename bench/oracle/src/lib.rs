//! objtier-oracle: a QEMU TCG plugin that counts the guest's loads and stores per NUMA node.
//!
//! It is the evaluation bench's ground truth (bench/eval): all guest memory is equally fast under
//! emulation, so placement is judged by how many accesses the fast node served, counted outside
//! the program and outside objtier. Counting is scoped to windows that the guest opens and closes
//! by executing a marker instruction (`bench/oracle/mark.c`, see [`count::Mark`]); everything
//! every vCPU touches in a window counts (the program, objtier's daemon, the kernel's migration
//! copies), which is the cost a user pays.
//!
//! ```text
//! qemu-system-x86_64 ... -plugin libobjtier_oracle.so,nodes=1024:2048,out=oracle.jsonl[,period_ms=1000]
//! ```
//!
//! `nodes` gives the nodes' sizes in node order (MiB, or with K/M/G), `layout` what QEMU reports
//! for an address (`ramblock` before QEMU 8.2, the default with plugin API 1; `physical` after;
//! see [`count::Layout`]), `out` the file to append
//! JSON lines to: `{"event": "start", ...}` when a window opens, `{"event": "snapshot", ...}`
//! every `period_ms` while it is open (counts so far), `{"event": "window", ...}` when it closes
//! (or when QEMU exits with it open, `"complete": false`).
//!
//! Each node's counts come in all and user-mode (`user_loads`, `user_stores`: programs' own
//! accesses, without the kernel's). Only data accesses are counted (instruction fetches and page-table walks are not reported to
//! plugins). The per-access callback is registered for every instruction from boot on (QEMU's
//! API has no cheap way to add it later); outside a window it returns at once.

pub mod count;
#[cfg(not(test))]
mod plugin;

use std::time::Duration;

use count::{Layout, NodeMap};

pub(crate) struct Config {
    map: NodeMap,
    out: String,
    period: Duration,
}

/// `api_version` is the plugin API version QEMU reports; it picks the default `layout`.
pub(crate) fn parse_args(raw: &[String], api_version: i64) -> Result<Config, String> {
    let (mut nodes, mut out, mut period) = (None, None, Duration::from_secs(1));
    let mut layout = if api_version < 2 {
        Layout::RamBlock
    } else {
        Layout::Physical
    };
    for arg in raw {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("argument '{arg}' is not KEY=VALUE"))?;
        match key {
            "nodes" => nodes = Some(value.to_string()),
            "layout" => {
                layout = match value {
                    "ramblock" => Layout::RamBlock,
                    "physical" => Layout::Physical,
                    _ => {
                        return Err(format!(
                            "layout={value}: want ramblock (QEMU < 8.2) or physical"
                        ))
                    }
                }
            }
            "out" => out = Some(value.to_string()),
            "period_ms" => {
                let ms: u64 = value.parse().ok().filter(|&ms| ms > 0).ok_or_else(|| {
                    format!("period_ms={value}: want a positive number of milliseconds")
                })?;
                period = Duration::from_millis(ms);
            }
            _ => {
                return Err(format!(
                    "unknown argument '{key}' (known: nodes, out, period_ms, layout)"
                ))
            }
        }
    }
    let nodes =
        nodes.ok_or("missing nodes=SIZE:SIZE[...] (the NUMA nodes' sizes in node order)")?;
    Ok(Config {
        map: NodeMap::parse(&nodes, layout)?,
        out: out.ok_or("missing out=FILE (where to append the counts)")?,
        period,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn arguments() {
        let c = parse_args(&args(&["nodes=1G:2G", "out=/tmp/x", "period_ms=250"]), 1).unwrap();
        assert_eq!(c.map, NodeMap::parse("1G:2G", Layout::RamBlock).unwrap());
        let c = parse_args(&args(&["nodes=1G:2G", "out=/x", "layout=physical"]), 1).unwrap();
        assert_eq!(c.map, NodeMap::parse("1G:2G", Layout::Physical).unwrap());
        let c = parse_args(&args(&["nodes=1G:2G", "out=/tmp/x", "period_ms=250"]), 4).unwrap();
        assert_eq!(
            (c.map.nodes(), c.out.as_str(), c.period),
            (2, "/tmp/x", Duration::from_millis(250))
        );
        for (bad, says) in [
            (&["out=/x"][..], "missing nodes"),
            (&["nodes=1:2"][..], "missing out"),
            (
                &["nodes=1:2", "out=/x", "colour=red"][..],
                "unknown argument 'colour'",
            ),
            (&["nodes=1:2", "out=/x", "period_ms=0"][..], "period_ms=0"),
            (&["nodes"][..], "not KEY=VALUE"),
            (&["nodes=1:2", "out=/x", "layout=odd"][..], "layout=odd"),
        ] {
            let e = parse_args(&args(bad), 1).err().unwrap();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
