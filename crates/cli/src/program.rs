//! What `objtier run` can tell about a program before it runs it: whether the dynamic loader
//! will load libobjtier.so into it at all. It will not into a statically linked executable (no
//! loader runs), nor into one that is set-user-ID or set-group-ID to someone else (the loader
//! then ignores `LD_PRELOAD`). Such a program runs, untouched and untiered, and without a word
//! the user would wonder why `objtier status` never lists it.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why the preload cannot reach a program.
#[derive(Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// An ELF executable without a program interpreter (`PT_INTERP`).
    Static,
    /// Set-user-ID or set-group-ID to an identity other than the caller's.
    SecureExecution,
}

impl Unreachable {
    /// A warning naming the program, what happens, and what to do.
    pub fn warning(&self, program: &Path) -> String {
        match self {
            Unreachable::Static => format!(
                "{} is statically linked: LD_PRELOAD cannot replace its malloc, so it runs \
                 without objtier (link it dynamically to tier it)",
                program.display()
            ),
            Unreachable::SecureExecution => format!(
                "{} is set-user-ID or set-group-ID: the dynamic loader ignores LD_PRELOAD for \
                 it, so it runs without objtier (run a copy without that bit to tier it)",
                program.display()
            ),
        }
    }
}

/// The file `command` runs: itself if it names a path, else the first executable of that name
/// in `path` (as `execvp` searches).
pub fn resolve(command: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    if command.contains('/') {
        return Some(PathBuf::from(command));
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(command))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
}

/// Whether the preload will reach the executable at `file`, run by real user `uid` and group
/// `gid`; None when it will, or when the file cannot be read or is not an ELF executable
/// (a script's interpreter is looked at once: `#!/usr/bin/env python3` is env's case).
pub fn unreachable(file: &Path, uid: u32, gid: u32) -> Option<Unreachable> {
    inspect(file, uid, gid, true)
}

fn inspect(file: &Path, uid: u32, gid: u32, may_be_script: bool) -> Option<Unreachable> {
    let meta = file.metadata().ok()?;
    let mode = meta.mode();
    if (mode & 0o4000 != 0 && meta.uid() != uid) || (mode & 0o2000 != 0 && meta.gid() != gid) {
        return Some(Unreachable::SecureExecution);
    }
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(file)
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut head)
        .ok()?;
    if let Some(interpreter) = shebang(&head) {
        // One level: the kernel itself follows an interpreter that is a script only so far.
        return may_be_script
            .then(|| inspect(Path::new(&interpreter), uid, gid, false))
            .flatten();
    }
    match elf_has_interpreter(&head) {
        // The dynamic loader has none either, and run as a program it does load LD_PRELOAD.
        Some(false) if !is_dynamic_loader(file) => Some(Unreachable::Static),
        _ => None,
    }
}

/// Whether `file` is named as glibc's and musl's dynamic loaders are (`ld-linux-x86-64.so.2`,
/// `ld-linux-aarch64.so.1`, `ld64.so.2`, `ld-musl-x86_64.so.1`).
fn is_dynamic_loader(file: &Path) -> bool {
    file.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| (n.starts_with("ld-") || n.starts_with("ld64.")) && n.contains(".so"))
}

/// The interpreter a `#!` line names, if `head` starts with one.
fn shebang(head: &[u8]) -> Option<String> {
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let text = std::str::from_utf8(line).ok()?.trim();
    text.split_whitespace().next().map(str::to_owned)
}

