//! Prices, budgets and response caches, as the pipeline file sets them.

use super::ConfigError;
use super::PipelineFile;
use super::model::{CacheSpec, EndpointSpec, PriceSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The default store for `cache: true`, beside the audit database.
pub const CACHE_FILE_NAME: &str = "weir-cache.sqlite";

pub fn check_price(
    file: &PipelineFile,
    endpoint: &str,
    price: &PriceSpec,
) -> Result<(), ConfigError> {
    let mut rates = vec![
        (
            vec!["price", "input_per_million"],
            Some(price.input_per_million),
        ),
        (
            vec!["price", "output_per_million"],
            Some(price.output_per_million),
        ),
        (
            vec!["price", "cached_input_per_million"],
            price.cached_input_per_million,
        ),
    ];
    for (model, p) in &price.models {
        for (field, value) in [
            ("input_per_million", Some(p.input_per_million)),
            ("output_per_million", Some(p.output_per_million)),
            ("cached_input_per_million", p.cached_input_per_million),
        ] {
            rates.push((vec!["price", "models", model.as_str(), field], value));
        }
    }
    if let Some(discount) = price.batch_discount
        && !(discount.is_finite() && (0.0..=1.0).contains(&discount))
    {
        return Err(file.error_at(
            &["endpoints", endpoint, "price", "batch_discount"],
            format!(
                "endpoint `{endpoint}`: price.batch_discount is the share taken off for Batch API \
                 answers, from 0 to 1 (0.5 is half price); got {discount}"
            ),
        ));
    }
    for (key, value) in rates {
        let Some(value) = value else { continue };
        if !(value.is_finite() && (0.0..=1_000_000.0).contains(&value)) {
            let mut at = vec!["endpoints", endpoint];
            at.extend(&key);
            return Err(file.error_at(
                &at,
                format!(
                    "endpoint `{endpoint}`: {} must be a price in USD per million tokens, from 0 \
                     to 1000000",
                    key.join(".")
                ),
            ));
        }
    }
    Ok(())
}

/// A budget is a number of USD, and only means something when every
/// endpoint has a price.
pub fn check_budget(
    file: &PipelineFile,
    budget: Option<f64>,
    endpoints: &BTreeMap<String, EndpointSpec>,
) -> Result<(), ConfigError> {
    let Some(budget) = budget else { return Ok(()) };
    if !(budget.is_finite() && budget > 0.0) {
        return Err(file.error_at(
            &["budget_usd"],
            "budget_usd must be a positive number of USD",
        ));
    }
    if let Some((name, _)) = endpoints.iter().find(|(_, e)| e.price.is_none()) {
        return Err(file.error_at(
            &["budget_usd"],
            format!(
                "budget_usd needs a price on every endpoint, and endpoint `{name}` has none: add \
                 `price: {{input_per_million: …, output_per_million: …}}` to it"
            ),
        ));
    }
    Ok(())
}

/// The store of each endpoint with `cache:` on; `true` puts it beside the
/// audit database, a path is taken relative to the pipeline file.
pub fn caches(
    file: &PipelineFile,
    endpoints: &BTreeMap<String, EndpointSpec>,
    audit: &Path,
) -> BTreeMap<String, PathBuf> {
    endpoints
        .iter()
        .filter_map(|(name, e)| Some((name.clone(), cache_path(file.dir(), &e.cache, audit)?)))
        .collect()
}

/// Where one endpoint's `cache:` keeps its answers; None when it is off.
pub fn cache_path(dir: &Path, spec: &CacheSpec, audit: &Path) -> Option<PathBuf> {
    match spec {
        CacheSpec::Enabled(false) => None,
        CacheSpec::Enabled(true) => Some(
            audit
                .parent()
                .unwrap_or(Path::new("."))
                .join(CACHE_FILE_NAME),
        ),
        CacheSpec::Path(path) => Some(dir.join(path)),
    }
}
