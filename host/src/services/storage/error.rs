//! Why an object could not be read or written. Each names the object's URL
//! and, where weir can tell, what to check.

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error(
        "cannot reach {url}: the object store could not be set up from the environment \
         (for S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL; \
         for Google Cloud Storage: GOOGLE_SERVICE_ACCOUNT; for Azure: AZURE_STORAGE_ACCOUNT_NAME, \
         AZURE_STORAGE_ACCOUNT_KEY)"
    )]
    Configure {
        url: String,
        #[source]
        source: object_store::Error,
    },
    #[error("{url} does not exist: no such object, or no such bucket")]
    NotFound {
        url: String,
        #[source]
        source: object_store::Error,
    },
    #[error(
        "{url}: the object store refused the credentials in the environment, or they are \
         missing (for S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    )]
    Denied {
        url: String,
        #[source]
        source: object_store::Error,
    },
    #[error("cannot read {url}")]
    Get {
        url: String,
        #[source]
        source: object_store::Error,
    },
    #[error("cannot upload {} to {url}", path.display())]
    Put {
        url: String,
        path: std::path::PathBuf,
        #[source]
        source: object_store::Error,
    },
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl StorageError {
    /// A failed read or listing, told apart by what the store answered.
    pub(super) fn reading(url: &str, source: object_store::Error) -> Self {
        let url = url.to_string();
        match source {
            object_store::Error::NotFound { .. } => Self::NotFound { url, source },
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => Self::Denied { url, source },
            _ => Self::Get { url, source },
        }
    }

    pub(super) fn io(context: String, source: std::io::Error) -> Self {
        Self::Io { context, source }
    }
}
