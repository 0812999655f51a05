//! `objtier`: run a program under object tiering, run the daemon, or ask it what it is doing.
//!
//! The CLI is thin: `run` makes sure a daemon is listening and then `exec`s the program with
//! libobjtier.so preloaded (and a placement, `--placement`); `daemon` hands its flags to
//! `objtier-daemon`; `status` asks a daemon over its socket. The offline workflow has a file
//! each: `profile` (record a run per allocation site), `advise` (a placement from profiles),
//! and `placement` (what `run --placement` checks before it runs); `report` shows where a
//! program's memory went, from profiles or a live process, and `top` watches a daemon live.

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use daemon_options::values::{parse_duration, parse_size};
use daemon_options::DaemonOptions;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

mod advise_cmd;
mod daemon_options;
mod doctor;
mod emulate;
mod generate;
mod launch;
mod logging;
mod placement;
mod profile_cmd;
mod program;
mod report;
mod report_cmd;
mod symbolize;
mod top;

#[derive(Parser)]
#[command(
    name = "objtier",
    version,
    about = "Object-level memory tiering for Linux"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a program with objtier: preload libobjtier.so, starting a daemon if none is running.
    Run(RunArgs),
    /// Run the daemon in the foreground (serves every attached process; root for DAMON).
    Daemon(Box<DaemonOptions>),
    /// Show the daemon's tiers and attached processes.
    Status(StatusArgs),
    /// Choose the tier new objects of an allocation site start in, for an attached process.
    Place(PlaceArgs),
    /// Check this machine: NUMA nodes and tiers, page migration, and which access sources work.
    Doctor(DoctorArgs),
    /// Run a program and record, per allocation site, what its objects did (or `profile merge`).
    Profile(Box<profile_cmd::ProfileArgs>),
    /// Advise a placement from profiles: which tier each allocation site's objects start in.
    Advise(Box<advise_cmd::AdviseArgs>),
    /// See where memory goes: a report (one HTML file, or JSON, or CSV) of profiles, or of a
    /// live process of a running daemon (--pid).
    #[command(after_long_help = report_cmd::HELP)]
    Report(Box<report_cmd::ReportArgs>),
    /// Watch a running daemon live: tiers, attached processes and their hottest sites,
    /// migrations per second, the access source's cost (`q` quits).
    #[command(after_long_help = top::HELP)]
    Top(top::TopArgs),
    /// Print a shell completion script (e.g. `objtier completions bash >
    /// /etc/bash_completion.d/objtier`).
    Completions(generate::CompletionsArgs),
    /// Write the man pages (objtier.1 and one per subcommand) into a directory.
    #[command(hide = true)]
    Manpages(generate::ManpagesArgs),
}

#[derive(Args)]
struct PlaceArgs {
    /// The attached process (see `objtier status`).
    #[arg(long)]
    pid: u32,
    /// The site id, as `objtier status --json` lists it (e.g. 0x1f3a...).
    #[arg(long)]
    site: String,
    /// Tier new objects of the site start in (0 = fastest).
    #[arg(long, conflicts_with = "clear", required_unless_present = "clear")]
    tier: Option<u32>,
    /// Forget the site's placement: new objects start wherever first touch puts them.
    #[arg(long)]
    clear: bool,
    /// Daemon socket (default: $OBJTIER_SOCKET, /run/objtier/objtier.sock as root, else per user).
    #[arg(long)]
    socket: Option<PathBuf>,
}

#[derive(Args)]
struct DoctorArgs {
    /// Print the findings as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RunArgs {
    /// Cap on how much of the fast tier objtier may fill for this program (e.g. 256M, 1G).
    #[arg(long, value_parser = parse_size)]
    fast_capacity: Option<u64>,
    /// Priority of this program among attached processes (higher wins the fast tier).
    #[arg(long, allow_hyphen_values = true)]
    priority: Option<i32>,
    #[command(flatten)]
    launch: launch::LaunchArgs,
    /// Do not start a daemon; attach only if one is already running.
    #[arg(long)]
    no_daemon: bool,
    /// A placement (`objtier advise`): each listed allocation site's objects are born in its
    /// tier (within its budget there, the rest one tier down); unlisted sites go to its
    /// fallback tier (none: where first touch puts them).
    #[arg(long, value_name = "FILE")]
    placement: Option<PathBuf>,
    /// Never move the program's pages: objects stay where they were born (static placement).
    #[arg(long)]
    no_migrate: bool,
    /// The program and its arguments (after `--`, or after the first non-option word).
    #[arg(required = true, trailing_var_arg = true)]
    command: Vec<String>,
}

