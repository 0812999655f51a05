//! `objtier profile`: run a command as `objtier run` does, with the daemon recording every
//! allocation site of every process of it (forks, exec'd children and MPI ranks that keep the
//! preload), and write the profile; `objtier profile merge` combines profiles of one program.

use crate::launch;
use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use objtier_profile::merge::{merge, MergeBy};
use objtier_profile::{Profile, SiteKind};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ProfileArgs {
    #[command(subcommand)]
    merge: Option<ProfileCmd>,
    /// Where to write the profile [default: PROGRAM.profile.json in the current directory].
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// The daemon's access source, for a daemon this command starts: auto, perf, damon, proc
    /// or none (a daemon already running keeps its own; a different one here is an error);
    /// or emulate: the command under QEMU's user-mode emulation, every miss of a modeled
    /// last-level cache counted (no daemon; x86-64, dynamically linked programs).
    #[arg(long)]
    source: Option<String>,
    /// With --source emulate: the modeled cache, SIZE,WAYS (e.g. 2M,8) [default: this
    /// machine's last-level cache].
    #[arg(long, value_name = "SIZE,WAYS")]
    emulate_cache: Option<String>,
    /// The daemon's interval, for a daemon this command starts (e.g. 1s) [default: 2s]: the
    /// profile's time series has one row per interval.
    #[arg(long)]
    interval: Option<String>,
    /// Profile, but never move the command's pages (the kernel's own tiering, if on, goes on).
    #[arg(long)]
    observe_only: bool,
    /// Write the profile even when some processes of the command are still running after it
    /// exited (they are left out once this long has passed) [default: 10s].
    #[arg(long, default_value = "10s", value_parser = crate::parse_duration)]
    wait: Duration,
    #[command(flatten)]
    launch: launch::LaunchArgs,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true)]
    command: Vec<String>,
}

#[derive(Subcommand)]
enum ProfileCmd {
    /// Merge profiles of one program (several inputs, MPI ranks, cluster nodes) into one.
    Merge(MergeArgs),
}

#[derive(Args)]
struct MergeArgs {
    /// The profiles to merge.
    #[arg(required = true, num_args = 2..)]
    profiles: Vec<PathBuf>,
    /// Where to write the merged profile.
    #[arg(short, long)]
    output: PathBuf,
    /// sum: every count added, as if the runs had shared one machine (ranks of a node);
    /// mean: averaged, a typical run (what a placement for each rank should come from).
    #[arg(long, default_value = "sum")]
    by: MergeBy,
}

pub fn run(args: ProfileArgs) -> anyhow::Result<ExitCode> {
    if let Some(ProfileCmd::Merge(m)) = args.merge {
        return merge_profiles(m);
    }
    if args.source.as_deref() == Some("emulate") {
        return crate::emulate::profile(crate::emulate::Request {
            command: args.command,
            output: args.output,
            interval: args.interval,
            lib: args.launch.lib,
            cache: args.emulate_cache,
        });
    }
    if args.emulate_cache.is_some() {
        bail!("--emulate-cache is for --source emulate");
    }
    let socket = args.launch.socket();
    let lib = launch::find_library(args.launch.lib.clone())?;
    let mut extra = Vec::new();
    if let Some(source) = &args.source {
        extra.extend(["--source".to_string(), source.clone()]);
    }
    if let Some(interval) = &args.interval {
        extra.extend(["--interval".to_string(), interval.clone()]);
    }
    extra.extend([
        "--damon-snapshots".to_string(),
        full_damon_coverage(args.interval.as_deref())?.to_string(),
    ]);
    let request = serde_json::json!({
        "cmd": "profile-start",
        "command": args.command,
        "exe": crate::program::resolve(&args.command[0], std::env::var_os("PATH").as_deref())
            .and_then(|p| std::fs::canonicalize(p).ok())
            .map(|p| p.display().to_string()),
        "observe_only": args.observe_only,
    });
    let (session, started) = args
        .launch
        .ask_for_a_run(&socket, &extra, &request)
        .context("a profile needs a daemon to record it: cannot open a profile session")?;
    let token = session["token"]
        .as_u64()
        .context("the daemon's answer has no token")?;
    let source = session["source"].as_str().unwrap_or("?").to_string();
    if let Some(wanted) = args.source.as_deref().filter(|&w| w != "auto" && !started) {
        if wanted != source {
            bail!(
                "the daemon on {} samples with {source}, not {wanted}: stop it, or give this \
                 profile another --socket (a daemon of its own is started there)",
                socket.display()
            );
        }
    }
    if source == "none" {
        eprintln!(
            "objtier: warning: the daemon has no access source (see `objtier doctor`): the \
             profile records allocations and lifetimes, no accesses"
        );
    }
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    launch::preload(&mut cmd, lib, &socket);
    cmd.env("OBJTIER_PROFILE", token.to_string());
    if args.observe_only {
        cmd.env("OBJTIER_NO_MIGRATE", "1");
    }
    let status = run_ignoring_interrupts(&mut cmd)
        .with_context(|| format!("cannot run {:?}", args.command[0]))?;
    let mut profile = finish(&socket, token, args.wait)?;
    let named = crate::symbolize::symbolize(&mut profile);
    let output = args
        .output
        .unwrap_or_else(|| PathBuf::from(format!("{}.profile.json", profile.program.name)));
    objtier_profile::write_text(&output, &profile.to_json())
        .with_context(|| format!("cannot write the profile {}", output.display()))?;
    print_summary(&profile, &output, named);
    Ok(exit_code(status))
}

