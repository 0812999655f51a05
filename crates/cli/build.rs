//! Records the build for `objtier --version`: the git commit the binary was built from, or
//! `$OBJTIER_BUILD` where it is set (a package built from a tarball has no git history).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// Asks cargo to run this again when `file` changes (a missing one would rerun it every build).
fn watch(file: Option<String>) {
    if let Some(file) = file.filter(|f| std::path::Path::new(f).exists()) {
        println!("cargo:rerun-if-changed={file}");
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=OBJTIER_BUILD");
    let build = std::env::var("OBJTIER_BUILD")
        .ok()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // Built again when HEAD moves: a commit, a checkout, or a ref packed away.
    for path in ["HEAD", "packed-refs"] {
        watch(git(&[
            "rev-parse",
            "--path-format=absolute",
            "--git-path",
            path,
        ]));
    }
    if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch(git(&[
            "rev-parse",
            "--path-format=absolute",
            "--git-path",
            &head,
        ]));
    }
    println!("cargo:rustc-env=OBJTIER_BUILD={build}");
}
