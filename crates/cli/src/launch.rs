//! Starting what a command runs under: finding libobjtier.so, making sure a daemon listens
//! (starting one that exits when idle), the environment that preloads the library, and asking
//! the daemon a control request.

use anyhow::{bail, Context};
use clap::Args;
use objtier_daemon::config::default_socket_path;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where a command that runs a program finds its daemon and the library (`run`, `profile`).
#[derive(Args, Clone, Debug, Default)]
pub struct LaunchArgs {
    /// Daemon socket (default: $OBJTIER_SOCKET, /run/objtier/objtier.sock as root, else per user).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Path of libobjtier.so (default: beside this executable, then ../lib, then $OBJTIER_LIB).
    #[arg(long)]
    pub lib: Option<PathBuf>,
    /// Where a daemon started by this command logs (default: beside the socket, daemon.log).
    #[arg(long)]
    pub daemon_log: Option<PathBuf>,
}

impl LaunchArgs {
    pub fn socket(&self) -> PathBuf {
        self.socket.clone().unwrap_or_else(default_socket_path)
    }

    /// Starts a daemon on `socket` (with `extra` options) unless one listens there; true if
    /// this started it (and said so on stderr).
    pub fn ensure_daemon(&self, socket: &Path, extra: &[String]) -> anyhow::Result<bool> {
        if daemon_is_listening(socket) {
            return Ok(false);
        }
        let log = self.daemon_log.clone().unwrap_or_else(|| {
            socket
                .parent()
                .unwrap_or(Path::new("/tmp"))
                .join("daemon.log")
        });
        start_daemon(socket, &log, extra)?;
        eprintln!(
            "objtier: started a daemon on {} (log: {})",
            socket.display(),
            log.display()
        );
        Ok(true)
    }

    /// Asks `request` of the daemon on `socket` for a program about to run, starting one (with
    /// `extra` options) unless one listens there. A daemon that was exiting when idle can take
    /// the connection and close it unanswered (a run right after another one's end); then a new
    /// one is started and asked again. Returns the answer and whether this command started the
    /// daemon that gave it.
    pub fn ask_for_a_run(
        &self,
        socket: &Path,
        extra: &[String],
        request: &serde_json::Value,
    ) -> anyhow::Result<(serde_json::Value, bool)> {
        let mut tries = 0;
        loop {
            let started = self.ensure_daemon(socket, extra)?;
            match ask_daemon(Some(socket.to_path_buf()), request) {
                // A daemon exiting when idle: it took the request and closed unanswered, or
                // its socket went between the check and the ask. Again, until one serves.
                Err(e)
                    if tries < 3
                        && (e.downcast_ref::<Unanswered>().is_some()
                            || !daemon_is_listening(socket)) =>
                {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(200));
                }
                reply => return reply.map(|r| (r, started)),
            }
        }
    }
}

/// The daemon took a control request and closed the connection without an answer: it was
/// exiting.
#[derive(Debug)]
pub struct Unanswered;

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the daemon closed the connection without answering (was it exiting?)")
    }
}

impl std::error::Error for Unanswered {}

