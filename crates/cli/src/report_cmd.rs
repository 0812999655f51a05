//! `objtier report`: where a program's memory went, from profiles (`objtier profile`, any
//! source) or from a live process of a running daemon (`--pid`), as one self-contained HTML
//! file, JSON or CSV. The figures are `report::build`'s; this file only gathers the profiles
//! and writes what was asked.

use crate::launch;
use crate::report::{self, Input, LiveSnapshot};
use anyhow::{bail, Context};
use clap::Args;
use objtier_profile::Profile;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What `objtier report --help` adds below the options: what the report shows and how far to
/// trust it (docs/report.md says the same at more length).
pub const HELP: &str = "\
The report's sections, each saying which source measured it and how precisely:
  1 Summary: program, command, run length, source and the share of what it sampled that fell
    on tracked objects, peak footprint, tiers and their capacities.
  2 Fast memory needed: for a fast tier of 1 to 100 % of the peak footprint (the slow tier
    unbounded), the share of all accesses it would serve under each advise algorithm
    (hotset, knapsack, multi-knapsack, bandwidth: `objtier advise --fast-capacity N%` at
    every N); where the run had tiers, the share it actually got (each interval's accesses
    of each site weighted by the share of its bytes in tier 0 at the interval's end).
  3 Top sites: call paths, bytes, accesses per MiB, lifetimes, loads and stores where the
    source tells them apart, and each tier's top sites.
  4 Over time: accesses per site and interval, bytes per tier, live bytes per site, and
    promotions and demotions derived from each site's bytes per tier between two intervals
    (approximate: moves within an interval are not seen; ping-pong is not recorded).
  5 Pages: touches per page and reuse times, for sources with page detail (none today: an
    emulated profile, --source emulate, will have it).
  6 Latency by tier: perf profiles' sample weights (PEBS load latency) only.

What an access is depends on the source: perf counts samples of misses, DAMON and proc count
pages found accessed (where the program touches memory, not where it misses the cache).
docs/report.md explains every figure and how far to trust it.

Examples:
  objtier report app.profile.json                  # app.report.html
  objtier report base.json observed.json -o cmp.html  # side by side
  objtier report --pid 4242                        # a process the daemon is tiering now
  objtier report app.profile.json --csv tables/    # the figures for scripts";

#[derive(Args)]
pub struct ReportArgs {
    /// Profiles (`objtier profile`, any source); several are shown side by side, each labelled
    /// by its file name.
    #[arg(required_unless_present = "pid", conflicts_with = "pid")]
    profiles: Vec<PathBuf>,
    /// Report on a process attached to a running daemon: what the daemon has seen of it so
    /// far (its recording, if it was started under `objtier profile`; else its live objects
    /// and their access estimates).
    #[arg(long)]
    pid: Option<u32>,
    /// Daemon socket, with --pid (default: $OBJTIER_SOCKET, /run/objtier/objtier.sock as root,
    /// else per user).
    #[arg(long, requires = "pid")]
    socket: Option<PathBuf>,
    /// Where to write the report [default: PROGRAM.report.html; with --json, standard output].
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Write the figures as JSON instead of HTML.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Write the figures as CSV tables into DIR (one file per table) instead of HTML.
    #[arg(long, value_name = "DIR", conflicts_with = "output")]
    csv: Option<PathBuf>,
}

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let inputs = match args.pid {
        Some(pid) => vec![live_input(pid, args.socket.clone())?],
        None => load_inputs(&args.profiles)?,
    };
    let reports: Vec<report::Report> = inputs.iter().map(report::build).collect();
    let result = if let Some(dir) = &args.csv {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the directory {}", dir.display()))?;
        let tables = report::csv::tables(&reports);
        for (name, text) in &tables {
            let file = dir.join(name);
            objtier_profile::write_text(&file, text)
                .with_context(|| format!("cannot write {}", file.display()))?;
        }
        eprintln!(
            "objtier: {} tables written to {}",
            tables.len(),
            dir.display()
        );
        Ok(())
    } else if args.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "format": "objtier-report",
            "version": 1,
            "profiles": reports,
        }))? + "\n";
        let file = args.output.clone().unwrap_or_else(|| PathBuf::from("-"));
        objtier_profile::write_text(&file, &text)
    } else {
        let file = args
            .output
            .clone()
            .unwrap_or_else(|| default_output(&inputs, args.pid));
        let html = report::html::document(&reports)
            .map_err(|e| anyhow::anyhow!("cannot draw the report: {e}"))?;
        let written = objtier_profile::write_text(&file, &html);
        if written.is_ok() {
            eprintln!("objtier: report written to {}", file.display());
        }
        written.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot write {}: {e}", file.display()))
        })
    };
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // `objtier report --json | head` is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e.into()),
    }
}

