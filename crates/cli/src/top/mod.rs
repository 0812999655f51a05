//! `objtier top`: a running daemon, live, in a terminal: its tiers (used, objtier's, free),
//! the attached processes with their bytes per tier and hottest sites, migrations per second,
//! and what the access source costs and attributes. Everything comes from the daemon's
//! `{"cmd":"status"}` answer, asked once per refresh ([`model`] turns two answers into the
//! view, [`ui`] draws it). `q` quits; when standard output is not a terminal, or with
//! `--once`, one snapshot is printed as text.

pub mod model;
pub mod ui;

use crate::launch;
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// What `objtier top --help` adds below the options (docs/report.md says the same).
pub const HELP: &str = "\
What it shows, all from the daemon's status answer (`objtier status --json`):
  the daemon and its access source; what the source costs (its share of one CPU, observations
  per second) and the share of the last interval's samples attributed to tracked objects;
  pages promoted, demoted and failed per second; each tier's capacity, used bytes (by
  anything), objtier's (the attached processes' tracked objects resident there) and free bytes;
  each attached process, largest first: its tracked bytes, resident bytes per tier, the share of
  them in tier 0, whether it is profiled, --no-migrate or placed, and its three hottest sites
  (its records' access estimates summed by site, else its largest sites).
Rates are over the last refresh (since the daemon started, for the first view and --once).
Keys: q, Esc or Ctrl-C quit. Works over ssh like any terminal program; when standard output is
not a terminal it prints one snapshot as text.";

#[derive(Args)]
pub struct TopArgs {
    /// Daemon socket (default: $OBJTIER_SOCKET, /run/objtier/objtier.sock as root, else per
    /// user).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// How often to refresh (e.g. 1s, 500ms) [default: the daemon's interval].
    #[arg(long, value_parser = crate::parse_duration)]
    interval: Option<Duration>,
    /// Print one snapshot as text and exit (what happens anyway when standard output is not a
    /// terminal); rates are then averages since the daemon started.
    #[arg(long)]
    once: bool,
}

/// What /proc calls a process (the daemon's status has pids only).
fn name_of(pid: u64) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn ask(socket: &Option<PathBuf>) -> anyhow::Result<serde_json::Value> {
    launch::ask_daemon(socket.clone(), &serde_json::json!({"cmd": "status"}))
}

pub fn run(args: TopArgs) -> anyhow::Result<ExitCode> {
    // The first answer decides: a daemon that is not there is an error, not an empty screen.
    let first = ask(&args.socket)?;
    if args.once || !std::io::stdout().is_terminal() {
        let text = ui::text(&model::view(&first, None, &name_of));
        use std::io::Write;
        return match std::io::stdout().write_all(text.as_bytes()) {
            // `objtier top | head` is not an error.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
            _ => Ok(ExitCode::SUCCESS),
        };
    }
    let refresh = args.interval.unwrap_or_else(|| {
        Duration::from_millis(
            first["daemon"]["interval_ms"]
                .as_u64()
                .unwrap_or(2000)
                .max(100),
        )
    });
    let mut terminal = ratatui::try_init()?;
    let result = live(&mut terminal, &args.socket, first, refresh);
    ratatui::restore();
    // The terminal as it was: the cursor shown too (ratatui hides it while drawing).
    let _ = crossterm::execute!(std::io::stdout(), crossterm::cursor::Show);
    result.map(|()| ExitCode::SUCCESS)
}

/// Refreshes until `q` (or Esc, or Ctrl-C: raw mode turns it into a key).
fn live(
    terminal: &mut ratatui::DefaultTerminal,
    socket: &Option<PathBuf>,
    first: serde_json::Value,
    refresh: Duration,
) -> anyhow::Result<()> {
    use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    let mut last = (first, Instant::now());
    let mut view = model::view(&last.0, None, &name_of);
    let mut error: Option<String> = None;
    let mut next = Instant::now() + refresh;
    loop {
        terminal.draw(|f| ui::draw(f, &view, error.as_deref(), refresh.as_secs_f64()))?;
        let wait = next.saturating_duration_since(Instant::now());
        if event::poll(wait)? {
            match event::read()? {
                Event::Key(key) if key.kind == KeyEventKind::Press => match key.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                        return Ok(())
                    }
                    _ => {}
                },
                // A resize or another key: draw again, the refresh stays due when it was.
                _ => {}
            }
            continue;
        }
        next = Instant::now() + refresh;
        match ask(socket) {
            Ok(now) => {
                let at = Instant::now();
                let seconds = at.duration_since(last.1).as_secs_f64();
                view = model::view(&now, Some((&last.0, seconds)), &name_of);
                last = (now, at);
                error = None;
            }
            // A daemon restarting: say so over the last view, and keep asking.
            Err(e) => error = Some(format!("{e:#}")),
        }
    }
}
