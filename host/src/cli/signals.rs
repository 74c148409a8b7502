//! SIGINT and SIGTERM during a run. The first stops reading rows and gives
//! the calls in flight a grace period, after which they are cut; the run then
//! ends as interrupted, with its summary and the command that resumes it. A
//! second signal ends the process at once, which leaves the run resumable
//! as a kill would.

use crate::services::stop::{RunStop, StopReason};
use anyhow::{Context, Result};
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

pub fn watch(stop: Arc<RunStop>, grace: Duration) -> Result<()> {
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    tokio::spawn(async move {
        let reason = tokio::select! {
            _ = interrupt.recv() => StopReason::Signal { name: "SIGINT", exit_code: 130 },
            _ = terminate.recv() => StopReason::Signal { name: "SIGTERM", exit_code: 143 },
        };
        say!(
            "\nweir: {}: no new rows are started; calls in flight have {} s to finish (a second \
             signal stops at once)\n",
            signal_name(&reason),
            grace.as_secs_f64()
        );
        stop.drain(reason.clone());
        let second = tokio::select! {
            _ = tokio::time::sleep(grace) => {
                stop.abort(reason);
                tokio::select! {
                    _ = interrupt.recv() => 130,
                    _ = terminate.recv() => 143,
                }
            }
            _ = interrupt.recv() => 130,
            _ = terminate.recv() => 143,
        };
        say!("\nweir: stopped at once; `weir run PIPELINE --resume` carries the run on\n");
        std::process::exit(second);
    });
    Ok(())
}

fn signal_name(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::Signal { name, .. } => name,
        _ => "signal",
    }
}
