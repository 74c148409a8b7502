//! Loading and checking a pipeline file. Every error names the file, the line
//! and what to change.

mod error;
mod interpolate;
pub mod locate;
pub mod model;
mod money;
mod paths;
mod shard;
pub mod staging;

pub use error::ConfigError;
pub use interpolate::InterpolationError;
pub use money::CACHE_FILE_NAME;
pub use shard::{Shard, part_path};
pub use staging::Staging;

pub use model::{
    BatchFallback, BatchMode, CacheSpec, EndpointKind, EndpointMode, EndpointSpec, Format,
    ModelPriceSpec, PipelineSpec, PriceSpec,
};

use model::OnErrorSpec;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

type Result<T, E = ConfigError> = std::result::Result<T, E>;

/// The pipeline file's text, kept so later checks can point at lines in it.
#[derive(Debug, Clone)]
pub struct PipelineFile {
    pub path: PathBuf,
    /// After `${VAR}` interpolation.
    pub text: String,
    /// Of the file as written, before interpolation: secrets interpolated
    /// into it never reach a hash.
    pub raw_sha256: String,
}

impl PipelineFile {
    /// An error located at the key `path` of the document (or the file alone).
    pub fn error_at(&self, key_path: &[&str], message: impl std::fmt::Display) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.clone(),
            line: locate::line_of(&self.text, key_path),
            message: message.to_string(),
        }
    }

    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// Where the stand-ins of this pipeline's objects live.
    pub fn staging(&self) -> Staging {
        Staging::for_dir(self.dir())
    }

    /// The file a path the pipeline names at `key` is read or written as:
    /// against the pipeline's folder, or an object's local stand-in.
    pub fn place(&self, key: &[&str], text: &str) -> Result<PathBuf> {
        self.staging()
            .place(self.dir(), text)
            .map_err(|message| self.error_at(key, message))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ComponentRef {
    Builtin(String),
    File(PathBuf),
}

impl ComponentRef {
    /// A path (it ends in `.wasm` or has a `/`) is a file, taken relative to
    /// `base`; anything else names a built-in component.
    pub fn parse(text: &str, base: &Path) -> Self {
        if Self::names_a_file(text) {
            ComponentRef::File(base.join(text))
        } else {
            ComponentRef::Builtin(text.to_string())
        }
    }

    fn names_a_file(text: &str) -> bool {
        text.ends_with(".wasm") || text.contains('/')
    }
}

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub index: usize,
    pub name: String,
    pub component: ComponentRef,
    /// The `options` mapping as a JSON object.
    pub options_json: String,
    /// (name the component uses, endpoint name).
    pub grants: Vec<(String, String)>,
    pub concurrency: usize,
    /// See `model::TransformSpec::reorder_window`.
    pub reorder_window: usize,
    pub row_deadline: Option<std::time::Duration>,
    pub batch: Option<Batch>,
    pub on_error: OnError,
    pub limits: GuestLimits,
}

/// What a node's component may use; see `model::LimitsSpec`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuestLimits {
    pub cpu_per_call: std::time::Duration,
    pub memory_bytes: usize,
    /// Of all the node's instances together.
    pub node_memory_bytes: usize,
    pub output_bytes_per_row: usize,
    pub max_rows_per_input: usize,
    pub log_bytes_per_row: usize,
    pub attach_bytes_per_row: usize,
    pub stop_after_traps: Option<u32>,
}

impl Default for GuestLimits {
    fn default() -> Self {
        limits_of(&model::LimitsSpec::default())
    }
}

fn limits_of(spec: &model::LimitsSpec) -> GuestLimits {
    let mib = |mb: u64| (mb as usize).saturating_mul(1 << 20);
    let kib = |kb: u64| (kb as usize).saturating_mul(1 << 10);
    GuestLimits {
        cpu_per_call: std::time::Duration::from_millis(spec.cpu_ms_per_call),
        memory_bytes: mib(spec.memory_mb),
        node_memory_bytes: mib(node_memory_mb(spec)),
        output_bytes_per_row: (spec.output_mb_per_row * (1 << 20) as f64) as usize,
        max_rows_per_input: spec.max_rows_per_input,
        log_bytes_per_row: kib(spec.log_kb_per_row),
        attach_bytes_per_row: kib(spec.attach_kb_per_row),
        stop_after_traps: spec.stop_after_traps,
    }
}

/// A node whose instances may grow larger than the default budget gets a
/// budget of at least one instance.
fn node_memory_mb(spec: &model::LimitsSpec) -> u64 {
    spec.node_memory_mb
        .unwrap_or_else(|| model::defaults::node_memory_mb().max(spec.memory_mb))
}