/// Runs `cmd` to its end. Ctrl-C is the command's: this process stays to write what it did.
pub(crate) fn run_ignoring_interrupts(
    cmd: &mut Command,
) -> std::io::Result<std::process::ExitStatus> {
    // SAFETY: ignoring SIGINT and SIGQUIT in this process; the child gets the default back.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    use std::os::unix::process::CommandExt;
    // SAFETY: restoring default dispositions in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd.status()
}

/// Asks the daemon for the session's profile until its processes have all detached, or `wait`
/// has passed (then without those still attached, which are named).
fn finish(socket: &Path, token: u64, wait: Duration) -> anyhow::Result<Profile> {
    let deadline = Instant::now() + wait;
    let mut force = false;
    loop {
        let reply = launch::ask_daemon(
            Some(socket.to_path_buf()),
            &serde_json::json!({"cmd": "profile-finish", "token": token, "force": force}),
        )
        .context("cannot finish the profile")?;
        if let Some(profile) = reply.get("profile") {
            let profile: Profile = serde_json::from_value(profile.clone())
                .context("the daemon sent a profile this objtier cannot read")?;
            return Ok(profile);
        }
        let pending = reply["pending"].as_array().cloned().unwrap_or_default();
        if Instant::now() >= deadline {
            eprintln!(
                "objtier: warning: process(es) {} of the command still run; the profile leaves \
                 out what they do from now on",
                pending
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            force = true;
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub(crate) fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        _ => ExitCode::from(1),
    }
}

pub(crate) fn print_summary(profile: &Profile, output: &Path, named: usize) {
    if profile.processes.is_empty() {
        eprintln!(
            "objtier: warning: no process of the command attached to the daemon (none made an \
             allocation of 4 KiB or more, or the preload could not reach it: see `objtier run`'s \
             warnings): the profile {} is empty",
            output.display()
        );
        return;
    }
    let total = profile.total_accesses();
    let sites = profile
        .sites
        .iter()
        .filter(|s| s.kind == SiteKind::Site)
        .count();
    eprintln!(
        "objtier: profile of {} ({} process(es), {:.1} s, {} intervals) written to {}",
        profile.program.name,
        profile.processes.len(),
        profile.duration_s,
        profile.intervals.len(),
        output.display()
    );
    let share = profile
        .measurement
        .attributed_share
        .map_or("-".to_string(), |s| format!("{:.1} %", 100.0 * s));
    eprintln!(
        "objtier: {sites} allocation sites, peak footprint {:.1} MiB; source {}, {share} of its \
         accesses fell on tracked objects; {named} frames named",
        profile.peak_footprint_bytes as f64 / (1 << 20) as f64,
        profile.source.name(),
    );
    for site in profile.sites.iter().take(5).filter(|s| s.accesses > 0.0) {
        let at = match site.kind {
            SiteKind::SmallObjects => "(small objects)".to_string(),
            SiteKind::Unknown => "(site unknown)".to_string(),
            SiteKind::Site => site
                .symbols
                .first()
                .cloned()
                .flatten()
                .or_else(|| site.frames.first().cloned())
                .unwrap_or_default(),
        };
        eprintln!(
            "  {:5.1} % of accesses, {:8.1} MiB peak, {} allocations: {at}",
            if total > 0.0 {
                100.0 * site.accesses / total
            } else {
                0.0
            },
            site.peak_live_bytes as f64 / (1 << 20) as f64,
            site.allocations
        );
    }
}

fn merge_profiles(args: MergeArgs) -> anyhow::Result<ExitCode> {
    let profiles = args
        .profiles
        .iter()
        .map(|f| Ok((f.clone(), Profile::load(f)?)))
        .collect::<Result<Vec<_>, objtier_profile::FormatError>>()?;
    let (merged, warnings) = merge(&profiles, args.by)?;
    for w in warnings {
        eprintln!("objtier: warning: {w}");
    }
    objtier_profile::write_text(&args.output, &merged.to_json())
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    eprintln!(
        "objtier: {} profiles of {} merged by {} into {} ({} sites)",
        profiles.len(),
        merged.program.name,
        match args.by {
            MergeBy::Sum => "sum",
            MergeBy::Mean => "mean",
        },
        args.output.display(),
        merged.sites.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// DAMON snapshots an interval that read every aggregation (the daemon's 100 ms) of it, for a daemon this
/// command starts: a profile is read once, so it buys all of DAMON's samples with the CPU an
/// online daemon saves (4 snapshots a second missed hpcc's hottest table in its train run).
fn full_damon_coverage(interval: Option<&str>) -> anyhow::Result<u32> {
    let interval = match interval {
        Some(text) => crate::parse_duration(text).map_err(anyhow::Error::msg)?,
        None => Duration::from_secs(2),
    };
    let aggregation = objtier_sys::damon::DamonAttrs::default().aggr_us as u128;
    Ok((interval.as_micros() / aggregation).clamp(2, 20) as u32)
}

#[cfg(test)]
mod tests {
    use super::full_damon_coverage;

    #[test]
    fn a_profiles_daemon_reads_every_aggregation_of_an_interval() {
        assert_eq!(full_damon_coverage(None).unwrap(), 20);
        assert_eq!(full_damon_coverage(Some("1s")).unwrap(), 10);
        assert_eq!(full_damon_coverage(Some("100ms")).unwrap(), 2);
        assert_eq!(full_damon_coverage(Some("10s")).unwrap(), 20);
        assert!(full_damon_coverage(Some("soon")).is_err());
    }
}
