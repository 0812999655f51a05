//! objtier's two files of the offline workflow: the **profile** a run leaves (`objtier
//! profile`: what each allocation site allocated, how long its objects lived, how often they
//! were accessed, per interval) and the **placement** advised from it (`objtier advise`: which
//! tier each site's objects are born in), which `objtier run --placement` applies.
//!
//! Both are versioned JSON (docs/formats.md), independent of ASLR and of pids: a site is its
//! call path as `module+0xoffset` frames, innermost first, and each module is listed with its
//! build-id so that a file applied to another build can say so. Loading checks the format, the
//! version and what the types alone cannot (columns of equal length, indices in range), and
//! every error names the file, the place in it and what to do ([`FormatError`]). [`merge`]
//! combines profiles of the same program (several inputs, MPI ranks, cluster nodes);
//! [`flexmalloc`] reads and writes FlexMalloc's location files, so that users of ecoHMEM can
//! bring their reports and take ours.
//!
//! This crate does no I/O beyond reading and writing the files it is given, and knows nothing
//! of the daemon or the kernel: the daemon fills a [`Profile`], the CLI turns one into advice
//! with `objtier_policy::advise`.

mod error;
pub mod flexmalloc;
pub mod levels;
pub mod merge;
pub mod pages;
pub mod placement;
pub mod profile;

pub use error::FormatError;
pub use placement::{PlacedSite, Placement, PLACEMENT_FORMAT, PLACEMENT_VERSION};
pub use profile::{Profile, Site, Source, PROFILE_FORMAT, PROFILE_VERSION};

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Largest profile or placement file read (a guard against reading something silly).
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// The program a file is about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Program {
    /// Its executable, as `/proc/PID/exe` named it.
    pub exe: String,
    /// The executable's file name: what "the same program" means across machines and install
    /// prefixes.
    pub name: String,
    /// The executable's GNU build-id (hex), where it has one.
    #[serde(default)]
    pub build_id: Option<String>,
}

impl Program {
    /// The program of executable `exe`.
    pub fn of_exe(exe: &str, build_id: Option<String>) -> Program {
        Program {
            exe: exe.to_string(),
            name: file_name(exe).to_string(),
            build_id,
        }
    }

    /// Whether `other` is the same program (the same executable name); a different build of
    /// it (another build-id) still is.
    pub fn same_program(&self, other: &Program) -> bool {
        self.name == other.name
    }
}

/// The last component of a path.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A module (executable or shared library) that frames name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Module {
    pub path: String,
    /// Its GNU build-id (hex), null where it has none or it could not be read.
    pub build_id: Option<String>,
}

/// What a site is.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum SiteKind {
    /// An allocation site: objects of 4 KiB and more allocated through one call path.
    #[default]
    Site,
    /// The small-object allocator's memory (objects under 4 KiB, in mimalloc's arenas): a
    /// pseudo-site of its own.
    SmallObjects,
    /// Tracked objects whose site the library did not know (allocated before it attached, or
    /// with `OBJTIER_SITE_DEPTH=0`).
    Unknown,
}

/// Splits `MODULE+0xOFFSET` into the module and the offset.
pub fn parse_frame(frame: &str) -> Option<(&str, u64)> {
    let (module, offset) = frame.rsplit_once('+')?;
    let offset = u64::from_str_radix(offset.strip_prefix("0x")?, 16).ok()?;
    (!module.is_empty()).then_some((module, offset))
}

/// A site's frames must name modules; a pseudo-site has none.
pub(crate) fn check_frames(kind: SiteKind, frames: &[String]) -> Result<(), String> {
    match kind {
        SiteKind::Site => {
            if frames.is_empty() {
                return Err("a site with no frames (only pseudo-sites have none)".into());
            }
            match frames.iter().find(|f| parse_frame(f).is_none()) {
                Some(f) => Err(format!("frame {f:?} is not MODULE+0xOFFSET")),
                None => Ok(()),
            }
        }
        _ if frames.is_empty() => Ok(()),
        _ => Err("a pseudo-site has frames".into()),
    }
}