fn check_limits(file: &PipelineFile, key: &str, spec: &model::LimitsSpec) -> Result<GuestLimits> {
    let at = |field: &str, msg: &str| file.error_at(&["transforms", key, "limits", field], msg);
    if spec.cpu_ms_per_call == 0 {
        return Err(at(
            "cpu_ms_per_call",
            "limits.cpu_ms_per_call must be at least 1",
        ));
    }
    let max_cpu_ms = MAX_SECONDS as u64 * 1000;
    if spec.cpu_ms_per_call > max_cpu_ms {
        return Err(at(
            "cpu_ms_per_call",
            &format!(
                "limits.cpu_ms_per_call must be at most {max_cpu_ms} (one year); got {}",
                spec.cpu_ms_per_call
            ),
        ));
    }
    if spec.memory_mb == 0 {
        return Err(at("memory_mb", "limits.memory_mb must be at least 1"));
    }
    if spec.memory_mb > MAX_GUEST_MB {
        return Err(at(
            "memory_mb",
            &format!(
                "limits.memory_mb must be at most {MAX_GUEST_MB} (a component's memory holds at \
                 most 4 GiB); got {}",
                spec.memory_mb
            ),
        ));
    }
    if spec.node_memory_mb == Some(0) {
        return Err(at(
            "node_memory_mb",
            "limits.node_memory_mb must be at least 1",
        ));
    }
    if spec.max_rows_per_input == 0 {
        return Err(at(
            "max_rows_per_input",
            "limits.max_rows_per_input must be at least 1",
        ));
    }
    for (field, value) in [
        ("log_kb_per_row", spec.log_kb_per_row),
        ("attach_kb_per_row", spec.attach_kb_per_row),
    ] {
        if value == 0 {
            return Err(at(field, &format!("limits.{field} must be at least 1")));
        }
    }
    let output_mb = spec.output_mb_per_row;
    if !(output_mb > 0.0 && output_mb <= MAX_GUEST_MB as f64) {
        return Err(at(
            "output_mb_per_row",
            &format!(
                "limits.output_mb_per_row must be a positive number, at most {MAX_GUEST_MB} (a \
                 component's memory holds at most 4 GiB); got {}",
                as_written(output_mb)
            ),
        ));
    }
    if spec.stop_after_traps == Some(0) {
        return Err(at(
            "stop_after_traps",
            "limits.stop_after_traps must be at least 1",
        ));
    }
    Ok(limits_of(spec))
}

#[derive(Debug, Clone)]
pub struct Batch {
    pub count: usize,
    pub timeout: Option<std::time::Duration>,
    pub mode: BatchMode,
}

/// What becomes of a row that fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Counted, reported and audited as failed (the run exits with status 2).
    Fail,
    /// Dropped on purpose: audited as discarded.
    Discard,
    /// Written with its error to `Pipeline::error_sinks[i]`: audited as quarantined.
    Quarantine(usize),
}

#[derive(Debug, Clone)]
pub struct DataFile {
    pub path: PathBuf,
    pub format: Format,
    /// A CSV's field separator as the file gives it. None: a sink's is a
    /// comma, a source's is told from its header line.
    pub delimiter: Option<u8>,
    /// A source's text encoding when it is not UTF-8.
    pub encoding: Option<&'static encoding_rs::Encoding>,
}

impl DataFile {
    /// A regular file rather than a pipe or a device: it can be read more
    /// than once, and its rows are all there to be read.
    pub fn is_regular_file(&self) -> bool {
        std::fs::metadata(&self.path).is_ok_and(|m| m.is_file())
    }
}

#[derive(Debug)]
pub struct Pipeline {
    pub file: PipelineFile,
    pub source: DataFile,
    pub endpoints: BTreeMap<String, EndpointSpec>,
    pub nodes: Vec<NodeConfig>,
    pub sinks: Vec<DataFile>,
    /// Sinks for failed rows, shared by the nodes that name the same path.
    pub error_sinks: Vec<DataFile>,
    /// For rows the source cannot read.
    pub source_on_error: OnError,
    pub audit_path: PathBuf,
    /// The audit database the file names, whatever `--audit` says: a resume
    /// command needs `--audit` only when they differ.
    pub configured_audit_path: PathBuf,
    /// Keep request, response, row and output bodies, not only their hashes.
    pub audit_payloads: bool,
    /// The response store of each endpoint that has `cache:` on.
    pub caches: BTreeMap<String, PathBuf>,
    /// The most the run may spend, in USD.
    pub budget_usd: Option<f64>,
    /// The run stops when this many rows, the first to finish, all failed at
    /// one node with one code (a prompt or a parsing mistake every row
    /// would meet); 0: never.
    pub stop_when_first_rows_fail: u32,
    /// Set when this process runs one shard of the pipeline.
    pub shard: Option<Shard>,
    /// With `shard`: how many of the run's shards run at once, when the
    /// scheduler runs fewer than all of them (`--shards-at-once`).
    pub shards_at_once: Option<u32>,
    /// Where the local stand-ins of the objects it names live.
    pub staging: Staging,
}

