//! What the package ships beside the command, generated from the command line's own
//! definition so that it never disagrees with `--help`: shell completions (`objtier completions
//! SHELL`, for users too) and man pages (`objtier manpages DIR`, hidden: scripts/package
//! calls it).

use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
}

#[derive(Args)]
pub struct ManpagesArgs {
    /// Directory to write objtier.1 and one page per subcommand (objtier-run.1, ...) into.
    dir: PathBuf,
}

/// Prints the completion script for a shell.
pub fn completions(args: CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<()> {
    clap_complete::generate(args.shell, &mut cmd, "objtier", &mut std::io::stdout());
    Ok(())
}

/// Writes the man pages, one per command and subcommand.
pub fn manpages(args: ManpagesArgs, cmd: clap::Command) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    clap_mangen::generate_to(cmd, &args.dir)
        .with_context(|| format!("cannot write the man pages into {}", args.dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// One page per visible command, named as man looks them up, each a roff page that names
    /// its command; the completions know the subcommands.
    #[test]
    fn man_pages_and_completions_cover_every_command() {
        let dir = tempfile::tempdir().unwrap();
        let args = super::ManpagesArgs {
            dir: dir.path().to_owned(),
        };
        super::manpages(args, crate::command()).unwrap();
        let mut pages: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        pages.sort();
        for page in [
            "objtier.1",
            "objtier-run.1",
            "objtier-daemon.1",
            "objtier-profile-merge.1",
        ] {
            assert!(
                pages.iter().any(|p| p == page),
                "{page} missing from {pages:?}"
            );
        }
        assert!(
            !pages.iter().any(|p| p == "objtier-manpages.1"),
            "{pages:?}"
        );
        let daemon = std::fs::read_to_string(dir.path().join("objtier-daemon.1")).unwrap();
        assert!(daemon.starts_with(".ie \\n(.g .ds Aq") || daemon.contains(".TH objtier-daemon"));
        assert!(
            daemon.contains("metrics"),
            "the daemon's page lists its options"
        );
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut crate::command(),
            "objtier",
            &mut bash,
        );
        let bash = String::from_utf8(bash).unwrap();
        assert!(bash.contains("complete -F _objtier") && bash.contains("--fast-capacity"));
    }
}
