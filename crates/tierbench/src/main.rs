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

use hotcold::{Event, FirstTouch};

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
    /// N objects, the last K hot: random accesses to the hot ones, reporting the share that
    /// hit the fast tier.
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
    /// Seed for the access pattern (each thread derives its own stream from it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Access threads in the hot loop.
    #[arg(long, default_value_t = 1, value_parser = parse_positive)]
    threads: usize,
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
    if args.hot > args.objects {
        let message = format!("--hot {} is more than --objects {}", args.hot, args.objects);
        Cli::command()
            .error(ErrorKind::ValueValidation, message)
            .exit();
    }
    if args.objects.checked_mul(args.size).is_none() {
        let message = format!(
            "--objects {} x --size {} bytes overflows the address space",
            args.objects, args.size
        );
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
        seed: args.seed,
        threads: args.threads,
    };
    let hot_bytes = args.hot * args.size;
    let all_bytes = args.objects * args.size;
    let mut stdout = io::stdout().lock();
    hotcold::run(&config, &topology, &mut |event| {
        if args.json {
            serde_json::to_writer(&mut stdout, &event)?;
            writeln!(stdout)?;
        } else {
            writeln!(stdout, "{}", describe(&event, hot_bytes, all_bytes))?;
        }
        stdout.flush()?;
        Ok(())
    })
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
            threads,
            seed,
            setup_seconds,
            hot_fast_bytes,
            all_fast_bytes,
        } => {
            let first_touch = first_touch.as_str();
            [
                format!("setup: {objects} objects x {size_bytes} bytes, last {hot} hot"),
                format!("fast nodes {fast_nodes:?}, slow node {slow_node}"),
                format!("first touch {first_touch}, {threads} thread(s), seed {seed}"),
                format!("took {setup_seconds:.3} s"),
                format!("on fast nodes: hot {hot_fast_bytes} of {hot_bytes} bytes"),
                format!("all {all_fast_bytes} of {all_bytes} bytes"),
            ]
            .join("; ")
        }
        Event::Tick {
            t,
            accesses,
            fast_share,
            hot_fast_bytes,
        } => [
            format!("tick t={t:.2} s: {accesses} accesses"),
            format!("fast share {}", share(fast_share)),
            format!("hot on fast nodes {hot_fast_bytes} of {hot_bytes} bytes"),
        ]
        .join("; "),
        Event::Summary {
            seconds,
            accesses,
            fast_share,
            fast_share_last,
            hot_fast_bytes,
            all_fast_bytes,
        } => [
            format!("summary: {seconds} s, {accesses} accesses"),
            format!(
                "fast share {} (last tick {})",
                share(fast_share),
                share(fast_share_last)
            ),
            format!("on fast nodes: hot {hot_fast_bytes} of {hot_bytes} bytes"),
            format!("all {all_fast_bytes} of {all_bytes} bytes"),
        ]
        .join("; "),
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
}
