//! tierbench: workloads that know which of their objects are hot and measure, with the kernel's
//! own page-location queries, where their accesses land.
//!
//! It is the ground truth for objtier's tests and benchmarks, so it never asks objtier anything:
//! it allocates with the C `malloc` (objtier's, under `LD_PRELOAD`), and judges placement only by
//! `move_pages(2)` status queries against the kernel's memory tiers. See `hotcold` for the design.
//!
//! Output is one JSON object per line with `--json` (flushed per line, for a harness to follow),
//! readable lines otherwise. Exit status: 0 success, 1 runtime failure, 2 bad arguments.

mod hotcold;
mod numa;

use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use clap::{error::ErrorKind, Args, CommandFactory, Parser, Subcommand};

use hotcold::{Event, FirstTouch, Phase, PhaseHot, Sites, Stream};

#[derive(Parser)]
#[command(
    name = "tierbench",
    version,
    about = "Workloads with known hot objects that measure where their accesses land"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// N objects, the last K hot (K others after --phase-after): random accesses to the hot
    /// ones, reporting the share that hit the fast tier.
    Hotcold(HotColdArgs),
}

#[derive(Args)]
struct HotColdArgs {
    /// Number of objects to allocate.
    #[arg(long, value_parser = parse_positive)]
    objects: usize,
    /// Bytes per object: plain bytes or with a binary suffix K, M, G, KiB, MiB, GiB (at least 8).
    #[arg(long, value_parser = parse_size_bytes)]
    size: usize,
    /// How many of the objects are hot: the last K allocated.
    #[arg(long, value_parser = parse_positive)]
    hot: usize,
    /// Length of the hot loop, in seconds of access time (fractions allowed).
    #[arg(long, value_parser = parse_seconds, allow_negative_numbers = true)]
    seconds: f64,
    /// Print one JSON object per line instead of readable text.
    #[arg(long)]
    json: bool,
    /// Where objects are first placed: `slow` prefers the slowest tier's first node while
    /// allocating.
    #[arg(long, value_enum, default_value_t = FirstTouch::Default)]
    first_touch: FirstTouch,
    /// Allocation sites (malloc's call paths): `shared`, one for every object; `distinct`, the
    /// cold objects (all but the last --hot) through one function and the hot ones through
    /// another, so that a per-site profile can tell hot from cold. The hot objects are still
    /// allocated and touched last. With --phase-after, the hot set after the change comes from
    /// the cold site. `distinct` needs at least one cold object.
    #[arg(long, value_enum, default_value_t = Sites::Shared)]
    sites: Sites,
    /// Seed for the access pattern (each thread derives its own stream from it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Access threads in the hot loop.
    #[arg(long, default_value_t = 1, value_parser = parse_positive)]
    threads: usize,
    /// Phase change: after this many seconds of the hot loop (less than --seconds), the hot
    /// set moves to K other objects (--phase-hot); later ticks measure the new hot set.
    #[arg(long, value_parser = parse_seconds, allow_negative_numbers = true)]
    phase_after: Option<f64>,
    /// Which objects are hot after the phase change: `before-last` (the K allocated just
    /// before the last K), `first` (the first K), `slowest` (the K with the fewest bytes on
    /// fast nodes at the change), or an index I (objects I..I+K, which must end before the
    /// last K). Needs --objects at least 2 x --hot.
    #[arg(long, requires = "phase_after", default_value = "before-last")]
    phase_hot: PhaseHot,
    /// Open the evaluation oracle's counting window (bench/oracle) just before the hot loop and
    /// close it just after, so that setting up the objects is not counted. On x86-64 only; the
    /// markers are NOPs outside the oracle.
    #[arg(long)]
    oracle_window: bool,
    /// A stream of objects touched once: at every tick one more object of this size (a size
    /// like --size) is written front to back and never touched again.
    #[arg(long, value_parser = parse_size_bytes)]
    stream: Option<usize>,
    /// Stream objects kept live; the oldest is freed when one more is written.
    #[arg(long, requires = "stream", default_value_t = 8, value_parser = parse_positive)]
    stream_keep: usize,
}