#[derive(Args)]
struct StatusArgs {
    /// Print the daemon's JSON reply as is.
    #[arg(long)]
    json: bool,
    /// Daemon socket.
    #[arg(long)]
    socket: Option<PathBuf>,
}

/// What `objtier --version` says: the release, the wire version the library and the daemon
/// must share, and the commit it was built from (build.rs).
fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        format!(
            "{} (wire version {}, build {})",
            env!("CARGO_PKG_VERSION"),
            objtier_wire::WIRE_VERSION,
            env!("OBJTIER_BUILD")
        )
    })
}

/// The command line's definition, with its version.
fn command() -> clap::Command {
    Cli::command().version(version())
}

fn main() -> ExitCode {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Cmd::Run(args) => run(args),
        Cmd::Daemon(args) => daemon(*args),
        Cmd::Status(args) => status(args),
        Cmd::Place(args) => place(args),
        Cmd::Doctor(args) => doctor::run(args.json),
        Cmd::Profile(args) => profile_cmd::run(*args),
        Cmd::Advise(args) => advise_cmd::run(*args),
        Cmd::Report(args) => report_cmd::run(*args),
        Cmd::Top(args) => top::run(args),
        Cmd::Completions(args) => {
            generate::completions(args, command()).map(|()| ExitCode::SUCCESS)
        }
        Cmd::Manpages(args) => generate::manpages(args, command()).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("objtier: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn daemon(options: DaemonOptions) -> anyhow::Result<ExitCode> {
    let layered = options.clone().layered()?;
    logging::init(layered.log_format.unwrap_or_default());
    let config = layered.config()?;
    // At SIGHUP the same command line is read again, with the file as it is then.
    let reload: objtier_daemon::config::Reloader = Box::new(move || options.clone().config());
    objtier_daemon::run_reloadable(config, Some(reload))?;
    Ok(ExitCode::SUCCESS)
}

fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let socket = args.launch.socket();
    let lib = launch::find_library(args.launch.lib.clone())?;
    // A program the preload cannot reach still runs, as the user asked, but they hear why
    // nothing tiers it.
    if let Some(file) = program::resolve(&args.command[0], std::env::var_os("PATH").as_deref()) {
        // SAFETY: getuid and getgid have no failure mode.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        if let Some(why) = program::unreachable(&file, uid, gid) {
            eprintln!("objtier: warning: {}", why.warning(&file));
        }
    }
    // The program runs either way: without a daemon it simply is not tiered. (A daemon too old
    // to know the hold request is no reason to fail.)
    if args.no_daemon {
        let _ = launch::ask_daemon(Some(socket.clone()), &launch::hold_request());
    } else if let Err(e) = args
        .launch
        .ask_for_a_run(&socket, &[], &launch::hold_request())
    {
        if e.downcast_ref::<launch::Unanswered>().is_some() || !launch::daemon_is_listening(&socket)
        {
            eprintln!("objtier: warning: running without tiering: {e:#}");
        }
    }
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    launch::preload(&mut cmd, lib, &socket);
    if let Some(file) = &args.placement {
        let (path, fallback) = placement::check(file, &args.command)?;
        cmd.env("OBJTIER_PLACEMENT", path);
        if let Some(tier) = fallback {
            placement::prefer_fallback(tier);
        }
    }
    if args.no_migrate {
        cmd.env("OBJTIER_NO_MIGRATE", "1");
    }
    if let Some(cap) = args.fast_capacity {
        cmd.env("OBJTIER_FAST_CAPACITY", cap.to_string());
    }
    if let Some(priority) = args.priority {
        cmd.env("OBJTIER_PRIORITY", priority.to_string());
    }
    let err = cmd.exec();
    eprintln!("objtier: cannot run {:?}: {err}", args.command[0]);
    Ok(ExitCode::from(
        if err.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        },
    ))
}

