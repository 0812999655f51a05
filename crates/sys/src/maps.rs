//! `/proc/PID/maps`: which file a code address belongs to, for naming allocation sites.
//!
//! A site's frames arrive as raw return addresses, which ASLR moves on every run. Named as
//! `module+offset` (the mapped file and the address's offset in it) they mean the same code in
//! every run of the same binary, which is what profiles and placements taken in one run and
//! applied in the next need ([`Maps::address_of`] turns such a name back into this run's
//! address). The reader takes the path of the maps file, so tests feed it captured text.

use std::path::Path;

/// One line of a maps file that maps a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileMapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of `start`.
    pub file_offset: u64,
    /// Mapped executable (`x` in the permissions).
    pub executable: bool,
    pub path: String,
}

/// The file-backed mappings of a process, sorted by start address.
#[derive(Clone, Debug, Default)]
pub struct Maps {
    mappings: Vec<FileMapping>,
}

impl Maps {
    /// Reads `/proc/<pid>/maps` under `proc_root` (`/proc` on a live system).
    pub fn read(proc_root: &Path, pid: u32) -> std::io::Result<Maps> {
        let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("maps"))?;
        Ok(Maps::parse(&text))
    }

    /// Parses maps text; lines that are not file mappings (anonymous memory, `[stack]`, ...) or
    /// do not parse are skipped: a field added by a future kernel must not lose every site.
    pub fn parse(text: &str) -> Maps {
        let mut mappings: Vec<FileMapping> = text.lines().filter_map(parse_line).collect();
        mappings.sort_by_key(|m| m.start);
        Maps { mappings }
    }

    /// `module+0xoffset` for a code address, or None if no file maps it.
    pub fn describe(&self, address: u64) -> Option<String> {
        let i = self.mappings.partition_point(|m| m.start <= address);
        let m = self.mappings.get(i.checked_sub(1)?)?;
        (address < m.end).then(|| format!("{}+{:#x}", m.path, address - m.start + m.file_offset))
    }

    /// The address a `module+0xoffset` name (as [`Maps::describe`] writes it) has in this
    /// process, or None if that module is not mapped here (yet) or the name does not parse.
    /// Where several mappings of the module hold the offset (segments may share a page of the
    /// file), an executable one wins: names are of code addresses.
    pub fn address_of(&self, name: &str) -> Option<u64> {
        let (path, offset) = name.rsplit_once('+')?;
        let offset = u64::from_str_radix(offset.strip_prefix("0x")?, 16).ok()?;
        self.mappings
            .iter()
            .filter(|m| {
                m.path == path
                    && offset >= m.file_offset
                    && offset - m.file_offset < m.end - m.start
            })
            .min_by_key(|m| !m.executable)
            .map(|m| m.start + (offset - m.file_offset))
    }
}

impl Maps {
    /// The path of a mapped module whose file name is `name` (the last component of its path),
    /// if exactly one such module is mapped: how a frame recorded at another path (another
    /// install prefix, another node) finds its module here.
    pub fn path_named(&self, name: &str) -> Option<&str> {
        let mut found = self
            .mappings
            .iter()
            .map(|m| m.path.as_str())
            .filter(|p| p.rsplit('/').next() == Some(name));
        let first = found.next()?;
        found.all(|p| p == first).then_some(first)
    }

    /// The mapped modules' paths, each once.
    pub fn modules(&self) -> Vec<&str> {
        let mut paths: Vec<&str> = self.mappings.iter().map(|m| m.path.as_str()).collect();
        paths.sort_unstable();
        paths.dedup();
        paths
    }
}

fn parse_line(line: &str) -> Option<FileMapping> {
    let mut fields = line.splitn(6, char::is_whitespace);
    let (range, perms, offset, _dev, _inode) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let path = fields.next()?.trim();
    if !path.starts_with('/') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    Some(FileMapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        file_offset: u64::from_str_radix(offset, 16).ok()?,
        executable: perms.contains('x'),
        path: path.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Maps {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/proc");
        Maps::parse(&std::fs::read_to_string(root.join("maps-6.18")).unwrap())
    }

    #[test]
    fn names_code_addresses_by_file_offset() {
        let maps = fixture();
        // The r-xp segment of /usr/bin/cat starts at 0x557b0cd0c000 with file offset 0x2000.
        assert_eq!(
            maps.describe(0x557b0cd0c010).as_deref(),
            Some("/usr/bin/cat+0x2010")
        );
        assert_eq!(
            maps.describe(0x557b0cd0a000).as_deref(),
            Some("/usr/bin/cat+0x0")
        );
        assert_eq!(maps.describe(0x10).as_deref(), None);
    }

    #[test]
    fn names_turn_back_into_addresses_in_another_layout() {
        let maps = fixture();
        for address in [0x557b0cd0c010, 0x557b0cd0a000] {
            let name = maps.describe(address).unwrap();
            assert_eq!(maps.address_of(&name), Some(address), "{name}");
        }
        // The same binary mapped elsewhere (another run, another ASLR slide).
        let moved = Maps::parse(
            "5600000000-5600002000 r--p 00000000 fe:00 7 /usr/bin/cat\n\
             5600002000-5600006000 r-xp 00002000 fe:00 7 /usr/bin/cat\n\
             5600007000-5600009000 rw-p 00005000 fe:00 7 /usr/bin/cat\n",
        );
        assert_eq!(moved.address_of("/usr/bin/cat+0x2010"), Some(0x5600002010));
        // Offset 0x5008 is in the code and the data mapping: the code wins.
        assert_eq!(moved.address_of("/usr/bin/cat+0x5008"), Some(0x5600005008));
        assert_eq!(
            moved.address_of("/usr/bin/cat+0x9000"),
            None,
            "beyond the file"
        );
        assert_eq!(
            moved.address_of("/usr/lib/libfoo.so+0x10"),
            None,
            "not mapped"
        );
        assert_eq!(moved.address_of("?+0x5600002010"), None);
        assert_eq!(moved.address_of("/usr/bin/cat"), None);
        assert_eq!(moved.address_of("/usr/bin/cat+12"), None);
    }

    #[test]
    fn modules_are_found_by_file_name_when_unique() {
        let maps = Maps::parse(
            "5600000000-5600002000 r-xp 00000000 fe:00 7 /opt/a/bin/app\n\
             5600002000-5600004000 r--p 00002000 fe:00 7 /opt/a/bin/app\n\
             7f00000000-7f00001000 r-xp 00000000 fe:00 8 /usr/lib/x/libz.so\n\
             7f00001000-7f00002000 r-xp 00000000 fe:00 9 /usr/lib/y/libz.so\n",
        );
        assert_eq!(maps.path_named("app"), Some("/opt/a/bin/app"));
        assert_eq!(maps.path_named("libz.so"), None, "two of them: ambiguous");
        assert_eq!(maps.path_named("nothing"), None);
        assert_eq!(maps.modules().len(), 3);
    }

    #[test]
    fn skips_anonymous_and_special_mappings() {
        let maps = Maps::parse(
            "7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]\n\
             7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n\
             garbage line\n\
             7f0000002000-7f0000003000 r-xp 00001000 fe:00 12 /usr/lib/with space.so\n",
        );
        assert_eq!(maps.describe(0x7ffd1500), None);
        assert_eq!(maps.describe(0x7f0000000500), None);
        assert_eq!(
            maps.describe(0x7f0000002004).as_deref(),
            Some("/usr/lib/with space.so+0x1004")
        );
    }
}