/// Whether the ELF image whose first bytes are `head` asks for a program interpreter: Some(true)
/// for a dynamically linked executable, Some(false) for a static one, None for anything that is
/// not an ELF file whose program headers lie within `head`.
fn elf_has_interpreter(head: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if head.get(..4)? != b"\x7fELF" {
        return None;
    }
    let wide = match head.get(4)? {
        1 => false,
        2 => true,
        _ => return None,
    };
    let little = match head.get(5)? {
        1 => true,
        2 => false,
        _ => return None,
    };
    let int = |at: usize, len: usize| -> Option<u64> {
        let bytes = head.get(at..at.checked_add(len)?)?;
        let mut value = 0u64;
        for i in 0..len {
            let b = if little { bytes[len - 1 - i] } else { bytes[i] };
            value = value << 8 | b as u64;
        }
        Some(value)
    };
    let (phoff, phentsize, phnum) = if wide {
        (int(0x20, 8)?, int(0x36, 2)?, int(0x38, 2)?)
    } else {
        (int(0x1c, 4)?, int(0x2a, 2)?, int(0x2c, 2)?)
    };
    if phentsize < 4 {
        return None;
    }
    for i in 0..phnum {
        let at = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if int(usize::try_from(at).ok()?, 4)? as u32 == PT_INTERP {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-bit little-endian ELF header with program headers of the given types at 0x40.
    fn elf64(types: &[u32]) -> Vec<u8> {
        let mut head = vec![0u8; 0x40 + 0x38 * types.len()];
        head[..4].copy_from_slice(b"\x7fELF");
        head[4] = 2;
        head[5] = 1;
        head[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        head[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        head[0x38..0x3a].copy_from_slice(&(types.len() as u16).to_le_bytes());
        for (i, t) in types.iter().enumerate() {
            let at = 0x40 + 0x38 * i;
            head[at..at + 4].copy_from_slice(&t.to_le_bytes());
        }
        head
    }

    #[test]
    fn a_program_interpreter_makes_an_executable_dynamic() {
        // PT_PHDR, PT_INTERP, PT_LOAD: a dynamically linked executable.
        assert_eq!(elf_has_interpreter(&elf64(&[6, 3, 1])), Some(true));
        // PT_LOAD, PT_NOTE, PT_TLS, PT_GNU_STACK: static.
        assert_eq!(
            elf_has_interpreter(&elf64(&[1, 4, 7, 0x6474e551])),
            Some(false)
        );
        assert_eq!(elf_has_interpreter(b"#!/bin/sh\n"), None);
        assert_eq!(elf_has_interpreter(b"\x7fELF"), None, "truncated");
        // Program headers beyond what was read: unknown, not static.
        let mut far = elf64(&[3]);
        far[0x20..0x28].copy_from_slice(&0x10_0000u64.to_le_bytes());
        assert_eq!(elf_has_interpreter(&far), None);
    }

    #[test]
    fn a_32_bit_big_endian_header_is_read_too() {
        let mut head = vec![0u8; 0x34 + 0x20];
        head[..4].copy_from_slice(b"\x7fELF");
        head[4] = 1;
        head[5] = 2;
        head[0x1c..0x20].copy_from_slice(&0x34u32.to_be_bytes());
        head[0x2a..0x2c].copy_from_slice(&0x20u16.to_be_bytes());
        head[0x2c..0x2e].copy_from_slice(&1u16.to_be_bytes());
        head[0x34..0x38].copy_from_slice(&3u32.to_be_bytes());
        assert_eq!(elf_has_interpreter(&head), Some(true));
        head[0x34..0x38].copy_from_slice(&1u32.to_be_bytes());
        assert_eq!(elf_has_interpreter(&head), Some(false));
    }

    #[test]
    fn a_shebang_names_its_interpreter() {
        assert_eq!(
            shebang(b"#!/usr/bin/env python3\nprint()\n").as_deref(),
            Some("/usr/bin/env")
        );
        assert_eq!(shebang(b"#! /bin/sh -e\n").as_deref(), Some("/bin/sh"));
        assert_eq!(shebang(b"\x7fELF"), None);
    }

    #[test]
    fn real_executables_on_this_machine() {
        let (uid, gid) = (0, 0);
        // The test binary itself is linked dynamically.
        let me = std::env::current_exe().unwrap();
        assert_eq!(unreachable(&me, uid, gid), None);
        // A script whose interpreter is dynamic.
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert_eq!(unreachable(&script, uid, gid), None);
        // The dynamic loader run as a program (`ld.so PROGRAM`) loads the preload.
        let loader = Path::new("/lib64/ld-linux-x86-64.so.2");
        if loader.exists() {
            assert_eq!(unreachable(loader, uid, gid), None);
        }
        // Not a program at all, or missing: nothing to say.
        assert_eq!(unreachable(&dir.path().join("missing"), uid, gid), None);
    }

    #[test]
    fn a_set_user_id_file_of_someone_else_is_out_of_reach() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tool");
        std::fs::copy(std::env::current_exe().unwrap(), &file).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o4755)).unwrap();
        let owner = file.metadata().unwrap().uid();
        assert_eq!(
            unreachable(&file, owner + 1, 0),
            Some(Unreachable::SecureExecution)
        );
        assert_eq!(
            unreachable(&file, owner, u32::MAX),
            None,
            "its owner runs it"
        );
    }

    #[test]
    fn commands_are_found_as_execvp_finds_them() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths(["/nonexistent".into(), dir.path().to_owned()]).unwrap();
        assert_eq!(resolve("tool", Some(&path)), Some(tool));
        assert_eq!(resolve("absent", Some(&path)), None);
        assert_eq!(resolve("./x", None), Some(PathBuf::from("./x")));
    }
}
