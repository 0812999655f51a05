//! Symbols for people: each frame of a profile's sites as `function+0xoffset` (and the source
//! line where the module has DWARF), through a well-kept symbolizer (`addr2line`'s loader, which
//! reads ELF symbol tables and DWARF, and demangles C++ and Rust names).
//!
//! Frames are `module+0xoffset` with file offsets (as `/proc/PID/maps` gives them); the module's
//! program headers turn an offset into the virtual address its symbols are at. A frame is a
//! return address, so the address looked up is one before it: the call, not what follows it.
//! A module that cannot be read, or was rebuilt since the profile (its build-id differs), gets
//! no symbols: a wrong name is worse than none.

use objtier_profile::{parse_frame, Profile};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

/// A module opened for symbols, or why not.
struct Module {
    loader: Option<addr2line::Loader>,
}

/// Fills in `symbols` for every site of `profile` whose modules can be read; returns how many
/// frames got a name.
pub fn symbolize(profile: &mut Profile) -> usize {
    let mut modules: HashMap<String, Module> = HashMap::new();
    let mut named = 0;
    let build_ids: HashMap<String, Option<String>> = profile
        .modules
        .iter()
        .map(|m| (m.path.clone(), m.build_id.clone()))
        .collect();
    for site in &mut profile.sites {
        if site.frames.is_empty() {
            continue;
        }
        let symbols: Vec<Option<String>> = site
            .frames
            .iter()
            .map(|frame| {
                let (path, offset) = parse_frame(frame)?;
                let module = modules.entry(path.to_string()).or_insert_with(|| Module {
                    loader: open(path, build_ids.get(path).cloned().flatten()),
                });
                let loader = module.loader.as_ref()?;
                let vaddr = objtier_sys::elf::address_of_offset(Path::new(path), offset).ok()??;
                describe(loader, vaddr.saturating_sub(1))
            })
            .collect();
        named += symbols.iter().filter(|s| s.is_some()).count();
        site.symbols = if symbols.iter().any(Option::is_some) {
            symbols
        } else {
            Vec::new()
        };
    }
    named
}

/// The module at `path`, if it can be read and is the build the profile saw.
fn open(path: &str, build_id: Option<String>) -> Option<addr2line::Loader> {
    if let Some(expected) = build_id {
        let found = objtier_sys::elf::build_id(Path::new(path)).ok().flatten();
        if found.as_deref() != Some(expected.as_str()) {
            return None;
        }
    }
    addr2line::Loader::new(path).ok()
}

/// `function+0xoffset (file:line)` for the code at `vaddr`, as much of it as is known.
fn describe(loader: &addr2line::Loader, vaddr: u64) -> Option<String> {
    let symbol = loader.find_symbol_info(vaddr);
    let name = symbol.as_ref().map(|s| {
        let demangled = addr2line::demangle_auto(Cow::from(s.name()), None);
        format!("{demangled}+{:#x}", vaddr - s.address())
    });
    let location = loader.find_location(vaddr).ok().flatten().and_then(|l| {
        let file = l.file?;
        let file = file.rsplit('/').next().unwrap_or(file);
        Some(match l.line {
            Some(line) => format!("{file}:{line}"),
            None => file.to_string(),
        })
    });
    match (name, location) {
        (Some(n), Some(l)) => Some(format!("{n} ({l})")),
        (Some(n), None) => Some(n),
        (None, Some(l)) => Some(l),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use objtier_profile::{Module as ProfileModule, Program, Site, Source};

    #[inline(never)]
    fn a_function_to_find() -> usize {
        std::hint::black_box(42)
    }

    #[test]
    fn frames_of_this_test_binary_get_their_function_names() {
        let here = a_function_to_find as fn() -> usize as usize as u64 + 1;
        let maps = objtier_sys::maps::Maps::read(Path::new("/proc"), std::process::id()).unwrap();
        let frame = maps.describe(here).unwrap();
        let exe = parse_frame(&frame).unwrap().0.to_string();
        let mut profile = Profile::new(Source::None, Program::of_exe(&exe, None));
        profile.modules.push(ProfileModule {
            path: exe.clone(),
            build_id: objtier_sys::elf::build_id(Path::new(&exe)).unwrap(),
        });
        profile.sites.push(Site {
            frames: vec![frame.clone(), "/nonexistent/lib.so+0x10".into()],
            ..Site::default()
        });
        assert_eq!(symbolize(&mut profile), 1);
        let name = profile.sites[0].symbols[0].clone().unwrap();
        assert!(name.contains("a_function_to_find"), "{name}");
        assert_eq!(profile.sites[0].symbols[1], None);
        // Another build (the build-id differs): no names rather than wrong ones.
        profile.modules[0].build_id = Some("00".into());
        profile.sites[0].symbols.clear();
        assert_eq!(symbolize(&mut profile), 0);
        assert!(profile.sites[0].symbols.is_empty());
    }
}
