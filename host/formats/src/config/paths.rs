//! Every file a pipeline reads or writes is a different file: a sink over the
//! source would destroy the input, and two outputs over one file would
//! destroy each other. Checked before any file is touched, naming both places.

use super::ConfigError;
use super::PipelineFile;
use super::model::{OnErrorSpec, PipelineSpec};
use std::path::{Component, Path, PathBuf};

/// A file the pipeline uses and where the pipeline file names it.
pub struct Place {
    pub path: PathBuf,
    /// Where in the document; empty when the file is not named there.
    pub key: Vec<String>,
    pub what: &'static str,
}

impl Place {
    fn new(path: PathBuf, key: &[&str], what: &'static str) -> Self {
        Self {
            path,
            key: key.iter().map(|k| k.to_string()).collect(),
            what,
        }
    }
}

/// The places of the source, the sinks, the on_error sinks and the audit
/// database, as the file names them.
pub fn places(file: &PipelineFile, spec: &PipelineSpec, audit: &Path) -> Vec<Place> {
    // Each path was placed once already, where a bad one was refused.
    let place = |file: &PipelineFile, text: &str| {
        file.staging()
            .place(file.dir(), text)
            .unwrap_or_else(|_| file.dir().join(text))
    };
    let dir = file.dir();
    let mut places = vec![Place::new(
        place(file, &spec.source.path),
        &["source", "path"],
        "the source",
    )];
    for (i, sink) in spec.sinks.iter().enumerate() {
        let key = i.to_string();
        places.push(Place::new(
            place(file, &sink.path),
            &["sinks", &key, "path"],
            "a sink",
        ));
    }
    if let Some(OnErrorSpec::Sink(sink)) = &spec.on_error {
        places.push(Place::new(
            place(file, &sink.path),
            &["on_error"],
            "an on_error sink",
        ));
    }
    for (i, t) in spec.transforms.iter().enumerate() {
        if let Some(OnErrorSpec::Sink(sink)) = &t.on_error {
            let key = i.to_string();
            places.push(Place::new(
                place(file, &sink.path),
                &["transforms", &key, "on_error"],
                "an on_error sink",
            ));
        }
    }
    for (name, endpoint) in &spec.endpoints {
        if let Some(path) = super::money::cache_path(dir, &endpoint.cache, audit) {
            places.push(Place::new(
                path,
                &["endpoints", name, "cache"],
                "a response cache",
            ));
        }
    }
    let audit_key: &[&str] = if spec.audit.path.is_some() {
        &["audit", "path"]
    } else {
        &[]
    };
    places.push(Place::new(
        audit.to_path_buf(),
        audit_key,
        "the audit database",
    ));
    places
}

/// Refuses two places that are one file, unless both are on_error sinks or
/// both response caches (nodes and endpoints may share one).
pub fn refuse_shared_files(file: &PipelineFile, places: &[Place]) -> Result<(), ConfigError> {
    let identities: Vec<PathBuf> = places.iter().map(|p| identity(&p.path)).collect();
    for (j, later) in places.iter().enumerate() {
        for (i, earlier) in places[..j].iter().enumerate() {
            let shareable = matches!(earlier.what, "an on_error sink" | "a response cache")
                && later.what == earlier.what;
            if identities[i] != identities[j] || shareable {
                continue;
            }
            let harm = if earlier.what == "the source" {
                "weir would overwrite its own input"
            } else {
                "each would overwrite the other"
            };
            let message = format!(
                "{} `{}` is the same file as {} ({}); {harm}. Give each its own path",
                later.what,
                later.path.display(),
                earlier.what,
                where_named(file, earlier),
            );
            return Err(located(file, later, message));
        }
    }
    Ok(())
}

fn where_named(file: &PipelineFile, place: &Place) -> String {
    let key: Vec<&str> = place.key.iter().map(String::as_str).collect();
    match super::locate::line_of(&file.text, &key).filter(|_| !key.is_empty()) {
        Some(line) => format!("line {line}"),
        None if place.what == "the audit database" => {
            "`audit.path`, or its default beside the first sink".into()
        }
        None => "given on the command line".into(),
    }
}

fn located(file: &PipelineFile, place: &Place, message: String) -> ConfigError {
    let key: Vec<&str> = place.key.iter().map(String::as_str).collect();
    if key.is_empty() {
        return ConfigError::in_file(&file.path, message);
    }
    file.error_at(&key, message)
}

/// One name per file: symbolic links and `..` resolved through the part of
/// the path that exists, the rest taken as written.
pub fn identity(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|dir| dir.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut existing = absolute.clone();
    let mut rest: Vec<PathBuf> = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest
                .iter()
                .rev()
                .fold(real, |acc, part| lexical_join(&acc, part));
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(PathBuf::from(name));
                existing = parent.to_path_buf();
            }
            _ => return lexical(&absolute),
        }
    }
}

fn lexical_join(base: &Path, part: &Path) -> PathBuf {
    lexical(&base.join(part))
}

/// `a/./b/../c` as `a/c`, without asking the file system.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_has_one_identity_however_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("in.csv"), "x").unwrap();
        let a = identity(&dir.path().join("in.csv"));
        assert_eq!(a, identity(&dir.path().join("sub/../in.csv")));
        assert_eq!(a, identity(&dir.path().join("./in.csv")));
        assert_eq!(
            identity(&dir.path().join("out/new.csv")),
            identity(&dir.path().join("sub/../out/./new.csv"))
        );
        assert_ne!(a, identity(&dir.path().join("sub/in.csv")));
        std::os::unix::fs::symlink(dir.path(), dir.path().join("link")).unwrap();
        assert_eq!(a, identity(&dir.path().join("link/in.csv")));
        assert_eq!(
            identity(&dir.path().join("out/new.csv")),
            identity(&dir.path().join("link/out/new.csv"))
        );
    }
}
