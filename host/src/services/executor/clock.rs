//! The executor's only clock is tokio's (`tokio::time::Instant`, `sleep`):
//! under `#[tokio::test(start_paused = true)]` its tests run on simulated
//! time, deterministic and instant. Callers outside hand in `std` instants,
//! which are converted at the door.

use tokio::time::Instant;

/// Waits for `notified`, or until `until` when given, whichever comes first.
pub async fn wait(
    notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    until: Option<Instant>,
) {
    match until {
        Some(at) => {
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = notified => {}
            }
        }
        None => notified.await,
    }
}

pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