/// `PROGRAM.report.html` (`PROGRAM-PID.report.html` for a live process), in the current
/// directory.
fn default_output(inputs: &[Input], pid: Option<u32>) -> PathBuf {
    let name = inputs
        .first()
        .map(|i| i.profile.program.name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "objtier".to_string());
    match pid {
        Some(pid) => PathBuf::from(format!("{name}-{pid}.report.html")),
        None => PathBuf::from(format!("{name}.report.html")),
    }
}

/// The profiles, each labelled by its file name (its path, where two share a name).
fn load_inputs(files: &[PathBuf]) -> anyhow::Result<Vec<Input>> {
    let name = |f: &Path| {
        f.file_name().map_or_else(
            || f.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let mut inputs = Vec::new();
    for file in files {
        let profile = Profile::load(file)?;
        check_not_empty(file, &profile)?;
        let shared = files.iter().filter(|f| name(f) == name(file)).count() > 1;
        inputs.push(Input {
            label: if shared {
                file.display().to_string()
            } else {
                name(file)
            },
            profile,
            live: None,
        });
    }
    Ok(inputs)
}

/// A profile with no site has nothing to report: say why that happens and what to do.
fn check_not_empty(file: &Path, profile: &Profile) -> anyhow::Result<()> {
    if profile.sites.is_empty() {
        bail!(
            "{}: the profile has no sites: no allocation of its program was tracked (it did not \
             run under libobjtier.so, is statically linked, or allocated nothing before it \
             exited); profile it again with `objtier profile -o FILE -- PROGRAM`, and check \
             the library reaches it with `objtier run -- PROGRAM`",
            file.display()
        );
    }
    Ok(())
}

/// What the daemon has seen of `pid` so far, as a profile.
fn live_input(pid: u32, socket: Option<PathBuf>) -> anyhow::Result<Input> {
    let request = serde_json::json!({"cmd": "profile-snapshot", "pid": pid});
    let reply = launch::ask_daemon(socket, &request).map_err(|e| {
        let e = format!("{e:#}");
        if e.contains("not attached") {
            anyhow::anyhow!(
                "cannot report on pid {pid}: {e}; only processes running under objtier can be \
                 reported on live: start the program with `objtier run -- PROGRAM` (or `objtier \
                 profile` to record it from its start), or report on a profile file"
            )
        } else {
            anyhow::anyhow!("cannot report on pid {pid}: {e}")
        }
    })?;
    let label = format!("pid {pid}");
    let text = serde_json::to_string(&reply["profile"])?;
    let mut profile = Profile::from_json(Path::new(&label), &text).context(
        "the daemon's snapshot is not a profile this objtier reads: is the daemon another version?",
    )?;
    crate::symbolize::symbolize(&mut profile);
    check_not_empty(Path::new(&label), &profile).map_err(|_| {
        anyhow::anyhow!(
            "pid {pid} has no tracked objects yet: nothing to report; try again once it has \
             allocated (objects of 4 KiB and more are tracked per site)"
        )
    })?;
    Ok(Input {
        label,
        profile,
        live: Some(LiveSnapshot {
            pid,
            profiled: reply["profiled"].as_bool().unwrap_or(false),
        }),
    })
}