/// Reads a file of at most [`MAX_FILE_BYTES`] (`-`: standard input); `what` names it in errors.
pub fn read_text(file: &Path, what: &str) -> Result<String, FormatError> {
    use std::io::Read;
    let mut text = String::new();
    let result = if file == Path::new("-") {
        std::io::stdin()
            .take(MAX_FILE_BYTES)
            .read_to_string(&mut text)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(MAX_FILE_BYTES).read_to_string(&mut text))
    };
    result.map_err(|e| {
        FormatError::new(file, format!("cannot read the {what}: {e}")).hint(match e.kind() {
            std::io::ErrorKind::NotFound => "check the path",
            std::io::ErrorKind::InvalidData => "it is not text: is it the right file?",
            _ => "check that you may read it",
        })
    })?;
    Ok(text)
}

/// A file kind this crate reads: what its header says, what to call it, how to make one again,
/// and what its types alone cannot check.
pub(crate) trait Versioned: serde::de::DeserializeOwned {
    const FORMAT: &'static str;
    const VERSION: u32;
    /// "profile", "placement".
    const WHAT: &'static str;
    /// The command that makes one.
    const MADE_BY: &'static str;
    fn check(&self, file: &Path) -> Result<(), FormatError>;
}

/// Parses and checks a file of kind `T` read from `file` (named in errors).
pub(crate) fn parse<T: Versioned>(file: &Path, text: &str) -> Result<T, FormatError> {
    check_header(file, text, T::FORMAT, T::VERSION, T::WHAT)?;
    let value: T = serde_json::from_str(text).map_err(|e| {
        FormatError::json(
            file,
            &e,
            &format!(
                "the file is not a {} objtier can read: make it again with `{}`",
                T::WHAT,
                T::MADE_BY
            ),
        )
    })?;
    value.check(file)?;
    Ok(value)
}

/// Reads, parses and checks the file of kind `T` at `file`.
pub(crate) fn load<T: Versioned>(file: &Path) -> Result<T, FormatError> {
    let text = read_text(file, T::WHAT)?;
    parse(file, &text)
}

/// Checks `"format"` and `"version"` before anything else, so that a file of another kind or
/// version gets that said rather than a complaint about a field it lacks.
pub(crate) fn check_header(
    file: &Path,
    text: &str,
    format: &str,
    version: u32,
    what: &str,
) -> Result<(), FormatError> {
    #[derive(Deserialize)]
    struct Header {
        format: Option<String>,
        version: Option<u32>,
    }
    let header: Header = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) if v.is_object() => serde_json::from_value(v)
            .map_err(|e| FormatError::new(file, format!("bad \"format\" or \"version\": {e}")))?,
        Ok(_) => {
            return Err(FormatError::new(
                file,
                format!("not an objtier {what}: a JSON object was expected"),
            ))
        }
        Err(e) => {
            return Err(FormatError::json(
                file,
                &e,
                &format!("the file is not JSON: is it an objtier {what}?"),
            ))
        }
    };
    match header.format.as_deref() {
        Some(f) if f == format => {}
        Some(PROFILE_FORMAT) => {
            return Err(
                FormatError::new(file, format!("this is a profile, not a {what}"))
                    .hint("make a placement from it with `objtier advise PROFILE -o PLACEMENT`"),
            )
        }
        Some(PLACEMENT_FORMAT) => {
            return Err(
                FormatError::new(file, format!("this is a placement, not a {what}")).hint(
                    "give `objtier run --placement` a placement, and `objtier advise` a profile",
                ),
            )
        }
        Some(other) => {
            return Err(FormatError::new(
                file,
                format!("\"format\" is {other:?}: not an objtier {what}"),
            ))
        }
        None => {
            return Err(FormatError::new(
                file,
                format!("not an objtier {what}: it has no \"format\": {format:?}"),
            ))
        }
    }
    match header.version {
        Some(v) if v == version => Ok(()),
        Some(v) => Err(FormatError::new(
            file,
            format!("{what} version {v}; this objtier reads version {version}"),
        )
        .hint(if v > version {
            "it was written by a newer objtier: use that one, or make the file again with this one"
        } else {
            "make the file again with this objtier"
        })),
        None => Err(FormatError::new(
            file,
            format!("the {what} has no \"version\""),
        )),
    }
}

