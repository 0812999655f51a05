//! What must hold before a program is run under emulation, each refused with what to do:
//! QEMU's user-mode emulator is installed, the plugin is beside libobjtier.so, and the program
//! is a dynamically linked x86-64 executable (or a script whose interpreter is one), so that
//! QEMU runs it and the library can be preloaded into it. A program that fails these is not
//! run at all: a profile that misses its objects would look like one of a program without any.

use anyhow::{bail, Context};
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{elf, Endianness};
use std::path::{Path, PathBuf};

// ELF's numbers (the `object` crate's constants are typed for its own reader).
const ELFCLASS64: u8 = 2;
const ELFDATA2MSB: u8 = 2;
const EM_386: u16 = 3;
const EM_MIPS: u16 = 8;
const EM_PPC64: u16 = 21;
const EM_S390: u16 = 22;
const EM_ARM: u16 = 40;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const EM_RISCV: u16 = 243;
const EM_LOONGARCH: u16 = 258;

/// The emulator's executable name (on PATH, or `OBJTIER_QEMU`).
pub const QEMU: &str = "qemu-x86_64";
/// The plugin's file name, beside libobjtier.so.
pub const PLUGIN: &str = "libobjtier_emulate.so";

/// QEMU's x86-64 user-mode emulator: `OBJTIER_QEMU`, else `qemu-x86_64` on PATH.
pub fn find_qemu() -> anyhow::Result<PathBuf> {
    if let Some(explicit) = std::env::var_os("OBJTIER_QEMU") {
        let path = PathBuf::from(explicit);
        if path.is_file() {
            return Ok(path);
        }
        bail!("OBJTIER_QEMU={} is not a file", path.display());
    }
    crate::program::resolve(QEMU, std::env::var_os("PATH").as_deref()).with_context(|| {
        format!(
            "--source emulate runs the program under QEMU's user-mode emulator, and {QEMU} is \
             not installed (not on PATH): install Debian's qemu-user package (apt-get install \
             qemu-user; objtier's scripts/install-deps does), or set OBJTIER_QEMU to its path"
        )
    })
}

/// The plugin beside `lib` (libobjtier.so).
pub fn find_plugin(lib: &Path) -> anyhow::Result<PathBuf> {
    let plugin = lib.with_file_name(PLUGIN);
    if plugin.is_file() {
        return Ok(plugin);
    }
    bail!(
        "cannot find {PLUGIN} beside {} (the QEMU plugin --source emulate loads): build it with \
         plugins/emulate/build (scripts/setup does), or install objtier with scripts/install",
        lib.display()
    )
}

/// How QEMU is to run the command: the executable QEMU loads and the arguments it gets
/// (for a script, its interpreter, the interpreter's argument and the script).
#[derive(Debug, PartialEq, Eq)]
pub struct Launch {
    pub executable: PathBuf,
    pub args: Vec<String>,
}

/// Checks the command's program (through PATH, and through a script's `#!` line) and says how
/// QEMU runs it.
pub fn program(command: &[String]) -> anyhow::Result<Launch> {
    let name = &command[0];
    let path = crate::program::resolve(name, std::env::var_os("PATH").as_deref())
        .filter(|p| p.is_file())
        .with_context(|| format!("{name}: no such program (not a file, nor on PATH)"))?;
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    if let Some(line) = bytes.strip_prefix(b"#!") {
        let line = String::from_utf8_lossy(line.split(|&b| b == b'\n').next().unwrap_or(&[]))
            .trim()
            .to_string();
        let mut parts = line.splitn(2, char::is_whitespace);
        let interpreter = parts.next().unwrap_or("").to_string();
        if interpreter.is_empty() {
            bail!(
                "{}: a script whose #! line names no interpreter",
                path.display()
            );
        }
        let mut args = vec![interpreter.clone()];
        args.extend(
            parts
                .next()
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty()),
        );
        args.push(path.display().to_string());
        args.extend(command[1..].iter().cloned());
        check_executable(Path::new(&interpreter))
            .with_context(|| format!("{} is a script run by {interpreter}", path.display()))?;
        return Ok(Launch {
            executable: PathBuf::from(interpreter),
            args,
        });
    }
    check_executable(&path)?;
    Ok(Launch {
        executable: path,
        args: command.to_vec(),
    })
}

