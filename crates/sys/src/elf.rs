//! What a module's file says about itself: its GNU build-id, and where a file offset is
//! mapped in its virtual addresses.
//!
//! A site's frames are `module+offset` (offsets into the file, as `/proc/PID/maps` gives them),
//! which mean the same code only while the file is the same build: a profile applied to a
//! rebuilt binary would place the wrong call paths. The build-id (the linker's hash in the
//! `NT_GNU_BUILD_ID` note) tells builds apart. The file is read through a cache of the parts
//! parsed (its headers and the note), not whole: a 100 MiB library costs a few pages.

use object::read::ReadCache;
use object::{Object, ObjectSegment};
use std::fs::File;
use std::path::Path;

/// The module's build-id as lower-case hex; None if the file has none.
pub fn build_id(path: &Path) -> std::io::Result<Option<String>> {
    let file = File::open(path)?;
    let cache = ReadCache::new(file);
    let object = object::File::parse(&cache).map_err(invalid)?;
    let id = object.build_id().map_err(invalid)?;
    Ok(id.map(|bytes| bytes.iter().map(|b| format!("{b:02x}")).collect()))
}

/// The virtual address (as the file's program headers lay it out, before any load bias) of
/// file offset `offset`, if a loadable segment holds it.
pub fn address_of_offset(path: &Path, offset: u64) -> std::io::Result<Option<u64>> {
    let file = File::open(path)?;
    let cache = ReadCache::new(file);
    let object = object::File::parse(&cache).map_err(invalid)?;
    Ok(object.segments().find_map(|segment| {
        let (start, size) = segment.file_range();
        (offset >= start && offset < start + size).then(|| segment.address() + (offset - start))
    }))
}

fn invalid(e: object::Error) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_binary_has_a_build_id_and_its_code_an_address() {
        let exe = std::env::current_exe().unwrap();
        let id = build_id(&exe).unwrap();
        // Debian's gcc links with --build-id, and so rustc's linker driver does here.
        let id = id.expect("the test binary has a build-id");
        assert!(
            id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()),
            "{id}"
        );
        // This very function's code: its file offset maps back to a virtual address.
        let maps = crate::maps::Maps::read(Path::new("/proc"), std::process::id()).unwrap();
        let here = the_test_binary_has_a_build_id_and_its_code_an_address as fn() as usize as u64;
        let name = maps.describe(here).unwrap();
        let offset = u64::from_str_radix(name.rsplit_once("+0x").unwrap().1, 16).unwrap();
        assert!(address_of_offset(&exe, offset).unwrap().is_some());
        assert_eq!(address_of_offset(&exe, u64::MAX).unwrap(), None);
    }

    #[test]
    fn a_file_that_is_not_elf_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x");
        std::fs::write(&f, b"not an elf file at all").unwrap();
        assert!(build_id(&f).is_err());
        assert!(build_id(&dir.path().join("missing")).is_err());
    }
}
