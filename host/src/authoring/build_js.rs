//! JavaScript guests: `transform.js` made a component by ComponentizeJS
//! (SpiderMonkey), called through its API because `jco componentize` cannot
//! reach its own files on every machine.
//!
//! ComponentizeJS takes one module and resolves no packages, so a guest that
//! imports any (`weir-sdk`, say) is first bundled into one module with
//! rolldown, from the guest's own `node_modules`. The bundle resolves with
//! the `weir` export condition, under which `weir-sdk` reaches the host
//! through the contract's imports; the `weir:` imports stay imports.

use crate::context::Context;
use std::path::Path;
use std::process::Command;

use super::BuildError;

type Result<T, E = BuildError> = std::result::Result<T, E>;

/// Every WASI feature is left out, so the component imports only the contract.
const SCRIPT: &str = r#"
import { componentize } from '@bytecodealliance/componentize-js';
import { writeFile } from 'node:fs/promises';
let [source, wit, out, bundled] = process.argv.slice(1);
if (bundled) {
  const { rolldown } = await import('rolldown');
  const bundle = await rolldown({
    input: source,
    external: [/^weir:/],
    platform: 'neutral',
    resolve: { conditionNames: ['weir', 'import', 'default'] },
    logLevel: 'warn',
  });
  await bundle.write({ file: bundled, format: 'es', codeSplitting: false });
  await bundle.close();
  source = bundled;
}
const { component } = await componentize({
  sourcePath: source,
  witPath: wit,
  worldName: 'node',
  disableFeatures: ['stdio', 'random', 'clocks', 'http', 'fetch-event'],
});
await writeFile(out, component);
"#;

pub fn build(dir: &Path, wit_dir: &Path, work: &Path) -> Result<Vec<u8>> {
    if !super::toolchain::which("node") {
        return Err(BuildError::Invalid(
            "node was not found on PATH; JavaScript guests are built with Node.js 18 or newer"
                .into(),
        ));
    }
    if !dir
        .join("node_modules/@bytecodealliance/componentize-js")
        .is_dir()
    {
        return Err(BuildError::Invalid(format!(
            "ComponentizeJS is not installed in {}: run `npm install` there",
            dir.display()
        )));
    }
    let source = dir.join("transform.js");
    let text = std::fs::read_to_string(&source)
        .with_context(|| format!("cannot read {}", source.display()))?;
    let bundle = if dir.join("node_modules/rolldown").is_dir() {
        Some(work.join("bundle.js"))
    } else if let Some(module) = foreign_import(&text) {
        return Err(BuildError::Invalid(format!(
            "{} imports `{module}`, so it must be bundled first, with rolldown, which is not \
             installed in {}: add `\"rolldown\": \"1.3.2\"` to devDependencies in package.json \
             and run `npm install`",
            source.display(),
            dir.display()
        )));
    } else {
        None
    };
    let out = work.join("component.wasm");
    let mut command = Command::new("node");
    command
        .args(["--input-type=module", "-e", SCRIPT])
        .arg(&source)
        .arg(wit_dir)
        .arg(&out);
    if let Some(bundle) = &bundle {
        command.arg(bundle);
    }
    command.current_dir(dir);
    super::run(command, "ComponentizeJS")?;
    Ok(std::fs::read(out)?)
}

/// The first module `text` imports, or exports from, other than the
/// contract's own (`weir:…`): ComponentizeJS would not bring it along.
fn foreign_import(text: &str) -> Option<&str> {
    let mut rest = text;
    while let Some(at) = rest.find(['\'', '"']) {
        let before = rest[..at].trim_end();
        let quote = rest[at..].chars().next()?;
        let after = &rest[at + 1..];
        let end = after.find(quote)?;
        let module = &after[..end];
        let names_a_module = before.ends_with("from") || before.ends_with("import");
        if names_a_module && !module.starts_with("weir:") {
            return Some(module);
        }
        rest = &after[end + 1..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::foreign_import;

    #[test]
    fn finds_imports_of_packages_and_files_but_not_of_the_contract() {
        let contract = "import { send } from 'weir:transform/executor@0.2.0';\nconst a = \"from\";";
        assert_eq!(foreign_import(contract), None);
        let sdk = "import { send } from \"weir:transform/executor@0.2.0\";\nimport {\n  Chat,\n} from 'weir-sdk';";
        assert_eq!(foreign_import(sdk), Some("weir-sdk"));
        assert_eq!(
            foreign_import("import './side-effect.js';"),
            Some("./side-effect.js")
        );
        assert_eq!(
            foreign_import("export * from \"./lib.js\";"),
            Some("./lib.js")
        );
    }
}
