//! JavaScript guests: `transform.js` made a component by ComponentizeJS
//! (SpiderMonkey), called through its API because `jco componentize` cannot
//! reach its own files on every machine.

use anyhow::{Result, bail};
use std::path::Path;
use std::process::Command;

/// Every WASI feature is left out, so the component imports only the contract.
const SCRIPT: &str = r#"
import { componentize } from '@bytecodealliance/componentize-js';
import { writeFile } from 'node:fs/promises';
const [source, wit, out] = process.argv.slice(1);
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
        bail!("node was not found on PATH; JavaScript guests are built with Node.js 18 or newer");
    }
    if !dir
        .join("node_modules/@bytecodealliance/componentize-js")
        .is_dir()
    {
        bail!(
            "ComponentizeJS is not installed in {}: run `npm install` there",
            dir.display()
        );
    }
    let out = work.join("component.wasm");
    let mut command = Command::new("node");
    command
        .args(["--input-type=module", "-e", SCRIPT])
        .arg(dir.join("transform.js"))
        .arg(wit_dir)
        .arg(&out)
        .current_dir(dir);
    super::run(command, "ComponentizeJS")?;
    Ok(std::fs::read(out)?)
}
