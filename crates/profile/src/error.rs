//! What went wrong with a profile or placement file, said so that a person can fix it: which
//! file, where in it, what is wrong, and what to do.

use std::path::{Path, PathBuf};

/// A file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {problem}{}", file.display(), at.map_or(String::new(), |(l, c)| format!(":{l}:{c}")), hint.as_ref().map_or(String::new(), |h| format!("; {h}")))]
pub struct FormatError {
    /// The file (or `-` for standard input).
    pub file: PathBuf,
    /// Line and column (1-based) where the problem is, when the parser knows.
    pub at: Option<(usize, usize)>,
    pub problem: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl FormatError {
    pub fn new(file: &Path, problem: impl Into<String>) -> FormatError {
        FormatError {
            file: file.to_path_buf(),
            at: None,
            problem: problem.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> FormatError {
        self.hint = Some(hint.into());
        self
    }

    pub fn at(mut self, line: usize, column: usize) -> FormatError {
        self.at = Some((line, column));
        self
    }

    /// A JSON parse error of `file`, with the parser's position.
    pub(crate) fn json(file: &Path, error: &serde_json::Error, hint: &str) -> FormatError {
        let problem = match error.classify() {
            serde_json::error::Category::Io => format!("cannot read: {error}"),
            serde_json::error::Category::Eof => "the file ends too early (truncated?)".to_string(),
            _ => strip_position(&error.to_string()),
        };
        let mut e = FormatError::new(file, problem).hint(hint);
        if error.line() > 0 {
            e = e.at(error.line(), error.column());
        }
        e
    }
}

/// serde_json appends " at line L column C" to its messages; the error says where already.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}