/// Finds libobjtier.so: --lib, $OBJTIER_LIB, beside the executable, ../lib, then system dirs.
pub fn find_library(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let mut candidates = Vec::new();
    candidates.extend(explicit);
    candidates.extend(std::env::var_os("OBJTIER_LIB").map(PathBuf::from));
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join("libobjtier.so"));
            candidates.push(dir.join("../lib/libobjtier.so"));
            // The Debian package's private library directory (it is preloaded, never linked).
            candidates.push(dir.join("../lib/objtier/libobjtier.so"));
        }
    }
    candidates.push("/usr/local/lib/libobjtier.so".into());
    candidates.push("/usr/lib/libobjtier.so".into());
    for candidate in &candidates {
        if candidate.is_file() {
            return candidate
                .canonicalize()
                .with_context(|| format!("cannot resolve {}", candidate.display()));
        }
    }
    bail!(
        "cannot find libobjtier.so (looked in {}); build it with `cargo build --release` or \
         pass --lib PATH",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

pub fn daemon_is_listening(socket: &Path) -> bool {
    UnixStream::connect(socket).is_ok()
}

/// Starts `objtier daemon --exit-when-idle` (with `extra` options) in the background and waits
/// until it listens.
pub fn start_daemon(socket: &Path, log: &Path, extra: &[String]) -> anyhow::Result<()> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open the daemon log {}", log.display()))?;
    let exe = std::env::current_exe().context("cannot find the objtier executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("daemon")
        .arg("--socket")
        .arg(socket)
        .arg("--exit-when-idle")
        // `run` execs the program under its own pid: the daemon can tell when it is gone,
        // even if it never allocated enough to attach.
        .arg("--exit-with-pid")
        .arg(std::process::id().to_string())
        .args(extra)
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file);
    // SAFETY: setsid in the child before exec: detach from the terminal's process group so a
    // Ctrl-C aimed at the program does not take the daemon down mid-migration.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the objtier daemon")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if daemon_is_listening(socket) {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            if daemon_is_listening(socket) {
                return Ok(()); // lost a race with another `objtier run`; theirs serves us
            }
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            bail!(
                "the daemon exited ({status}) before listening; its log ({}) ends with:\n{}",
                log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!(
        "the daemon did not start listening on {} within 10 s",
        socket.display()
    )
}

/// Sends one JSON request to the daemon's control socket and returns its answer.
pub fn ask_daemon(
    socket: Option<PathBuf>,
    request: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let socket = socket.unwrap_or_else(default_socket_path);
    let stream = UnixStream::connect(&socket).map_err(|e| {
        anyhow::anyhow!(
            "no objtier daemon is listening on {} ({e}); start one with `objtier daemon` or \
             `objtier run -- PROGRAM`, or point --socket/OBJTIER_SOCKET at it",
            socket.display()
        )
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut out = &stream;
    out.write_all(&objtier_wire::CONTROL_MAGIC.to_le_bytes())?;
    serde_json::to_writer(&mut out, request)?;
    out.write_all(b"\n")?;
    let mut line = String::new();
    let read = BufReader::new(&stream)
        .read_line(&mut line)
        .context("the daemon did not answer")?;
    if read == 0 {
        return Err(Unanswered.into());
    }
    let reply: serde_json::Value =
        serde_json::from_str(&line).context("the daemon's answer is not JSON")?;
    if let Some(err) = reply.get("error").and_then(|e| e.as_str()) {
        bail!("the daemon said: {err}");
    }
    Ok(reply)
}

/// Sets up `cmd` to run under libobjtier.so at `lib` (before anything already in
/// `LD_PRELOAD`), attaching to the daemon on `socket`.
pub fn preload(cmd: &mut Command, lib: PathBuf, socket: &Path) {
    let mut preload = lib.into_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(" ");
        preload.push(existing);
    }
    cmd.env("LD_PRELOAD", preload)
        .env(objtier_wire::SOCKET_ENV, socket);
}

/// The request that tells a daemon this process (or the program it execs, under the same pid)
/// will attach soon: a daemon that exits when idle waits for it.
pub fn hold_request() -> serde_json::Value {
    serde_json::json!({"cmd": "hold"})
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixListener;

    /// A daemon that takes the first request and closes unanswered (it was exiting when idle)
    /// is asked again, and the second answer is the one returned; nothing new is started, as
    /// one still listens.
    #[test]
    fn a_request_an_exiting_daemon_drops_is_asked_again() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("objtier.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            let mut requests = 0;
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let mut got = Vec::new();
                let mut buf = [0u8; 256];
                // A probe connects and closes; a request ends with a newline.
                while !got.ends_with(b"\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                if got.is_empty() {
                    continue;
                }
                requests += 1;
                if requests == 2 {
                    stream.write_all(b"{\"held\": 7}\n").unwrap();
                    return requests;
                }
            }
            requests
        });
        let launch = LaunchArgs::default();
        let (reply, started) = launch.ask_for_a_run(&socket, &[], &hold_request()).unwrap();
        assert_eq!(reply["held"], 7);
        assert!(!started, "a daemon listened all along");
        assert_eq!(server.join().unwrap(), 2);
    }
}