fn place(args: PlaceArgs) -> anyhow::Result<ExitCode> {
    let request = serde_json::json!({
        "cmd": "place",
        "pid": args.pid,
        "site": args.site,
        "tier": if args.clear { None } else { args.tier },
    });
    let reply = launch::ask_daemon(args.socket, &request)?;
    match reply["tier"].as_u64() {
        Some(t) => println!(
            "pid {}: new objects of site {} start in tier {t}",
            args.pid,
            reply["site"].as_str().unwrap_or("?")
        ),
        None => println!(
            "pid {}: site {} has no placement",
            args.pid,
            reply["site"].as_str().unwrap_or("?")
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let reply = launch::ask_daemon(args.socket, &serde_json::json!({"cmd": "status"}))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reply)?);
    } else {
        print_status(&reply);
    }
    Ok(ExitCode::SUCCESS)
}

fn mib(v: &serde_json::Value) -> String {
    v.as_u64().map_or("-".into(), |b| {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    })
}

/// What the access source has cost since the daemon started (`daemon.source_cost`), so that
/// its overhead is seen next to what it buys; `None` from a daemon that does not report it.
fn source_cost_line(d: &serde_json::Value) -> Option<String> {
    let cost = &d["source_cost"];
    let cpu = cost["cpu_seconds"].as_f64()?;
    let uptime = d["uptime_seconds"].as_f64().unwrap_or(0.0);
    let share = if uptime > 0.0 {
        format!(" ({:.2} % of one CPU)", 100.0 * cpu / uptime)
    } else {
        String::new()
    };
    let lost = match cost["lost"].as_u64() {
        Some(n) if n > 0 => format!(", {n} samples lost"),
        _ => String::new(),
    };
    Some(format!(
        "source cost: {cpu:.2} s CPU since start{share}, {} observations{lost}",
        cost["observations"]
    ))
}

/// The share of the last interval's sampled accesses that fell in tracked objects
/// (`attributed_share`): a low one means the source mostly sees memory objtier does not
/// track. `None` before the first interval, or when nothing was sampled.
fn attributed_share_line(last: &serde_json::Value) -> Option<String> {
    let share = last["attributed_share"].as_f64()?;
    Some(format!(
        "sampled accesses attributed to objects at the last interval: {:.1} %",
        100.0 * share
    ))
}

