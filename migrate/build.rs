//! Embeds every `migrations/<engine>/NNNN_name.sql` of the workspace: one `pub static` list
//! per engine folder (`CLICKHOUSE`, `POSTGRES`, `SQLITE`, `TELEMETRY_SQLITE`), in version
//! order, each file by `include_str!` (so an edit rebuilds). A file name that is not
//! `<version>_<name>.sql`, or two files of one version, stop the build.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    // A directory: Cargo rebuilds when any file under it changes, or one is added.
    println!("cargo:rerun-if-changed={}", root.display());
    let mut engines: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", root.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_dir())
        .collect();
    engines.sort();
    let mut out = String::new();
    for dir in engines {
        let engine = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("engine folder name");
        let mut files: Vec<(i64, String, PathBuf)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "sql"))
            .map(|p| {
                let stem = p
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .expect("file name")
                    .to_owned();
                let version = stem
                    .split_once('_')
                    .and_then(|(v, name)| (!name.is_empty()).then_some(v))
                    .and_then(|v| v.parse::<i64>().ok())
                    .filter(|v| *v > 0)
                    .unwrap_or_else(|| panic!("{}: expected <version>_<name>.sql", p.display()));
                (version, stem, p)
            })
            .collect();
        files.sort();
        for pair in files.windows(2) {
            assert!(
                pair[0].0 != pair[1].0,
                "migrations/{engine}: two files of version {}",
                pair[0].0
            );
        }
        let konst = engine.to_ascii_uppercase().replace('-', "_");
        let _ = writeln!(out, "/// `migrations/{engine}/`, in version order.");
        let _ = writeln!(out, "pub static {konst}: Set = Set {{");
        let _ = writeln!(out, "    engine: {engine:?},");
        let _ = writeln!(out, "    migrations: &[");
        for (version, name, path) in &files {
            let path = path.canonicalize().expect("migration path");
            let _ = writeln!(
                out,
                "        Migration {{ version: {version}, name: {name:?}, sql: include_str!({:?}) }},",
                path.display().to_string()
            );
        }
        let _ = writeln!(out, "    ],");
        let _ = writeln!(out, "}};");
    }
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("sets.rs");
    std::fs::write(&dest, out).expect("write sets.rs");
}
