//! `objtier profile --source emulate`: the command under QEMU's user-mode emulation, with
//! objtier's plugin counting every miss of a modeled last-level cache on the objects that
//! libobjtier.so, preloaded inside the emulated program, reports to it. No daemon takes part:
//! the plugin writes a trace per process, replayed here into the profile
//! (docs/design/emulated-profiles.md says why it is built so).

mod cache;
mod preflight;
mod replay;

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// What `objtier profile --source emulate` was asked.
pub struct Request {
    pub command: Vec<String>,
    pub output: Option<PathBuf>,
    /// The profile's interval on the emulated clock (`--interval`, default 2 s = 2e9
    /// instructions).
    pub interval: Option<String>,
    pub lib: Option<PathBuf>,
    /// `--emulate-cache SIZE,WAYS` (default: the machine's last-level cache).
    pub cache: Option<String>,
}

pub fn profile(request: Request) -> anyhow::Result<ExitCode> {
    let qemu = preflight::find_qemu()?;
    let lib = crate::launch::find_library(request.lib.clone())?;
    let plugin = preflight::find_plugin(&lib)?;
    let launch = preflight::program(&request.command)?;
    let cache = match &request.cache {
        Some(spec) => cache::parse(spec)?,
        None => cache::of_machine(Path::new("/sys"))?,
    };
    let interval_ns = match &request.interval {
        Some(text) => crate::parse_duration(text)
            .map_err(|e| anyhow::anyhow!("--interval {text}: {e}"))?
            .as_nanos() as u64,
        None => 2_000_000_000,
    }
    .max(1_000_000);
    for (what, path) in [("libobjtier.so", &lib), ("the plugin", &plugin)] {
        if path.to_string_lossy().contains(',') {
            bail!(
                "{what}'s path {} holds a comma, which QEMU's options split on: install objtier \
                 elsewhere",
                path.display()
            );
        }
    }
    let channel = tempfile::Builder::new()
        .prefix("objtier-emulate.")
        .tempdir()
        .context("cannot make the emulation channel's directory")?;
    let dir = channel.path();
    let exe = std::fs::canonicalize(&launch.executable)
        .unwrap_or_else(|_| launch.executable.clone())
        .display()
        .to_string();
    let mut cmd = Command::new(&qemu);
    cmd.arg("-plugin").arg(format!(
        "{},dir={},cache_bytes={},cache_ways={},interval_ns={interval_ns}",
        plugin.display(),
        dir.display(),
        cache.bytes,
        cache.ways
    ));
    // The guest's environment is QEMU's, plus these: the preload must reach the program, not
    // QEMU itself.
    let mut preload = lib.display().to_string();
    if let Some(theirs) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload = format!("{preload}:{}", theirs.to_string_lossy());
    }
    cmd.env_remove("LD_PRELOAD");
    for (name, value) in [
        ("LD_PRELOAD", preload.as_str()),
        (objtier_wire::emulate::ENV, &dir.display().to_string()),
    ] {
        if value.contains(',') {
            bail!("{name}={value} holds a comma, which QEMU's -E splits on");
        }
        cmd.arg("-E").arg(format!("{name}={value}"));
    }
    cmd.arg("-0").arg(&launch.args[0]);
    cmd.arg(&launch.executable).args(&launch.args[1..]);
    eprintln!(
        "objtier: profiling {} under emulation (QEMU {}, a modeled {cache} last-level cache)",
        request.command[0],
        qemu.display()
    );
    let status = crate::profile_cmd::run_ignoring_interrupts(&mut cmd)
        .with_context(|| format!("cannot run {}", qemu.display()))?;
    let description = format!(
        "emulate: {} (QEMU user-mode emulation), every guest load and store through a modeled \
         {cache} last-level cache of 64-byte lines (hashed sets, LRU) per process, shared by \
         its threads; time is instructions retired (1 ns each)",
        qemu.display()
    );
    let replayed = replay::replay(
        dir,
        &replay::Context {
            command: request.command.clone(),
            exe,
            interval_ns,
            description,
        },
    )
    .context("cannot make the profile from the emulation's traces")?;
    let mut profile = replayed.profile;
    if profile.processes.is_empty() {
        bail!(
            "the emulated command left no trace (QEMU exited with {status}): the plugin did not \
             run; nothing was profiled"
        );
    }
    let native = natives(dir);
    if !native.is_empty() || !replayed.execed.is_empty() {
        let listed: Vec<String> = native
            .iter()
            .map(|(pid, exe)| format!("{pid} ({exe})"))
            .collect();
        eprintln!(
            "objtier: warning: {} process(es) of the command ran natively, outside the \
             emulation (a program that an emulated process exec'd: QEMU runs only the first \
             program){}; the profile covers the {} emulated process(es) it lists",
            native.len().max(replayed.execed.len()),
            if listed.is_empty() {
                String::new()
            } else {
                format!(": {}", listed.join(", "))
            },
            profile.processes.len()
        );
        profile.measurement.description += &format!(
            "; not covered (ran natively after an exec): {}",
            if listed.is_empty() {
                "the programs exec'd".to_string()
            } else {
                listed.join(", ")
            }
        );
    }
    if !replayed.cut_short.is_empty() {
        eprintln!(
            "objtier: warning: the emulation of process(es) {:?} ended without their exit (killed?): \
             the profile has what they did until then",
            replayed.cut_short
        );
    }
    let named = crate::symbolize::symbolize(&mut profile);
    let output = request
        .output
        .unwrap_or_else(|| PathBuf::from(format!("{}.profile.json", profile.program.name)));
    objtier_profile::write_text(&output, &profile.to_json())
        .with_context(|| format!("cannot write the profile {}", output.display()))?;
    crate::profile_cmd::print_summary(&profile, &output, named);
    Ok(crate::profile_cmd::exit_code(status))
}

/// The processes that ran natively: (pid, executable).
fn natives(dir: &Path) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let pid = name
                .strip_prefix(objtier_wire::emulate::NATIVE_PREFIX)?
                .parse()
                .ok()?;
            Some((pid, std::fs::read_to_string(e.path()).unwrap_or_default()))
        })
        .collect();
    out.sort();
    out
}
