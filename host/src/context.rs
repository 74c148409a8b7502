//! Context for an error from below (the operating system, SQLite, a JSON
//! parser): what weir was doing, with the error kept as its `source`, so the
//! message says where and the chain of causes still says why. Each area's
//! error enum takes a [`Contextual`] as one of its variants.

/// An error with what weir was doing when it happened.
#[derive(Debug, thiserror::Error)]
#[error("{context}")]
pub struct Contextual<E: std::error::Error + 'static> {
    pub context: String,
    #[source]
    pub source: E,
}

pub trait Context<T, E: std::error::Error + 'static> {
    fn context(self, context: impl Into<String>) -> Result<T, Contextual<E>>;
    fn with_context<C: Into<String>>(self, context: impl FnOnce() -> C)
    -> Result<T, Contextual<E>>;
}

impl<T, E: std::error::Error + 'static> Context<T, E> for Result<T, E> {
    fn context(self, context: impl Into<String>) -> Result<T, Contextual<E>> {
        self.map_err(|source| Contextual {
            context: context.into(),
            source,
        })
    }

    fn with_context<C: Into<String>>(
        self,
        context: impl FnOnce() -> C,
    ) -> Result<T, Contextual<E>> {
        self.map_err(|source| Contextual {
            context: context().into(),
            source,
        })
    }
}

/// An error and its causes on one line, `what: why: why`, the way the
/// command line prints them.
pub fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_print_the_context_then_the_operating_systems_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.txt");
        let error = std::fs::read_to_string(&missing)
            .with_context(|| format!("cannot read {}", missing.display()))
            .unwrap_err();
        assert_eq!(error.source.kind(), std::io::ErrorKind::NotFound);
        let context = format!("cannot read {}", missing.display());
        assert_eq!(error.to_string(), context);
        assert_eq!(causes(&error), format!("{context}: {}", error.source));
    }
}