/// `value` as pretty JSON, except that each element of the top-level array `long_field` is
/// written on one line: a profile of 10,000 sites stays a readable, diffable file of about
/// that many lines instead of hundreds of thousands.
pub(crate) fn to_json_lines<T: Serialize>(value: &T, long_field: &str) -> String {
    let mut v = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
    let items = v
        .as_object_mut()
        .and_then(|o| o.insert(long_field.to_string(), serde_json::Value::Array(Vec::new())));
    let mut out = serde_json::to_string_pretty(&v).unwrap_or_default();
    if let Some(serde_json::Value::Array(items)) = items {
        let empty = format!("\"{long_field}\": []");
        let lines: Vec<String> = items
            .iter()
            .map(|item| serde_json::to_string(item).unwrap_or_default())
            .collect();
        let body = if lines.is_empty() {
            empty.clone()
        } else {
            format!("\"{long_field}\": [\n    {}\n  ]", lines.join(",\n    "))
        };
        out = out.replacen(&empty, &body, 1);
    }
    out.push('\n');
    out
}

/// Writes `text` to `file` through a temporary file, synced and renamed into place, so that a
/// reader, or a writer killed at any point, never sees half a file; `-` writes to standard
/// output.
pub fn write_text(file: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    if file == Path::new("-") {
        return std::io::stdout().lock().write_all(text.as_bytes());
    }
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir
        .unwrap_or(Path::new("."))
        .join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        // A new file, never one found there (nor a link's target).
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)?;
        // The rename itself survives a crash of the machine once the directory is synced.
        std::fs::File::open(dir.unwrap_or(Path::new(".")))?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The JSON Schema of the profile (docs/formats/objtier-profile.schema.json is this).
pub fn profile_schema() -> String {
    schema_of::<Profile>(PROFILE_FORMAT, PROFILE_VERSION)
}

/// The JSON Schema of the placement (docs/formats/objtier-placement.schema.json is this).
pub fn placement_schema() -> String {
    schema_of::<Placement>(PLACEMENT_FORMAT, PLACEMENT_VERSION)
}

fn schema_of<T: schemars::JsonSchema>(format: &str, version: u32) -> String {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
    // The two fields every reader checks first hold one value each.
    if let Some(properties) = schema.get_mut("properties") {
        properties["format"] = serde_json::json!({"const": format});
        properties["version"] = serde_json::json!({"const": version});
    }
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schemas under docs/formats are the types' own; `OBJTIER_UPDATE_SCHEMAS=1 cargo test
    /// -p objtier-profile` writes them again after a change of the types.
    #[test]
    fn the_documented_schemas_are_current() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/formats");
        for (file, schema) in [
            ("objtier-profile.schema.json", profile_schema()),
            ("objtier-placement.schema.json", placement_schema()),
        ] {
            let path = dir.join(file);
            if std::env::var_os("OBJTIER_UPDATE_SCHEMAS").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &schema).unwrap();
            }
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == schema,
                "{} is not the schema of the types: run OBJTIER_UPDATE_SCHEMAS=1 cargo test -p \
                 objtier-profile, and say what changed in docs/formats.md",
                path.display()
            );
        }
    }

    #[test]
    fn frames_parse() {
        assert_eq!(parse_frame("/usr/bin/a+0x10"), Some(("/usr/bin/a", 16)));
        assert_eq!(
            parse_frame("/p/with+plus.so+0xff"),
            Some(("/p/with+plus.so", 255))
        );
        assert_eq!(parse_frame("a+16"), None);
        assert_eq!(parse_frame("+0x10"), None);
        assert!(check_frames(SiteKind::Site, &[]).is_err());
        assert!(check_frames(SiteKind::SmallObjects, &[]).is_ok());
        assert!(check_frames(SiteKind::SmallObjects, &["a+0x1".into()]).is_err());
    }

    #[test]
    fn long_arrays_are_one_line_an_element() {
        #[derive(Serialize)]
        struct T {
            a: u32,
            sites: Vec<Vec<u32>>,
        }
        let text = to_json_lines(
            &T {
                a: 1,
                sites: vec![vec![1, 2], vec![3]],
            },
            "sites",
        );
        assert!(text.contains("\n    [1,2],\n    [3]\n"), "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["sites"][1][0], 3);
        let empty = to_json_lines(
            &T {
                a: 1,
                sites: vec![],
            },
            "sites",
        );
        assert!(serde_json::from_str::<serde_json::Value>(&empty).is_ok());
    }

    #[test]
    fn writes_are_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.json");
        write_text(&file, "{}\n").unwrap();
        write_text(&file, "{\"a\": 1}\n").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "{\"a\": 1}\n");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );
        assert!(write_text(&dir.path().join("no/such/dir/p.json"), "x").is_err());
    }
}
