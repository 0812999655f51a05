//! `objtier-fuzz TARGET`: one AFL++ target per decoder of untrusted input, TARGET one of
//! `objtier_daemon::fuzzing::TARGETS` or `config` (the daemon's TOML config file). Run by
//! bench/fuzz/run; the inputs it keeps are replayed by the ordinary tests.

// The CLI's config reader, as the CLI builds it (a binary crate cannot be depended on).
#[allow(dead_code)]
#[path = "../../crates/cli/src/daemon_options/mod.rs"]
mod daemon_options;

fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(mut options) = daemon_options::DaemonOptions::parse(text) {
            options.config = None; // a file naming another file: not this decoder's input
            let _ = options.config();
        }
    }
}

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let target: fn(&[u8]) = match name.as_str() {
        "config" => config,
        _ => match objtier_daemon::fuzzing::TARGETS.iter().find(|(n, _)| *n == name) {
            Some((_, target)) => *target,
            None => {
                eprintln!(
                    "usage: objtier-fuzz TARGET, one of: config, {}",
                    objtier_daemon::fuzzing::TARGETS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                std::process::exit(2);
            }
        },
    };
    afl::fuzz!(|data: &[u8]| target(data));
}
