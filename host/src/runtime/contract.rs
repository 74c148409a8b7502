//! Which `weir:transform` contract a component was built against, read from
//! the names of the weir interfaces it imports and exports
//! (`weir:transform/transform@X.Y.Z`). Every component exports `transform`,
//! while some import nothing of weir, so the export gives the version and the
//! imports must agree with it.

use semver::Version;
use wasmtime::Engine;
use wasmtime::component::Component;

const PACKAGE_PREFIX: &str = "weir:transform/";
const EXPORT_PREFIX: &str = "weir:transform/transform@";

/// The contract versions this host can run, oldest first. Each has its own
/// bindings in `bindings`, generated from its own folder under `wit/`.
pub const SUPPORTED: &[Contract] = &[Contract::V0_1, Contract::V0_2, Contract::V0_3];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contract {
    V0_1,
    V0_2,
    V0_3,
}

impl Contract {
    pub fn version(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1.0",
            Contract::V0_2 => "0.2.0",
            Contract::V0_3 => "0.3.0",
        }
    }

    pub fn newest() -> Contract {
        *SUPPORTED.last().expect("at least one contract")
    }
}

/// A patch release of a contract (0.2.1 of 0.2.0) only adds documentation
/// or fixes to it, never a change of shape, so it runs on the same bindings;
/// wasmtime's linker matches its interface names by semver.
fn same_release(supported: &str, given: &str) -> bool {
    match (Version::parse(supported), Version::parse(given)) {
        (Ok(s), Ok(g)) => s.major == g.major && s.minor == g.minor && g.pre.is_empty(),
        _ => false,
    }
}

/// The supported versions as users read them: `0.1.0 to 0.3.0`.
pub fn supported_range() -> String {
    format!(
        "{} to {}",
        SUPPORTED[0].version(),
        Contract::newest().version()
    )
}

/// Reads the contract version from the component's exports and imports and
/// checks that this host supports it; the error names the version and the
/// range.
pub fn detect(engine: &Engine, component: &Component) -> Result<Contract, String> {
    let ty = component.component_type();
    let version = exported_version(engine, &ty)?;
    let expected = format!("@{version}");
    if let Some(other) = ty
        .imports(engine)
        .map(|(name, _)| name)
        .find(|name| name.starts_with(PACKAGE_PREFIX) && !name.ends_with(&expected))
    {
        return Err(format!(
            "it exports `{EXPORT_PREFIX}{version}` but imports `{other}`: its weir interfaces \
             come from different contract versions; rebuild it against one (this weir supports \
             {})",
            supported_range()
        ));
    }
    supported(&version)
}

fn exported_version(
    engine: &Engine,
    ty: &wasmtime::component::types::Component,
) -> Result<String, String> {
    let exported: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let Some(version) = exported
        .iter()
        .find_map(|name| name.strip_prefix(EXPORT_PREFIX))
    else {
        return Err(format!(
            "it does not export `{EXPORT_PREFIX}…`, so it is not a weir transform (it exports: {}); \
             build it against the WIT contract that `weir guest new` writes",
            if exported.is_empty() {
                "nothing".to_string()
            } else {
                exported.join(", ")
            }
        ));
    };
    Ok(version.to_string())
}

fn supported(version_text: &str) -> Result<Contract, String> {
    if let Some(contract) = SUPPORTED
        .iter()
        .find(|c| same_release(c.version(), version_text))
    {
        return Ok(*contract);
    }
    let advice = match Version::parse(version_text) {
        Ok(v) if v > Version::parse(Contract::newest().version()).expect("valid version") => {
            "it is newer than this weir: upgrade weir"
        }
        Ok(_) => "rebuild it against a supported contract",
        Err(_) => "that is not a semantic version",
    };
    Err(format!(
        "it was built against weir:transform@{version_text}; this weir supports {}; {advice}",
        supported_range()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_release_runs_on_its_minor_versions_bindings_and_nothing_else_does() {
        assert_eq!(supported("0.2.0"), Ok(Contract::V0_2));
        assert_eq!(supported("0.2.7"), Ok(Contract::V0_2));
        assert_eq!(supported("0.1.3"), Ok(Contract::V0_1));
        assert_eq!(supported("0.3.2"), Ok(Contract::V0_3));
        let newer = supported("0.4.0").unwrap_err();
        assert!(newer.contains("upgrade weir"), "{newer}");
        assert!(supported("0.2.1-rc1").is_err());
        assert!(supported("0.3.0-rc1").is_err());
        assert!(supported("1.2.0").is_err());
        let older = supported("0.0.9").unwrap_err();
        assert!(older.contains("rebuild it"), "{older}");
    }
}