impl Pipeline {
    /// Puts the audit database elsewhere (`--audit`), refusing a file the
    /// pipeline reads or writes.
    pub fn set_audit_path(&mut self, path: PathBuf) -> Result<()> {
        let audit = paths::identity(&path);
        let others = std::iter::once(("the source", &self.source))
            .chain(self.sinks.iter().map(|s| ("a sink", s)))
            .chain(self.error_sinks.iter().map(|s| ("an on_error sink", s)));
        for (what, data) in others {
            if paths::identity(&data.path) == audit {
                return Err(ConfigError::AuditSharesFile {
                    audit: path,
                    what,
                    pipeline: self.file.path.clone(),
                });
            }
        }
        self.audit_path = path;
        Ok(())
    }
}

pub const AUDIT_FILE_NAME: &str = "weir-audit.sqlite";

/// Rows a node keeps in flight beyond its endpoints' pool sizes: a row waiting
/// out a retry's back-off stays in flight, and the pools should not wait for
/// rows meanwhile. Each costs one guest instance.
const ROW_WINDOW: usize = 256;

/// Finished rows a node may hold behind a slower one by default. They hold
/// only their output: a few MB at typical row sizes.
pub const DEFAULT_REORDER_WINDOW: usize = 4096;

/// Rows of a node granted a Batch API endpoint that may wait for answers at
/// once, by default: a waiting row keeps its data, not an instance.
pub const BATCH_ROWS_WAITING: usize = 100_000;

/// Reads, interpolates from the process environment, parses and checks.
pub fn load(path: &Path) -> Result<Pipeline> {
    let raw = std::fs::read_to_string(path).map_err(|e| ConfigError::read(path, e))?;
    load_text(path, &raw, |name| std::env::var(name).ok())
}

/// Like `load`, for checking a pipeline without running it: a variable that
/// is not set stands as written (`${OPENAI_API_KEY}`) instead of stopping
/// the check, and is returned, so no secret is needed to validate.
pub fn load_without_secrets(path: &Path) -> Result<(Pipeline, Vec<String>)> {
    let raw = std::fs::read_to_string(path).map_err(|e| ConfigError::read(path, e))?;
    let unset = std::cell::RefCell::new(Vec::new());
    let pipeline = load_text(path, &raw, |name| {
        std::env::var(name).ok().or_else(|| {
            // A reference with a default (`${VAR:-…}`) takes its default.
            if raw.contains(&format!("${{{name}:-")) {
                return None;
            }
            unset.borrow_mut().push(name.to_string());
            Some(format!("${{{name}}}"))
        })
    })?;
    let mut unset = unset.into_inner();
    unset.sort();
    unset.dedup();
    Ok((pipeline, unset))
}

pub fn load_text(path: &Path, raw: &str, env: impl Fn(&str) -> Option<String>) -> Result<Pipeline> {
    let text =
        interpolate::interpolate(raw, env).map_err(|e| ConfigError::interpolation(path, e))?;
    let file = PipelineFile {
        path: path.to_path_buf(),
        text,
        raw_sha256: crate::hashing::sha256_hex(raw),
    };
    if !has_content(&file.text) {
        return Err(ConfigError::Invalid {
            path: file.path,
            line: None,
            message: "the file is empty: a pipeline file names a source, transforms and sinks"
                .into(),
        });
    }
    let spec: PipelineSpec = crate::yaml::from_str(&file.path, &file.text).map_err(|e| {
        match e {
            // A document that is no mapping at all: most likely another file
            // (the source, a sink) given in the pipeline file's place.
            crate::yaml::YamlError::At {
                line: 1,
                message,
                path,
                column,
            } if message.starts_with("expected mapping") => crate::yaml::YamlError::At {
                message: format!(
                    "{message}: a pipeline file is a YAML mapping (`source:`, \
                         `transforms:`, `sinks:`); is {} the pipeline file?",
                    path.display()
                ),
                path,
                line: 1,
                column,
            },
            other => other,
        }
    })?;
    resolve(file, spec)
}

/// Whether YAML text holds anything but blank lines and comments.
fn has_content(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim();
        !line.is_empty() && !line.starts_with('#') && line != "---"
    })
}

/// One transform as the pipeline file writes it, without checking the rest
/// of the file; a variable the environment lacks and that has no default is
/// left as written, so no key is needed. For `weir record-fixtures`.
pub struct WrittenTransform {
    pub component: ComponentRef,
    /// The options as JSON.
    pub options: serde_json::Value,
    /// The endpoint names the component uses, in the file's order.
    pub endpoints: Vec<String>,
    /// SHA-256 of the file as written.
    pub file_sha256: String,
}

pub fn transform_as_written(path: &Path, name: &str) -> Result<WrittenTransform> {
    let raw = std::fs::read_to_string(path).map_err(|e| ConfigError::read(path, e))?;
    let text = interpolate::interpolate(&raw, |var| {
        std::env::var(var)
            .ok()
            .or_else(|| (!raw.contains(&format!("${{{var}:-"))).then(|| format!("${{{var}}}")))
    })
    .map_err(|e| ConfigError::interpolation(path, e))?;
    let spec: PipelineSpec = crate::yaml::from_str(path, &text)?;
    let transform = spec
        .transforms
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| ConfigError::NoSuchTransform {
            path: path.to_path_buf(),
            name: name.to_string(),
        })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    Ok(WrittenTransform {
        component: ComponentRef::parse(&transform.component, dir),
        options: match &transform.options {
            Some(options) => options.clone(),
            None => serde_json::json!({}),
        },
        endpoints: transform
            .endpoints
            .pairs()
            .into_iter()
            .map(|(alias, _)| alias)
            .collect(),
        file_sha256: crate::hashing::sha256_hex(&raw),
    })
}

