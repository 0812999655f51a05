//! What `objtier run --placement FILE` checks before it runs the program: that the file is a
//! placement this objtier reads (an error that says which file, where, and what to do, before
//! anything runs), whether it is of the program being run, and which of its modules are
//! another build now (the daemon skips their sites; the user hears it here, once, up front).

use anyhow::Context;
use objtier_profile::{file_name, Placement};
use std::path::{Path, PathBuf};

/// Checks the placement in `file` for running `command`; returns its absolute path, which the
/// library opens (it may change directory before it attaches), and its fallback tier.
pub fn check(file: &Path, command: &[String]) -> anyhow::Result<(PathBuf, Option<u32>)> {
    let placement = Placement::load(file)?;
    let path = std::fs::canonicalize(file)
        .with_context(|| format!("cannot resolve {}", file.display()))?;
    if let Some(exe) = command
        .first()
        .and_then(|c| crate::program::resolve(c, std::env::var_os("PATH").as_deref()))
    {
        let name = exe
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if name != placement.program.name {
            eprintln!(
                "objtier: note: {} is a placement for {}, and the command runs {name}: it applies \
                 to the processes of {} the command starts, if any",
                file.display(),
                placement.program.name,
                placement.program.name
            );
        }
    }
    for module in &placement.modules {
        let Some(expected) = &module.build_id else {
            continue;
        };
        match objtier_sys::elf::build_id(Path::new(&module.path)) {
            Ok(Some(found)) if &found != expected => eprintln!(
                "objtier: warning: {} is another build than the one profiled (build-id {found}, \
                 the profile's {expected}): its allocation sites will not be placed; profile \
                 this build again",
                module.path
            ),
            _ => {}
        }
    }
    let planned = placement.planned_bytes_by_tier();
    eprintln!(
        "objtier: placement {} ({} of {}): {} sites; planned {}; fallback {}",
        file_name(&path.to_string_lossy()),
        placement.algorithm,
        placement.program.name,
        placement.sites.len(),
        planned
            .iter()
            .enumerate()
            .map(|(t, b)| format!("tier {t} {:.1} MiB", *b as f64 / (1 << 20) as f64))
            .collect::<Vec<_>>()
            .join(", "),
        placement
            .fallback_tier
            .map_or("first touch".to_string(), |t| format!(
                "tier {t}, for the rest of the program's memory too (code, stacks, unlisted sites)"
            ))
    );
    Ok((path, placement.fallback_tier))
}

/// Makes the program about to be exec'd prefer the fallback tier for all the memory its
/// placement does not place (its code and libraries as it reads them, stacks, static data,
/// objects of unlisted sites): the seeds' cold arena, so that none of it takes the fast tier
/// before the objects the profile found hot are born. The library binds the placed ones.
pub fn prefer_fallback(tier: u32) {
    let topology = match objtier_sys::topology::Topology::discover(Path::new("/sys")) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "objtier: warning: cannot read the tiers ({e}): the fallback tier is not applied"
            );
            return;
        }
    };
    if topology.tiers.len() < 2 {
        return; // one tier: nothing to prefer
    }
    let Some(nodes) = topology.tiers.get(tier as usize).map(|t| &t.nodes) else {
        eprintln!(
            "objtier: warning: the placement's fallback tier {tier} is not on this machine ({} \
             tiers): the program's other memory goes where first touch puts it",
            topology.tiers.len()
        );
        return;
    };
    if let Err(e) = objtier_sys::mempolicy::prefer_nodes(nodes) {
        eprintln!(
            "objtier: warning: cannot make the program prefer tier {tier} (nodes {nodes:?}): {e}"
        );
    }
}