fn print_status(reply: &serde_json::Value) {
    let d = &reply["daemon"];
    let startup = match d["startup_interval_ms"].as_u64() {
        Some(ms) => format!(
            " ({ms} ms for a process's first {} s)",
            d["startup_window_seconds"].as_f64().unwrap_or(0.0)
        ),
        None => String::new(),
    };
    println!(
        "daemon pid {} up {:.0}s, source {}, interval {} ms{startup}, {} prioritization",
        d["pid"],
        d["uptime_seconds"].as_f64().unwrap_or(0.0),
        d["source_detail"],
        d["interval_ms"],
        d["prioritization"].as_str().unwrap_or("?")
    );
    println!(
        "policy: {}; proactive placement {}",
        d["policy"].as_str().unwrap_or("?"),
        d["proactive"].as_str().unwrap_or("?")
    );
    for line in [
        source_cost_line(d),
        attributed_share_line(&d["last_interval"]),
    ]
    .into_iter()
    .flatten()
    {
        println!("{line}");
    }
    let t = &d["totals"];
    println!(
        "migrated: {} pages promoted, {} demoted, {} failed, in {} of {} intervals",
        t["promoted_pages"],
        t["demoted_pages"],
        t["failed_pages"],
        t["enforcements"],
        t["intervals"]
    );
    if t["huge_page_splits"].as_u64().is_some_and(|n| n > 0) {
        println!(
            "huge pages split to move part of them: {}",
            t["huge_page_splits"]
        );
    }
    let last = &d["last_interval"];
    if let Some(reasons) = last["trigger_reasons"].as_array().filter(|r| !r.is_empty()) {
        let reasons: Vec<&str> = reasons.iter().filter_map(|r| r.as_str()).collect();
        println!("last migration because: {}", reasons.join("; "));
    }
    if last["record_parts"].as_u64().is_some_and(|n| n > 0) {
        println!(
            "last plan: {} record(s) placed in part, {} in the faster tier",
            last["record_parts"],
            mib(&last["record_part_bytes"])
        );
    }
    println!("tiers (fastest first):");
    let cache_is_room = reply["daemon"]["reclaim_cache"].as_bool().unwrap_or(false);
    for tier in reply["tiers"].as_array().into_iter().flatten() {
        println!(
            "  tier {} nodes {}: capacity {}, free {}, cold file cache {}{}, objtier budget {}",
            tier["tier"],
            tier["nodes"],
            mib(&tier["capacity_bytes"]),
            mib(&tier["free_bytes"]),
            mib(&tier["cold_cache_bytes"]),
            if cache_is_room { " (room)" } else { "" },
            mib(&tier["budget_bytes"])
        );
    }
    let processes = reply["processes"].as_array().cloned().unwrap_or_default();
    println!("{} attached process(es):", processes.len());
    for p in processes {
        let per_tier: Vec<String> = p["bytes_per_tier"]
            .as_array()
            .into_iter()
            .flatten()
            .map(mib)
            .collect();
        println!(
            "  pid {}: {} objects, {} tracked; resident per tier at the last interval [{}]",
            p["pid"],
            p["objects"],
            mib(&p["tracked_bytes"]),
            per_tier.join(", ")
        );
        for site in p["sites"].as_array().into_iter().flatten().take(5) {
            let innermost = site["frames"][0].as_str().unwrap_or(
                if site["site"].as_str() == Some("0x0000000000000000") {
                    "(small objects: the allocator's blocks)"
                } else {
                    "(frames not yet known)"
                },
            );
            let tier = site["start_tier"].as_u64().map_or(String::new(), |t| {
                format!(
                    ", starts in tier {t} ({})",
                    site["placed_by"].as_str().unwrap_or("?")
                )
            });
            println!(
                "    site {}: {} objects, {}{tier}; at {innermost}",
                site["site"].as_str().unwrap_or("?"),
                site["objects"],
                mib(&site["bytes"]),
            );
        }
        for site in p["short_lived_sites"].as_array().into_iter().flatten() {
            println!(
                "    site {}: short-lived{} (one object in {} reported); at {}",
                site["site"].as_str().unwrap_or("?"),
                if site["remembered"] == true {
                    ", remembered from an earlier run"
                } else {
                    ""
                },
                objtier_wire::SHORT_LIVED_SAMPLE,
                site["frames"][0]
                    .as_str()
                    .unwrap_or("(frames not yet known)")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines read the status JSON as `objtier_daemon::status` writes it.
    #[test]
    fn status_shows_the_attributed_share_and_the_source_cost() {
        use objtier_daemon::interval::IntervalReport;
        use objtier_daemon::source::SourceCost;
        let cost = SourceCost {
            cpu_seconds: 1.5,
            observations: 4200,
            lost: 0,
        };
        let last = IntervalReport {
            attributed_share: Some(0.875),
            ..Default::default()
        };
        let d = serde_json::json!({
            "uptime_seconds": 300.0,
            "source_cost": cost,
            "last_interval": last,
        });
        assert_eq!(
            source_cost_line(&d).unwrap(),
            "source cost: 1.50 s CPU since start (0.50 % of one CPU), 4200 observations"
        );
        assert_eq!(
            attributed_share_line(&d["last_interval"]).unwrap(),
            "sampled accesses attributed to objects at the last interval: 87.5 %"
        );
        let lossy = serde_json::json!({"source_cost": SourceCost { lost: 7, ..cost }});
        assert!(source_cost_line(&lossy)
            .unwrap()
            .ends_with("observations, 7 samples lost"));
        // Nothing sampled yet, or no interval yet: no line.
        let unsampled = serde_json::json!(IntervalReport::default());
        assert_eq!(attributed_share_line(&unsampled), None);
        assert_eq!(attributed_share_line(&serde_json::Value::Null), None);
        assert_eq!(source_cost_line(&serde_json::json!({})), None);
    }

    /// `--version` names the release, the wire version and the build.
    #[test]
    fn the_version_names_the_wire_and_the_build() {
        let v = command().render_version();
        assert!(
            v.starts_with(concat!("objtier ", env!("CARGO_PKG_VERSION"))),
            "{v}"
        );
        assert!(
            v.contains(&format!("wire version {}", objtier_wire::WIRE_VERSION)),
            "{v}"
        );
        assert!(v.contains(concat!("build ", env!("OBJTIER_BUILD"))), "{v}");
    }
}
