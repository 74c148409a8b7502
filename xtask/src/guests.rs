//! Builds the built-in guests into components and keeps `guests/dist/` honest:
//! a manifest records the hash of the sources each component was built from.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use weir::authoring::{
    componentize,
    toolchain::{self, Toolchain},
};

const DIST: &str = "guests/dist";
const MANIFEST: &str = "guests/dist/manifest.json";

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Entry {
    /// SHA-256 over the guest's own sources and the WIT contract.
    source_sha256: String,
    component_sha256: String,
    bytes: usize,
}

type Manifest = BTreeMap<String, Entry>;

struct Guest {
    /// The built-in name users write in `component:` (the folder name).
    name: String,
    package: String,
    dir: PathBuf,
}

pub fn build_all(root: &Path) -> Result<()> {
    let toolchain = Toolchain::detect()?;
    eprintln!("building guests with the {}", toolchain.describe());
    let target_dir = root.join("target/guests");
    let mut manifest = Manifest::new();
    fs::create_dir_all(root.join(DIST))?;
    for guest in discover(root)? {
        let status = toolchain
            .cargo_build()
            .args(["--package", &guest.package, "--profile", "guest"])
            .arg("--target-dir")
            .arg(&target_dir)
            .current_dir(root)
            .status()
            .with_context(|| format!("running cargo for guest `{}`", guest.name))?;
        if !status.success() {
            bail!("guest `{}` failed to build", guest.name);
        }
        let core_path = target_dir
            .join(toolchain::TARGET)
            .join("guest")
            .join(format!("{}.wasm", guest.package.replace('-', "_")));
        let core =
            fs::read(&core_path).with_context(|| format!("reading {}", core_path.display()))?;
        let component = componentize(&core).with_context(|| format!("guest `{}`", guest.name))?;
        let out = root.join(DIST).join(format!("{}.wasm", guest.name));
        fs::write(&out, &component)?;
        eprintln!(
            "  {} -> {} ({} bytes)",
            guest.name,
            out.display(),
            component.len()
        );
        manifest.insert(
            guest.name.clone(),
            Entry {
                source_sha256: source_hash(root, &guest)?,
                component_sha256: hex::encode(Sha256::digest(&component)),
                bytes: component.len(),
            },
        );
    }
    fs::write(
        root.join(MANIFEST),
        serde_json::to_string_pretty(&manifest)? + "\n",
    )?;
    Ok(())
}

pub fn check_all(root: &Path) -> Result<()> {
    let text = fs::read_to_string(root.join(MANIFEST))
        .with_context(|| format!("reading {MANIFEST}; run `cargo xtask build-guests`"))?;
    let manifest: Manifest = serde_json::from_str(&text).context("parsing the guest manifest")?;
    let mut stale = Vec::new();
    for guest in discover(root)? {
        let Some(entry) = manifest.get(&guest.name) else {
            stale.push(format!("{}: not built", guest.name));
            continue;
        };
        if entry.source_sha256 != source_hash(root, &guest)? {
            stale.push(format!(
                "{}: sources changed since the component was built",
                guest.name
            ));
        }
        let bytes = fs::read(root.join(DIST).join(format!("{}.wasm", guest.name)))
            .with_context(|| format!("reading the component of `{}`", guest.name))?;
        if hex::encode(Sha256::digest(&bytes)) != entry.component_sha256 {
            stale.push(format!(
                "{}: component differs from the manifest",
                guest.name
            ));
        }
    }
    if !stale.is_empty() {
        bail!(
            "stale guest components in {DIST}:\n  {}\nrun `cargo xtask build-guests` and commit the result",
            stale.join("\n  ")
        );
    }
    eprintln!("guest components are fresh ({} checked)", manifest.len());
    Ok(())
}

fn discover(root: &Path) -> Result<Vec<Guest>> {
    let mut guests = Vec::new();
    for entry in fs::read_dir(root.join("guests"))? {
        let dir = entry?.path();
        let manifest = dir.join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        let text = fs::read_to_string(&manifest)?;
        let package = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = "))
            .map(|v| v.trim_matches('"').to_string())
            .with_context(|| format!("{} has no package name", manifest.display()))?;
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        guests.push(Guest { name, package, dir });
    }
    guests.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(guests)
}

/// Hashes file paths and contents, in a stable order, of the guest's folder,
/// of the WIT contracts and of the Rust SDK guests may build on. Markdown is
/// left out: documentation changes nothing that is built.
fn source_hash(root: &Path, guest: &Guest) -> Result<String> {
    let mut files = Vec::new();
    collect_files(&guest.dir, &mut files)?;
    collect_files(&root.join("wit"), &mut files)?;
    collect_files(&root.join("sdk/rust"), &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    for file in files {
        let relative = file.strip_prefix(root).unwrap_or(&file);
        hasher.update(relative.to_string_lossy().as_bytes());
        hasher.update([0]);
        hasher.update(fs::read(&file)?);
        hasher.update([0]);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            collect_files(&path, out)?;
        } else if path.extension().is_none_or(|e| e != "md") {
            out.push(path);
        }
    }
    Ok(())
}