/// A dynamically linked x86-64 ELF executable, or an error that says what it is instead.
pub fn check_executable(path: &Path) -> anyhow::Result<()> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !data.starts_with(b"\x7fELF") {
        bail!(
            "{} is neither an ELF executable nor a #! script: QEMU cannot run it",
            path.display()
        );
    }
    let machine = elf_machine(&data);
    if data.get(4) != Some(&ELFCLASS64) || machine != Some(EM_X86_64) {
        bail!(
            "{} is a program for {}, not x86-64: --source emulate runs x86-64 programs (QEMU's \
             qemu-x86_64, with libobjtier.so built for x86-64); profile it on its own kind of \
             machine with another --source",
            path.display(),
            machine_name(data.get(4).copied(), machine)
        );
    }
    let file = ElfFile64::<Endianness>::parse(&*data)
        .map_err(|e| anyhow::anyhow!("{}: not a readable ELF file: {e}", path.display()))?;
    let endian = file.endian();
    let dynamic = file
        .elf_header()
        .program_headers(endian, &*data)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        .iter()
        .any(|ph| ph.p_type(endian) == elf::PT_INTERP);
    if !dynamic {
        bail!(
            "{} is statically linked: libobjtier.so cannot be preloaded into it, so none of its \
             objects could be seen and the profile would hold no sites; --source emulate \
             profiles dynamically linked programs (build it without -static)",
            path.display()
        );
    }
    Ok(())
}

/// `e_machine`, read where both ELF classes keep it.
fn elf_machine(data: &[u8]) -> Option<u16> {
    let bytes: [u8; 2] = data.get(18..20)?.try_into().ok()?;
    Some(match data.get(5) {
        Some(&ELFDATA2MSB) => u16::from_be_bytes(bytes),
        _ => u16::from_le_bytes(bytes),
    })
}

fn machine_name(class: Option<u8>, machine: Option<u16>) -> String {
    match machine {
        Some(EM_AARCH64) => "AArch64".into(),
        Some(EM_ARM) => "32-bit Arm".into(),
        Some(EM_386) => "32-bit x86 (i386)".into(),
        Some(EM_X86_64) if class != Some(ELFCLASS64) => "x32 (32-bit x86-64)".into(),
        Some(EM_RISCV) => "RISC-V".into(),
        Some(EM_PPC64) => "64-bit POWER".into(),
        Some(EM_S390) => "s390x".into(),
        Some(EM_MIPS) => "MIPS".into(),
        Some(EM_LOONGARCH) => "LoongArch".into(),
        Some(m) => format!("machine {m}"),
        None => "an unknown machine".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf_header(class: u8, machine: u16) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = class;
        h[5] = 1;
        h[18..20].copy_from_slice(&machine.to_le_bytes());
        h
    }

    #[test]
    fn foreign_and_unknown_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes, says) in [
            ("arm", elf_header(2, EM_AARCH64), "for AArch64, not x86-64"),
            ("i386", elf_header(1, EM_386), "32-bit x86 (i386)"),
            ("text", b"hello".to_vec(), "neither an ELF executable"),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            let e = check_executable(&path).unwrap_err().to_string();
            assert!(e.contains(says), "{name}: {e}");
        }
    }

    #[test]
    fn dynamic_programs_pass_and_scripts_run_through_their_interpreter() {
        check_executable(Path::new("/bin/sh")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/bin/sh -e\necho hi\n").unwrap();
        let launch = program(&[script.display().to_string(), "x".into()]).unwrap();
        assert_eq!(launch.executable, PathBuf::from("/bin/sh"));
        assert_eq!(
            launch.args,
            ["/bin/sh", "-e", &script.display().to_string(), "x"]
        );
        let e = program(&["/nonexistent/prog".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no such program"), "{e}");
    }
}
