//! `weir guest new`: a new guest folder that builds and passes its fixtures
//! out of the box. The templates are the example guests in
//! `examples/guests/`, so what CI builds and tests is what users get.

use crate::context::Context;
use std::path::{Path, PathBuf};

use super::BuildError;

type Result<T, E = BuildError> = std::result::Result<T, E>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    Python,
    Js,
    C,
}

macro_rules! template {
    ($lang:literal, [$($file:literal),* $(,)?]) => {
        &[$(($file, include_str!(concat!("../../../examples/guests/topic-", $lang, "/", $file)))),*]
    };
}

/// Files every example has besides its sources.
const COMMON: [&str; 5] = [
    "README.md",
    "fixtures.yaml",
    "pipeline.yaml",
    "tickets.csv",
    ".gitignore",
];

impl Language {
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::Python => "Python",
            Language::Js => "JavaScript",
            Language::C => "C",
        }
    }

    /// The language of the guest in `dir`, from the files that define it.
    pub fn of(dir: &Path) -> Result<Self> {
        let has = |name: &str| dir.join(name).is_file();
        if has("Cargo.toml") {
            return Ok(Language::Rust);
        }
        if has("package.json") {
            return Ok(Language::Js);
        }
        if has("app.py") {
            return Ok(Language::Python);
        }
        let has_c = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .any(|e| e.path().extension().is_some_and(|x| x == "c"));
        if has_c {
            return Ok(Language::C);
        }
        Err(BuildError::Invalid(format!(
            "{} holds no guest: expected Cargo.toml (Rust), package.json (JavaScript), \
             app.py (Python) or .c files (C)",
            dir.display()
        )))
    }

    /// The commands that install a new guest's toolchain and SDK and run
    /// its native tests, from inside its folder.
    pub fn setup_and_native_tests(self) -> Option<&'static str> {
        match self {
            Language::Rust => Some("cargo test"),
            Language::Python => Some(
                "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt \
                 && .venv/bin/python -m pytest",
            ),
            Language::Js => Some("npm install && node --test"),
            Language::C => None,
        }
    }

    /// The folder name of this language's example.
    fn example(self) -> &'static str {
        match self {
            Language::Rust => "topic-rust",
            Language::Python => "topic-python",
            Language::Js => "topic-js",
            Language::C => "topic-c",
        }
    }

    fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Language::Rust => template!(
                "rust",
                [
                    "Cargo.toml",
                    "src/lib.rs",
                    "README.md",
                    "fixtures.yaml",
                    "pipeline.yaml",
                    "tickets.csv",
                    ".gitignore"
                ]
            ),
            Language::Python => template!(
                "python",
                [
                    "app.py",
                    "test_app.py",
                    "requirements.txt",
                    "README.md",
                    "fixtures.yaml",
                    "pipeline.yaml",
                    "tickets.csv",
                    ".gitignore"
                ]
            ),
            Language::Js => template!(
                "js",
                [
                    "transform.js",
                    "transform.test.js",
                    "package.json",
                    "README.md",
                    "fixtures.yaml",
                    "pipeline.yaml",
                    "tickets.csv",
                    ".gitignore"
                ]
            ),
            Language::C => template!(
                "c",
                [
                    "topic.c",
                    "third_party/yyjson/yyjson.c",
                    "third_party/yyjson/yyjson.h",
                    "third_party/yyjson/LICENSE",
                    "README.md",
                    "fixtures.yaml",
                    "pipeline.yaml",
                    "tickets.csv",
                    ".gitignore",
                ]
            ),
        }
    }
}

/// Writes a new `language` guest into the folder `path` (which must not
/// exist), named after the folder.
pub fn new_guest(language: Language, path: &Path) -> Result<PathBuf> {
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        BuildError::Invalid("give the new guest's folder, e.g. `my-topic`".into())
    })?;
    if !name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    {
        return Err(BuildError::Invalid(format!(
            "`{name}`: a guest name starts with a lowercase letter and has only a-z, 0-9, - and _"
        )));
    }
    if path.exists() {
        return Err(BuildError::Invalid(format!(
            "{} already exists",
            path.display()
        )));
    }
    debug_assert!(
        COMMON
            .iter()
            .all(|c| language.files().iter().any(|(f, _)| f == c))
    );
    // Every file is made before any is written, so a refusal leaves no
    // half-made folder behind.
    let mut files = Vec::new();
    for (file, text) in language.files() {
        let text = text.replace(language.example(), name);
        let text = match *file {
            "Cargo.toml" => with_sdk(&text),
            "requirements.txt" => with_local_sdk(&text, "../../../sdk/python", "python")?,
            "package.json" => with_local_sdk(&text, "file:../../../sdk/js", "js")?,
            _ => text,
        };
        files.push((path.join(file), text));
    }
    for (target, text) in files {
        std::fs::create_dir_all(target.parent().expect("a file in a folder"))?;
        std::fs::write(&target, text).with_context(|| format!("writing {}", target.display()))?;
    }
    Ok(path.to_path_buf())
}

/// Points a new Rust guest at the SDK: the source tree this weir was built
/// from when it is still there, else the published crate.
fn with_sdk(manifest: &str) -> String {
    const EXAMPLE_DEP: &str = "path = \"../../../sdk/rust\"";
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/rust");
    let dependency = match std::fs::canonicalize(&sdk) {
        Ok(dir) if dir.join("Cargo.toml").is_file() => {
            format!("path = {:?}", dir.display().to_string())
        }
        _ => format!("version = \"{}\"", env!("CARGO_PKG_VERSION")),
    };
    manifest.replace(EXAMPLE_DEP, &dependency)
}

/// Points a new Python or JavaScript guest at the SDK of the source tree
/// this weir was built from, by absolute path, so the guest finds it
/// wherever it is made. These SDKs are not published to a registry, so
/// without that tree there is nothing to point at.
fn with_local_sdk(text: &str, example_dep: &str, sdk: &str) -> Result<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sdk")
        .join(sdk);
    let found = std::fs::canonicalize(&dir)
        .ok()
        .filter(|d| d.join("pyproject.toml").is_file() || d.join("package.json").is_file());
    let Some(dir) = found else {
        return Err(BuildError::Invalid(format!(
            "the {sdk} SDK is not at {}, in the source tree this weir was built from; \
             install weir from a checkout of weir that has sdk/{sdk} (`cargo install --path host`)",
            dir.display()
        )));
    };
    let dependency = match sdk {
        "js" => format!("file:{}", dir.display()),
        _ => dir.display().to_string(),
    };
    Ok(text.replace(example_dep, &dependency))
}
