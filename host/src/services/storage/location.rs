//! A URL as the store that holds it and the object's path in that store,
//! configured from the standard environment variables of each provider.

use super::StorageError;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::path::Path as ObjectPath;
use std::sync::Arc;

pub struct Location {
    pub url: String,
    pub store: Arc<dyn ObjectStore>,
    pub path: ObjectPath,
}

impl Location {
    /// `url` is one a staging folder maps back from, so it has a known
    /// scheme, a bucket and a key.
    pub fn parse(url: &str) -> Result<Self, StorageError> {
        let configure = |source| StorageError::Configure {
            url: url.to_string(),
            source,
        };
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        let key = rest.split_once('/').map(|(_, key)| key).unwrap_or("");
        let store: Arc<dyn ObjectStore> = match scheme {
            // `from_env` reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
            // AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT(_URL) and
            // AWS_ALLOW_HTTP; the credentials stay in the store and are never
            // part of a URL weir records.
            "s3" => Arc::new(
                AmazonS3Builder::from_env()
                    .with_url(url)
                    .build()
                    .map_err(configure)?,
            ),
            "gs" => Arc::new(
                GoogleCloudStorageBuilder::from_env()
                    .with_url(url)
                    .build()
                    .map_err(configure)?,
            ),
            "az" => Arc::new(
                MicrosoftAzureBuilder::from_env()
                    .with_url(url)
                    .build()
                    .map_err(configure)?,
            ),
            _ => {
                return Err(configure(object_store::Error::NotSupported {
                    source: format!("`{scheme}://` is not an object store weir knows").into(),
                }));
            }
        };
        Ok(Self {
            url: url.to_string(),
            store,
            path: ObjectPath::from(key),
        })
    }
}