impl HotColdArgs {
    /// What the arguments say together that each alone cannot: an error message, if any.
    fn validate(&self) -> Result<(), String> {
        if self.hot > self.objects {
            return Err(format!(
                "--hot {} is more than --objects {}",
                self.hot, self.objects
            ));
        }
        if self.sites == Sites::Distinct && self.hot == self.objects {
            return Err(format!(
                "--sites distinct needs a cold object to allocate from the cold site: --hot {} \
                 is all of --objects {}",
                self.hot, self.objects
            ));
        }
        if self.objects.checked_mul(self.size).is_none() {
            return Err(format!(
                "--objects {} x --size {} bytes overflows the address space",
                self.objects, self.size
            ));
        }
        if let Some(phase) = self.phase() {
            if phase.after_seconds >= self.seconds {
                return Err(format!(
                    "--phase-after {} is not before the end of the hot loop (--seconds {})",
                    phase.after_seconds, self.seconds
                ));
            }
            hotcold::check_phase_hot(self.objects, self.hot, phase.hot)?;
        }
        Ok(())
    }

    fn stream(&self) -> Option<Stream> {
        self.stream.map(|bytes| Stream {
            bytes,
            keep: self.stream_keep,
        })
    }

    fn phase(&self) -> Option<Phase> {
        self.phase_after.map(|after_seconds| Phase {
            after_seconds,
            hot: self.phase_hot,
        })
    }
}

fn parse_positive(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(value) => Ok(value),
        Err(_) => Err(format!("{text:?} is not a whole number")),
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 => Ok(seconds),
        _ => Err(format!("{text:?} is not a positive number of seconds")),
    }
}

/// Parses `4096`, `16K`, `16M`, `1G`, `16KiB`, `16MiB`, `1GiB` (suffixes binary, any case).
fn parse_size_bytes(text: &str) -> Result<usize, String> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    let multiplier: usize = match suffix.to_ascii_lowercase().as_str() {
        "" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "{text:?} is not a size: use a whole number of bytes, optionally followed by \
                 K, M, G, KiB, MiB or GiB (binary)"
            ))
        }
    };
    let count: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number of bytes"))?;
    let size_bytes = count
        .checked_mul(multiplier)
        .ok_or_else(|| format!("{text:?} is too large"))?;
    if size_bytes < 8 {
        return Err(format!(
            "{text:?}: objects must be at least 8 bytes (one 8-byte access)"
        ));
    }
    Ok(size_bytes)
}

fn main() -> ExitCode {
    let Command::Hotcold(args) = Cli::parse().command;
    if let Err(message) = args.validate() {
        Cli::command()
            .error(ErrorKind::ValueValidation, message)
            .exit();
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`| head`): nobody is left to tell.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tierbench: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io_err| io_err.kind() == io::ErrorKind::BrokenPipe)
    })
}

fn run(args: &HotColdArgs) -> Result<()> {
    let topology = numa::Topology::discover(Path::new("/sys"))?;
    let config = hotcold::Config {
        objects: args.objects,
        object_size_bytes: args.size,
        hot_objects: args.hot,
        seconds: args.seconds,
        first_touch: args.first_touch,
        sites: args.sites,
        seed: args.seed,
        threads: args.threads,
        phase: args.phase(),
        oracle_window: args.oracle_window,
        stream: args.stream(),
    };
    let hot_bytes = args.hot * args.size;
    let all_bytes = args.objects * args.size;
    let mut stdout = io::stdout().lock();
    hotcold::run(&config, &topology, &mut |event| {
        if args.json {
            // Each line says when it was written, so that a judge can line the run up with
            // other clocks: the daemon's log, the tiered VM's record of emulator stalls.
            let unix_time = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            serde_json::to_writer(
                &mut stdout,
                &Line {
                    event: &event,
                    unix_time,
                },
            )?;
            writeln!(stdout)?;
        } else {
            writeln!(stdout, "{}", describe(&event, hot_bytes, all_bytes))?;
        }
        stdout.flush()?;
        Ok(())
    })
}

/// One `--json` line: the event's own fields, then when it was written (seconds since the Unix
/// epoch).
#[derive(serde::Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    event: &'a Event,
    unix_time: f64,
}

