//! Where the daemon's log goes and in what form (`--log-format`): plain text, with colour only
//! on a terminal (a log file or a pipe gets no escape codes); journald's own protocol, with
//! every structured field kept, when systemd connected stderr to the journal; or one JSON
//! object a line for log pipelines.

use clap::ValueEnum;
use serde::Deserialize;
use std::io::IsTerminal;
use std::os::fd::AsRawFd;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// The log's form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// journald when stderr is the journal (a systemd service), else text.
    #[default]
    Auto,
    /// Human-readable lines; colour only when stderr is a terminal.
    Text,
    /// One JSON object a line (timestamp, level, target, message and the fields).
    Json,
    /// journald's native protocol, each field a journal field (`journalctl -o verbose`).
    Journald,
}

/// Whether stderr is the journal: systemd sets `$JOURNAL_STREAM` to the device and inode of
/// the stream it connects a service's stderr to.
fn stderr_is_journal() -> bool {
    let Ok(stream) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills `st` for a valid descriptor; stderr is one.
    if unsafe { libc::fstat(std::io::stderr().as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat succeeded, so `st` is initialised.
    let st = unsafe { st.assume_init() };
    stream == format!("{}:{}", st.st_dev, st.st_ino)
}

/// Installs the global subscriber: `$OBJTIER_LOG` filters (default `info`), `format` shapes.
pub fn init(format: LogFormat) {
    let filter =
        || EnvFilter::try_from_env("OBJTIER_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let format = match format {
        LogFormat::Auto if stderr_is_journal() => LogFormat::Journald,
        LogFormat::Auto => LogFormat::Text,
        other => other,
    };
    match format {
        LogFormat::Journald => match tracing_journald::layer() {
            Ok(journal) => {
                tracing_subscriber::registry()
                    .with(filter())
                    .with(journal.with_syslog_identifier("objtier".into()))
                    .init();
                return;
            }
            Err(e) => eprintln!("objtier: cannot log to the journal ({e}); logging text to stderr"),
        },
        LogFormat::Json => {
            tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_env_filter(filter())
                .with_writer(std::io::stderr)
                .init();
            return;
        }
        _ => {}
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