/// `audit.path` against the pipeline's folder, or the default beside the
/// first sink.
fn audit_path(
    staging: &Staging,
    dir: &Path,
    configured: Option<&str>,
    first_sink: &Path,
) -> std::result::Result<PathBuf, String> {
    match configured {
        Some(p) => staging.place(dir, p),
        None => Ok(first_sink
            .parent()
            .unwrap_or(Path::new("."))
            .join(AUDIT_FILE_NAME)),
    }
}

/// A pipeline file as a plain YAML document, for reading a few paths from
/// it: a variable that is not set stands in as a placeholder instead of
/// stopping the lookup.
fn document_without_secrets(path: &Path) -> Result<serde_json::Value> {
    let raw = std::fs::read_to_string(path).map_err(|e| ConfigError::read(path, e))?;
    let text = interpolate::interpolate(&raw, |name| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| Some(format!("unset-{name}")))
    })
    .map_err(|e| ConfigError::interpolation(path, e))?;
    Ok(crate::yaml::from_str(path, &text)?)
}

/// The audit database a pipeline file names, read without the rest of the
/// pipeline, so that looking at past runs needs none of its API keys.
pub fn audit_path_of(path: &Path) -> Result<PathBuf> {
    let doc = document_without_secrets(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let configured = doc["audit"]["path"].as_str();
    let first_sink = doc["sinks"][0]["path"].as_str().ok_or_else(|| {
        ConfigError::in_file(path, "has no `sinks`, so no audit database beside them")
    })?;
    let staging = Staging::for_dir(dir);
    let first_sink = staging
        .place(dir, first_sink)
        .map_err(|m| ConfigError::in_file(path, m))?;
    audit_path(&staging, dir, configured, &first_sink).map_err(|m| ConfigError::in_file(path, m))
}

/// The response caches a pipeline file's endpoints use, read like
/// `audit_path_of`: without the pipeline's secrets.
pub fn cache_paths_of(path: &Path) -> Result<Vec<PathBuf>> {
    let audit = audit_path_of(path)?;
    let doc = document_without_secrets(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut paths = Vec::new();
    if let Some(endpoints) = doc["endpoints"].as_object() {
        for endpoint in endpoints.values() {
            let spec = match &endpoint["cache"] {
                serde_json::Value::Bool(on) => CacheSpec::Enabled(*on),
                serde_json::Value::String(path) => CacheSpec::Path(path.clone()),
                _ => continue,
            };
            paths.extend(money::cache_path(dir, &spec, &audit));
        }
    }
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// Rows failing alike at the start of a run that stop it, unless the
/// pipeline file says otherwise: twenty in a row, none ok, is no row's bad
/// luck even where most rows fail.
pub const DEFAULT_FIRST_ROWS_FAILING: u32 = 20;

fn resolve(file: PipelineFile, mut spec: PipelineSpec) -> Result<Pipeline> {
    let format = source_format(&file, &spec.source.path, spec.source.format)?;
    let source = DataFile {
        path: existing_file(&file, &["source", "path"], &spec.source.path, "source")?,
        format,
        delimiter: delimiter_of(
            &file,
            &["source", "delimiter"],
            &spec.source.path,
            &spec.source.delimiter,
            format,
        )?,
        encoding: encoding_of(&file, &spec.source.encoding)?,
    };
    for (name, endpoint) in &spec.endpoints {
        check_endpoint(&file, name, endpoint)?;
    }
    for endpoint in spec.endpoints.values_mut() {
        if endpoint.kind == EndpointKind::Anthropic
            && let Some(url) = &mut endpoint.base_url
        {
            *url = anthropic_root(url).to_string();
        }
    }
    let mut error_sinks = Vec::new();
    let source_on_error = match &spec.on_error {
        Some(on_error) => on_error_of(&file, &["on_error"], on_error, &mut error_sinks)?,
        None => OnError::Fail,
    };
    let nodes = resolve_nodes(&file, &spec, source_on_error, &mut error_sinks)?;
    if spec.sinks.is_empty() {
        return Err(file.error_at(
            &["sinks"],
            "at least one sink is needed, e.g. `- path: out.csv`",
        ));
    }
    let mut sinks = Vec::new();
    for (i, sink) in spec.sinks.iter().enumerate() {
        let key = i.to_string();
        let format = format_of(&file, &["sinks", &key], &sink.path, sink.format)?;
        sinks.push(DataFile {
            path: file.place(&["sinks", &key, "path"], &sink.path)?,
            format,
            delimiter: delimiter_of(
                &file,
                &["sinks", &key, "delimiter"],
                &sink.path,
                &sink.delimiter,
                format,
            )?,
            encoding: None,
        });
    }
    let staging = file.staging();
    let audit_path = audit_path(
        &staging,
        file.dir(),
        spec.audit.path.as_deref(),
        &sinks[0].path,
    )
    .map_err(|m| file.error_at(&["audit", "path"], m))?;
    paths::refuse_shared_files(&file, &paths::places(&file, &spec, &audit_path))?;
    let caches = money::caches(&file, &spec.endpoints, &audit_path);
    money::check_budget(&file, spec.budget_usd, &spec.endpoints)?;
    Ok(Pipeline {
        source,
        endpoints: spec.endpoints,
        nodes,
        sinks,
        error_sinks,
        source_on_error,
        configured_audit_path: audit_path.clone(),
        audit_path,
        audit_payloads: spec.audit.payloads,
        caches,
        budget_usd: spec.budget_usd,
        stop_when_first_rows_fail: spec
            .stop_when_first_rows_fail
            .unwrap_or(DEFAULT_FIRST_ROWS_FAILING),
        shard: None,
        shards_at_once: None,
        staging,
        file,
    })
}

/// `discard`, or a sink for failed rows (the same path twice is one sink).
fn on_error_of(
    file: &PipelineFile,
    key: &[&str],
    spec: &OnErrorSpec,
    error_sinks: &mut Vec<DataFile>,
) -> Result<OnError> {
    match spec {
        OnErrorSpec::Keyword(word) if word == "discard" => Ok(OnError::Discard),
        OnErrorSpec::Keyword(word) => Err(file.error_at(
            key,
            format!(
                "on_error: expected `discard` or a sink like `{{path: failed.csv}}`, got `{word}`"
            ),
        )),
        OnErrorSpec::Sink(sink) => {
            let path = file.place(key, &sink.path)?;
            let format = format_of(file, key, &sink.path, sink.format)?;
            if let Some(at) = error_sinks.iter().position(|e| e.path == path) {
                return Ok(OnError::Quarantine(at));
            }
            let delimiter_key = [key, &["delimiter"]].concat();
            let delimiter =
                delimiter_of(file, &delimiter_key, &sink.path, &sink.delimiter, format)?;
            error_sinks.push(DataFile {
                path,
                format,
                delimiter,
                encoding: None,
            });
            Ok(OnError::Quarantine(error_sinks.len() - 1))
        }
    }
}

/// The longest duration a pipeline file may give: one year. No timeout,
/// deadline or retry budget is sensibly longer, so a larger number is a typo
/// or a unit mix-up (milliseconds written as seconds) — and `1e30` seconds
/// is more than a duration can hold at all.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// The most a guest limit in MB may be: a component's 32-bit linear memory
/// holds at most 4 GiB, so neither its memory nor its output can be larger.
pub const MAX_GUEST_MB: u64 = 4096;

/// A duration in seconds, if it is one: more than zero, at most a year.
fn seconds_in_range(seconds: f64) -> Option<std::time::Duration> {
    (seconds > 0.0 && seconds <= MAX_SECONDS).then(|| std::time::Duration::from_secs_f64(seconds))
}

/// What to say of a number of seconds that is not in range.
fn seconds_rule(field: &str, got: f64) -> String {
    format!(
        "{field} must be a positive number of seconds, at most {MAX_SECONDS} (one year); got {}",
        as_written(got)
    )
}

/// A number as a user would write it: `1e30`, not thirty-one digits.
fn as_written(number: f64) -> String {
    if number.is_finite() && number.abs() >= 1e15 {
        format!("{number:e}")
    } else {
        number.to_string()
    }
}

/// An optional duration given in seconds; see [`seconds_in_range`].
fn positive_seconds(seconds: Option<f64>) -> Result<Option<std::time::Duration>, f64> {
    match seconds {
        Some(s) => seconds_in_range(s).map(Some).ok_or(s),
        None => Ok(None),
    }
}

fn batch_of(file: &PipelineFile, key: &str, spec: &model::BatchSpec) -> Result<Batch> {
    let at = |field: &str, msg: &str| file.error_at(&["transforms", key, "batch", field], msg);
    if spec.count == 0 {
        return Err(at("count", "batch.count must be at least 1"));
    }
    let timeout = positive_seconds(spec.timeout_seconds).map_err(|got| {
        at(
            "timeout_seconds",
            &seconds_rule("batch.timeout_seconds", got),
        )
    })?;
    Ok(Batch {
        count: spec.count,
        timeout,
        mode: spec.mode,
    })
}

fn resolve_nodes(
    file: &PipelineFile,
    spec: &PipelineSpec,
    default_on_error: OnError,
    error_sinks: &mut Vec<DataFile>,
) -> Result<Vec<NodeConfig>> {
    let mut names = HashSet::new();
    let mut nodes = Vec::new();
    for (index, t) in spec.transforms.iter().enumerate() {
        let key = index.to_string();
        let at = |field: &str, msg: String| file.error_at(&["transforms", &key, field], msg);
        if t.name.trim().is_empty() {
            return Err(at("name", "a transform needs a non-empty name".into()));
        }
        if !names.insert(t.name.clone()) {
            return Err(at(
                "name",
                format!(
                    "transform name `{}` is used twice; names must be unique",
                    t.name
                ),
            ));
        }
        let component = if ComponentRef::names_a_file(&t.component) {
            ComponentRef::File(existing_file(
                file,
                &["transforms", &key, "component"],
                &t.component,
                "component",
            )?)
        } else {
            ComponentRef::Builtin(t.component.clone())
        };
        let options_json = match &t.options {
            None => "{}".to_string(),
            Some(value @ serde_json::Value::Object(_)) => value.to_string(),
            Some(_) => {
                return Err(at(
                    "options",
                    "options must be a mapping of option names to values".into(),
                ));
            }
        };
        let grants = t.endpoints.pairs();
        let mut pool_total = 0;
        for (_, endpoint) in &grants {
            match spec.endpoints.get(endpoint) {
                Some(e) => pool_total = e.pool_size.saturating_add(pool_total),
                None => {
                    let declared: Vec<&str> = spec.endpoints.keys().map(String::as_str).collect();
                    return Err(at(
                        "endpoints",
                        format!(
                            "endpoint `{endpoint}` is not declared under `endpoints:` (declared: {})",
                            if declared.is_empty() {
                                "none".to_string()
                            } else {
                                declared.join(", ")
                            }
                        ),
                    ));
                }
            }
        }
        // Rows waiting on a provider batch hold no instance, only their
        // data: they are many, so that each batch is large.
        let batch_mode = grants.iter().any(|(_, endpoint)| {
            spec.endpoints
                .get(endpoint)
                .is_some_and(|e| e.mode == EndpointMode::Batch)
        });
        let concurrency = match t.concurrency {
            Some(0) => return Err(at("concurrency", "concurrency must be at least 1".into())),
            Some(c) => c,
            None if batch_mode => BATCH_ROWS_WAITING,
            None if pool_total > 0 => pool_total
                .saturating_mul(2)
                .max(pool_total.saturating_add(ROW_WINDOW)),
            None => std::thread::available_parallelism().map_or(2, |n| n.get()),
        };
        let reorder_window = match t.reorder_window {
            Some(0) => {
                return Err(at(
                    "reorder_window",
                    "reorder_window must be at least 1".into(),
                ));
            }
            Some(w) => w,
            None if batch_mode => BATCH_ROWS_WAITING,
            None => DEFAULT_REORDER_WINDOW,
        };
        let row_deadline = positive_seconds(t.row_deadline_seconds).map_err(|got| {
            at(
                "row_deadline_seconds",
                seconds_rule("row_deadline_seconds", got),
            )
        })?;
        let batch = t
            .batch
            .as_ref()
            .map(|b| batch_of(file, &key, b))
            .transpose()?;
        let on_error = match &t.on_error {
            Some(on_error) => on_error_of(
                file,
                &["transforms", &key, "on_error"],
                on_error,
                error_sinks,
            )?,
            None => default_on_error,
        };
        nodes.push(NodeConfig {
            index,
            name: t.name.clone(),
            component,
            options_json,
            grants,
            concurrency,
            reorder_window,
            row_deadline,
            batch,
            on_error,
            limits: check_limits(file, &key, &t.limits)?,
        });
    }
    Ok(nodes)
}

/// The most requests one provider batch may hold (OpenAI: 50,000 a file;
/// Azure OpenAI global batch and Anthropic: 100,000).
pub fn provider_batch_limit(kind: EndpointKind) -> usize {
    match kind {
        EndpointKind::Openai => 50_000,
        EndpointKind::AzureOpenai | EndpointKind::Anthropic => 100_000,
        EndpointKind::Http => 0,
    }
}

fn check_batch_mode(file: &PipelineFile, name: &str, e: &EndpointSpec) -> Result<()> {
    let at = |field: &str, msg: String| file.error_at(&["endpoints", name, field], msg);
    if e.mode == EndpointMode::Online {
        return Ok(());
    }
    if e.kind == EndpointKind::Http {
        return Err(at(
            "mode",
            format!(
                "endpoint `{name}`: mode batch needs a provider with a Batch API: kind openai, \
                 azure-openai or anthropic"
            ),
        ));
    }
    if seconds_in_range(e.batch_poll_seconds).is_none_or(|s| s.as_secs_f64() < 0.05) {
        return Err(at(
            "batch_poll_seconds",
            format!(
                "endpoint `{name}`: batch_poll_seconds must be from 0.05 seconds to a year, got {}",
                e.batch_poll_seconds
            ),
        ));
    }
    let limit = provider_batch_limit(e.kind);
    if let Some(max) = e.batch_max_requests
        && !(1..=limit).contains(&max)
    {
        return Err(at(
            "batch_max_requests",
            format!("endpoint `{name}`: batch_max_requests must be from 1 to {limit}, got {max}"),
        ));
    }
    Ok(())
}

/// A first-byte timeout is part of the whole request's: one beyond it would
/// never fire.
fn check_first_byte_timeout(name: &str, first_byte: f64, total: f64) -> Result<(), String> {
    const FIELD: &str = "first_byte_timeout_seconds";
    if seconds_in_range(first_byte).is_none() {
        return Err(format!(
            "endpoint `{name}`: {}",
            seconds_rule(FIELD, first_byte)
        ));
    }
    if first_byte > total {
        return Err(format!(
            "endpoint `{name}`: {FIELD} ({first_byte} s) must not exceed \
             request_timeout_seconds ({total} s)"
        ));
    }
    Ok(())
}

fn check_endpoint(file: &PipelineFile, name: &str, e: &EndpointSpec) -> Result<()> {
    let at = |field: &str, msg: String| file.error_at(&["endpoints", name, field], msg);
    if e.pool_size == 0 {
        return Err(at(
            "pool_size",
            format!("endpoint `{name}`: pool_size must be at least 1"),
        ));
    }
    if e.initial_concurrency == 0 {
        return Err(at(
            "initial_concurrency",
            format!("endpoint `{name}`: initial_concurrency must be at least 1"),
        ));
    }
    if e.max_answer_mb == 0 {
        return Err(at(
            "max_answer_mb",
            format!("endpoint `{name}`: max_answer_mb must be at least 1"),
        ));
    }
    for (field, value) in [
        ("requests_per_minute", e.requests_per_minute),
        ("tokens_per_minute", e.tokens_per_minute),
    ] {
        if value == Some(0) {
            return Err(at(
                field,
                format!(
                    "endpoint `{name}`: {field} must be at least 1 (leave it out for no limit)"
                ),
            ));
        }
    }
    for (field, value) in [
        ("max_capacity_retry_seconds", e.max_capacity_retry_seconds),
        ("request_timeout_seconds", e.request_timeout_seconds),
        ("connect_timeout_seconds", e.connect_timeout_seconds),
        ("breaker_cooldown_seconds", e.breaker_cooldown_seconds),
        ("abort_after_seconds", e.abort_after_seconds),
        ("min_attempt_timeout_seconds", e.min_attempt_timeout_seconds),
    ] {
        if seconds_in_range(value).is_none() {
            return Err(at(
                field,
                format!("endpoint `{name}`: {}", seconds_rule(field, value)),
            ));
        }
    }
    if !(e.attempt_timeout_factor.is_finite() && e.attempt_timeout_factor >= 1.0) {
        return Err(at(
            "attempt_timeout_factor",
            format!(
                "endpoint `{name}`: attempt_timeout_factor must be a number of at least 1, got {}",
                e.attempt_timeout_factor
            ),
        ));
    }
    if let Some(first_byte) = e.first_byte_timeout_seconds {
        check_first_byte_timeout(name, first_byte, e.request_timeout_seconds)
            .map_err(|msg| at("first_byte_timeout_seconds", msg))?;
    }
    if let Some(price) = &e.price {
        money::check_price(file, name, price)?;
    }
    check_batch_mode(file, name, e)?;
    // `${VAR}` stands for a variable not set while a pipeline is checked
    // without its secrets (`load_without_secrets`); `run` needs it set.
    if let Some(url) = &e.base_url
        && !url.starts_with("${")
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(at(
            "base_url",
            format!("endpoint `{name}`: base_url must start with http:// or https://, got `{url}`"),
        ));
    }
    if let Some(url) = &e.base_url
        && let Some((path, base)) = path_weir_adds(e.kind, url)
    {
        return Err(at(
            "base_url",
            format!(
                "endpoint `{name}`: base_url holds the path weir adds to it ({path}); give the \
                 API's base without it: {base}"
            ),
        ));
    }
    match e.kind {
        EndpointKind::Openai | EndpointKind::Anthropic => {}
        EndpointKind::AzureOpenai => {
            for (field, value) in [
                ("base_url", &e.base_url),
                ("deployment", &e.deployment),
                ("api_version", &e.api_version),
                ("api_key", &e.api_key),
            ] {
                if value.is_none() {
                    return Err(file.error_at(
                        &["endpoints", name],
                        format!("endpoint `{name}` of kind azure-openai needs `{field}`"),
                    ));
                }
            }
        }
        EndpointKind::Http => {
            if e.base_url.is_none() {
                return Err(file.error_at(
                    &["endpoints", name],
                    format!("endpoint `{name}` of kind http needs `base_url`"),
                ));
            }
        }
    }
    Ok(())
}

/// The request path an endpoint of `kind` puts after its base_url, when
/// `url` already holds it (a URL copied whole from a provider's docs), and
/// the base to give instead.
fn path_weir_adds(kind: EndpointKind, url: &str) -> Option<(&'static str, String)> {
    let url = url.trim_end_matches('/');
    match kind {
        EndpointKind::Openai => url
            .strip_suffix("/chat/completions")
            .map(|base| ("/chat/completions", base.to_string())),
        EndpointKind::Anthropic => url
            .strip_suffix("/messages")
            .map(|base| ("/messages", anthropic_root(base).to_string())),
        EndpointKind::AzureOpenai => url
            .find("/openai/deployments")
            .map(|at| ("/openai/deployments/…", url[..at].to_string())),
        EndpointKind::Http => None,
    }
}

/// An Anthropic base_url given with its version (`…/v1`, as OpenAI's bases
/// are): weir adds `/v1/messages` to the host's root, so the version goes.
fn anthropic_root(url: &str) -> &str {
    let url = url.trim_end_matches('/');
    url.strip_suffix("/v1").unwrap_or(url)
}

fn existing_file(file: &PipelineFile, key: &[&str], relative: &str, what: &str) -> Result<PathBuf> {
    let path = file.place(key, relative)?;
    // An object is fetched into its stand-in when a run begins, and a
    // missing one is named then.
    if staging::is_url(relative) {
        return Ok(path);
    }
    // Anything readable but a folder: a named pipe can feed a pipeline too.
    if !path.exists() || path.is_dir() {
        return Err(file.error_at(
            key,
            format!(
                "{what} file `{relative}` not found (looked for {})",
                path.display()
            ),
        ));
    }
    Ok(path)
}

/// A CSV's field separator as a pipeline file gives it: one character, as
/// `";"`, `"\t"` or `tab`, `"|"`; a tab for a `.tsv` file that gives none.
fn delimiter_of(
    file: &PipelineFile,
    key: &[&str],
    path: &str,
    given: &Option<String>,
    format: Format,
) -> Result<Option<u8>> {
    let Some(text) = given else {
        let tsv = format == Format::Csv && extension(path) == Some("tsv");
        return Ok(tsv.then_some(b'\t'));
    };
    if format != Format::Csv {
        return Err(file.error_at(key, "delimiter: only a CSV file has one"));
    }
    let byte = match text.as_str() {
        "tab" | "\\t" => b'\t',
        one if one.len() == 1 => one.as_bytes()[0],
        _ => 0,
    };
    if !byte.is_ascii() || matches!(byte, 0 | b'"' | b'\n' | b'\r') {
        return Err(file.error_at(
            key,
            format!(
                "delimiter: expected one character such as \",\", \";\", \"|\" or tab, got \
                 {text:?}"
            ),
        ));
    }
    Ok(Some(byte))
}

/// A source's encoding by its label (`windows-1252`, `latin1`, `utf-16le`,
/// `shift_jis`, …); none for UTF-8, which is read as it is.
fn encoding_of(
    file: &PipelineFile,
    given: &Option<String>,
) -> Result<Option<&'static encoding_rs::Encoding>> {
    let Some(label) = given else {
        return Ok(None);
    };
    match encoding_rs::Encoding::for_label(label.trim().as_bytes()) {
        Some(encoding) if encoding == encoding_rs::UTF_8 => Ok(None),
        Some(encoding) => Ok(Some(encoding)),
        None => Err(file.error_at(
            &["source", "encoding"],
            format!(
                "encoding: `{label}` is not an encoding weir knows; give a label such as utf-8, \
                 windows-1252, latin1, utf-16le or shift_jis"
            ),
        )),
    }
}

fn extension(path: &str) -> Option<&str> {
    Path::new(path).extension().and_then(|e| e.to_str())
}

/// A source's format: a sink's, or `json`.
fn source_format(file: &PipelineFile, path: &str, given: Option<Format>) -> Result<Format> {
    match (given, extension(path)) {
        (Some(format), _) => Ok(format),
        (None, Some("json")) => Ok(Format::Json),
        (None, _) => format_of(file, &["source"], path, None),
    }
}

/// A sink's format, given or told by its extension. A sink writes a row as
/// soon as it is done, so that a run stopped half-way keeps them and a
/// resume appends to them: JSON Lines, not one array.
fn format_of(
    file: &PipelineFile,
    key: &[&str],
    path: &str,
    given: Option<Format>,
) -> Result<Format> {
    const LINES: &str = "a sink writes CSV or JSON Lines (one object a line, what `.json` \
                         tools such as pandas read with lines=True)";
    match (given, extension(path)) {
        (Some(Format::Json), _) => Err(file.error_at(
            &[key, &["format"]].concat(),
            format!("format: json is for a source; {LINES}: give `format: jsonl`"),
        )),
        (Some(format), _) => Ok(format),
        (None, Some("csv" | "tsv")) => Ok(Format::Csv),
        (None, Some("jsonl" | "ndjson")) => Ok(Format::Jsonl),
        (None, Some("json")) => Err(file.error_at(
            key,
            format!("`{path}`: {LINES}; name it .jsonl, or add `format: jsonl`"),
        )),
        (None, _) => Err(file.error_at(
            key,
            format!(
                "cannot tell the format of `{path}` from its extension (.csv, .tsv, .jsonl, \
                 and .json for a source); add `format: csv` or `format: jsonl`"
            ),
        )),
    }
}

#[cfg(test)]
mod tests;