fn describe(event: &Event, hot_bytes: usize, all_bytes: usize) -> String {
    let share = |share: &Option<f64>| share.map_or("n/a".into(), |share| format!("{share:.3}"));
    match event {
        Event::Setup {
            objects,
            size_bytes,
            hot,
            fast_nodes,
            slow_node,
            first_touch,
            sites,
            threads,
            seed,
            setup_seconds,
            hot_fast_bytes,
            all_fast_bytes,
            addresses: _,
            phase_after,
            phase_hot,
        } => {
            let first_touch = first_touch.as_str();
            let mut parts = vec![
                format!("setup: {objects} objects x {size_bytes} bytes, last {hot} hot"),
                format!("fast nodes {fast_nodes:?}, slow node {slow_node}"),
                format!(
                    "first touch {first_touch}, sites {}, {threads} thread(s), seed {seed}",
                    sites.as_str()
                ),
                format!("took {setup_seconds:.3} s"),
                format!("on fast nodes: hot {hot_fast_bytes} of {hot_bytes} bytes"),
                format!("all {all_fast_bytes} of {all_bytes} bytes"),
            ];
            if let (Some(after), Some(which)) = (phase_after, phase_hot) {
                parts.push(format!("after {after} s the hot set moves ({which})"));
            }
            parts.join("; ")
        }
        Event::Phase {
            t,
            objects,
            hot_fast_bytes,
        } => [
            format!("phase t={t:.2} s: objects {objects:?} are hot now"),
            format!("on fast nodes {hot_fast_bytes} of {hot_bytes} bytes"),
        ]
        .join("; "),
        Event::Tick {
            t,
            accesses,
            fast_share,
            hot_fast_bytes,
            stream_fast_bytes,
            stream_live_bytes,
        } => {
            let mut parts = vec![
                format!("tick t={t:.2} s: {accesses} accesses"),
                format!("fast share {}", share(fast_share)),
                format!("hot on fast nodes {hot_fast_bytes} of {hot_bytes} bytes"),
            ];
            if let (Some(fast), Some(live)) = (stream_fast_bytes, stream_live_bytes) {
                parts.push(format!("stream on fast nodes {fast} of {live} bytes"));
            }
            parts.join("; ")
        }
        Event::Summary {
            seconds,
            accesses,
            fast_share,
            fast_share_last,
            hot_fast_bytes,
            all_fast_bytes,
            stream_bytes,
        } => {
            let mut parts = vec![
                format!("summary: {seconds} s, {accesses} accesses"),
                format!(
                    "fast share {} (last tick {})",
                    share(fast_share),
                    share(fast_share_last)
                ),
                format!("on fast nodes: hot {hot_fast_bytes} of {hot_bytes} bytes"),
                format!("all {all_fast_bytes} of {all_bytes} bytes"),
            ];
            if let Some(stream) = stream_bytes {
                parts.push(format!("stream written {stream} bytes"));
            }
            parts.join("; ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size_bytes("4096"), Ok(4096));
        assert_eq!(parse_size_bytes("16K"), Ok(16 << 10));
        assert_eq!(parse_size_bytes("16M"), Ok(16 << 20));
        assert_eq!(parse_size_bytes("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size_bytes("2g"), Ok(2 << 30));
        assert_eq!(parse_size_bytes("1GiB"), Ok(1 << 30));
        for bad in [
            "",
            "M",
            "16MB",
            "16 M",
            "-1",
            "1.5M",
            "4",
            "99999999999999999999G",
        ] {
            assert!(parse_size_bytes(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn cli_contract_parses() {
        let cli = Cli::try_parse_from([
            "tierbench",
            "hotcold",
            "--objects",
            "8",
            "--size",
            "16M",
            "--hot",
            "2",
            "--seconds",
            "3",
            "--json",
            "--first-touch",
            "slow",
        ])
        .unwrap();
        let Command::Hotcold(args) = cli.command;
        assert_eq!(
            (args.objects, args.size, args.hot, args.seconds),
            (8, 16 << 20, 2, 3.0)
        );
        assert!(args.json && args.first_touch == FirstTouch::Slow && args.threads == 1);
        assert!(Cli::try_parse_from([
            "tierbench",
            "hotcold",
            "--objects",
            "0",
            "--size",
            "8",
            "--hot",
            "1",
            "--seconds",
            "1"
        ])
        .is_err());
    }

    fn hotcold_args(extra: &[&str]) -> Result<HotColdArgs, clap::Error> {
        let base = [
            "tierbench",
            "hotcold",
            "--objects",
            "12",
            "--size",
            "64M",
            "--hot",
            "2",
            "--seconds",
            "30",
        ];
        let cli = Cli::try_parse_from(base.iter().chain(extra))?;
        let Command::Hotcold(args) = cli.command;
        Ok(args)
    }

    #[test]
    fn no_phase_unless_asked() {
        let args = hotcold_args(&[]).unwrap();
        assert_eq!(args.phase(), None);
        assert_eq!(args.validate(), Ok(()));
        // --phase-hot alone would silently do nothing: refused.
        assert!(hotcold_args(&["--phase-hot", "first"]).is_err());
    }

    #[test]
    fn sites_parse_and_validate() {
        let args = hotcold_args(&[]).unwrap();
        assert_eq!(args.sites, Sites::Shared);
        let args = hotcold_args(&["--sites", "shared"]).unwrap();
        assert_eq!(args.sites, Sites::Shared);
        let args = hotcold_args(&["--sites", "distinct"]).unwrap();
        assert_eq!(args.sites, Sites::Distinct);
        assert_eq!(args.validate(), Ok(()));
        for bad in ["", "Distinct", "separate", "2"] {
            assert!(
                hotcold_args(&["--sites", bad]).is_err(),
                "--sites {bad:?} should be rejected"
            );
        }
        // All objects hot: nothing would come from the cold site. Shared does not care.
        let mut all_hot = hotcold_args(&["--sites", "distinct"]).unwrap();
        all_hot.hot = all_hot.objects;
        assert!(all_hot.validate().unwrap_err().contains("--sites distinct"));
        all_hot.sites = Sites::Shared;
        assert_eq!(all_hot.validate(), Ok(()));
        // One cold object is enough; a phase change works as with shared sites.
        let mut one_cold = hotcold_args(&["--sites", "distinct"]).unwrap();
        one_cold.hot = one_cold.objects - 1;
        assert_eq!(one_cold.validate(), Ok(()));
        let phased = hotcold_args(&[
            "--sites",
            "distinct",
            "--phase-after",
            "5",
            "--phase-hot",
            "first",
        ])
        .unwrap();
        assert_eq!(phased.validate(), Ok(()));
    }

    #[test]
    fn stream_options_parse() {
        assert_eq!(hotcold_args(&[]).unwrap().stream(), None);
        let args = hotcold_args(&["--stream", "16M"]).unwrap();
        assert_eq!(
            args.stream(),
            Some(Stream {
                bytes: 16 << 20,
                keep: 8
            })
        );
        let args = hotcold_args(&["--stream", "1M", "--stream-keep", "3"]).unwrap();
        assert_eq!(args.stream().unwrap().keep, 3);
        // --stream-keep alone would do nothing; a stream of nothing is no stream.
        assert!(hotcold_args(&["--stream-keep", "3"]).is_err());
        assert!(hotcold_args(&["--stream", "1M", "--stream-keep", "0"]).is_err());
        assert!(hotcold_args(&["--stream", "0"]).is_err());
    }

    #[test]
    fn phase_options_parse_and_validate() {
        let args = hotcold_args(&["--phase-after", "12.5"]).unwrap();
        assert_eq!(
            args.phase(),
            Some(Phase {
                after_seconds: 12.5,
                hot: PhaseHot::BeforeLast
            })
        );
        assert_eq!(args.validate(), Ok(()));
        let args = hotcold_args(&["--phase-after", "5", "--phase-hot", "first"]).unwrap();
        assert_eq!(args.phase().unwrap().hot, PhaseHot::First);
        for bad in ["0", "-1", "nan", "inf", "x"] {
            assert!(
                hotcold_args(&["--phase-after", bad]).is_err(),
                "--phase-after {bad} should be rejected"
            );
        }
        // Objects 9 and 10 would overlap the initial hot set (10, 11); 8 and 9 do not.
        let args = hotcold_args(&["--phase-after", "5", "--phase-hot", "9"]).unwrap();
        assert_eq!(args.phase().unwrap().hot, PhaseHot::From(9));
        assert!(args.validate().unwrap_err().contains("--phase-hot 9"));
        let args = hotcold_args(&["--phase-after", "5", "--phase-hot", "8"]).unwrap();
        assert_eq!(args.validate(), Ok(()));
        let args = hotcold_args(&["--phase-after", "5", "--phase-hot", "slowest"]).unwrap();
        assert_eq!(args.phase().unwrap().hot, PhaseHot::Slowest);
        assert!(hotcold_args(&["--phase-after", "5", "--phase-hot", "middle"]).is_err());
        // The change must fall inside the hot loop...
        let late = hotcold_args(&["--phase-after", "30"]).unwrap();
        assert!(late.validate().unwrap_err().contains("--phase-after 30"));
        // ...and the two hot sets must not overlap.
        let mut crowded = hotcold_args(&["--phase-after", "5"]).unwrap();
        crowded.hot = 7;
        assert!(crowded
            .validate()
            .unwrap_err()
            .contains("two disjoint hot sets"));
        crowded.hot = 6;
        assert_eq!(crowded.validate(), Ok(()));
    }
}
