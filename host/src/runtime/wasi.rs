//! The WASI a guest gets: linked so that components whose language runtime
//! imports it load, and granting nothing a guest could learn the world from.

use super::state::GuestState;
use super::stderr::StderrTail;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiView};

/// A WASI context that grants nothing a guest could learn the world from: no
/// files, environment, arguments or sockets; clocks stopped at the Unix epoch;
/// randomness from a fixed sequence. Only stderr is kept, to explain traps. A guest therefore processes a row the
/// same way every time, which is also what lets a resumed run recognise the
/// requests it already paid for.
pub(super) fn sealed(stderr: &StderrTail) -> WasiCtx {
    let mut builder = WasiCtx::builder();
    builder
        .stderr(stderr.clone())
        .wall_clock(StoppedClock)
        .monotonic_clock(StoppedClock)
        .secure_random(FixedBytes::default())
        .insecure_random(FixedBytes::default())
        .insecure_random_seed(0x5745_4952);
    builder.build()
}

/// The bytes a guest's randomness cycles through: made once for every
/// instance, which each held two copies of its own before.
static FIXED_BYTES: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(fixed_bytes);

/// A generator that cycles through `FIXED_BYTES`, giving what
/// `wasmtime_wasi::Deterministic` gives over the same bytes, so that a
/// guest asks what it asked under earlier versions and a resumed run still
/// recognises the requests it paid for.
#[derive(Default)]
struct FixedBytes {
    at: usize,
}

impl FixedBytes {
    fn next_byte(&mut self) -> u8 {
        let byte = FIXED_BYTES[self.at];
        self.at = (self.at + 1) % FIXED_BYTES.len();
        byte
    }
}

impl rand_core::TryRng for FixedBytes {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        let bytes = [0; 4].map(|_: u8| self.next_byte());
        Ok(u32::from_be_bytes(bytes))
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let high = u64::from(self.try_next_u32()?);
        let low = u64::from(self.try_next_u32()?);
        Ok((high << 32) | low)
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        dst.iter_mut().for_each(|b| *b = self.next_byte());
        Ok(())
    }
}

/// 4 KiB from a fixed-seed SplitMix64: varied, but the same in every run.
fn fixed_bytes() -> Vec<u8> {
    let mut state: u64 = 0x5745_4952_5345_4544;
    (0..512)
        .flat_map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)).to_le_bytes()
        })
        .collect()
}

struct StoppedClock;

impl HostWallClock for StoppedClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }
    fn now(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

impl HostMonotonicClock for StoppedClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// The WASI clock interface whose sleeps `stop_sleeps` replaces.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// With the clocks stopped, a guest's sleep must end at once. wasmtime-wasi
/// sleeps in real time for the gap between the stopped clock and the
/// deadline the guest asks for: a guest calling `sleep(3600)` would hold its
/// row for an hour without using any CPU, out of reach of
/// `limits.cpu_ms_per_call`. Ended at once, a guest that waits for time to
/// pass spins instead, and the CPU limit stops it.
pub(super) fn stop_sleeps(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap(
        "subscribe-duration",
        |store: StoreContextMut<'_, GuestState>, (_,): (u64,)| elapsed(store),
    )?;
    clock.func_wrap(
        "subscribe-instant",
        |store: StoreContextMut<'_, GuestState>, (_,): (u64,)| elapsed(store),
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

fn elapsed(
    mut store: StoreContextMut<'_, GuestState>,
) -> wasmtime::Result<(Resource<DynPollable>,)> {
    let table = store.data_mut().ctx().table;
    let ready = table.push(Elapsed { yielded: false })?;
    Ok((subscribe(table, ready)?,))
}

/// A sleep on a stopped clock: over as soon as it is polled, after one
/// yield so that a guest polling in a loop does not starve the runtime.
struct Elapsed {
    yielded: bool,
}

#[async_trait::async_trait]
impl Pollable for Elapsed {
    async fn ready(&mut self) {
        if !self.yielded {
            self.yielded = true;
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::TryRng;

    #[test]
    fn the_shared_bytes_give_what_a_deterministic_generator_over_them_gives() {
        let mut ours = FixedBytes::default();
        let mut theirs = wasmtime_wasi::Deterministic::new(fixed_bytes());
        // Mixed calls, enough to wrap around the 4 KiB more than once.
        for round in 0..700 {
            assert_eq!(ours.try_next_u32(), theirs.try_next_u32(), "round {round}");
            assert_eq!(ours.try_next_u64(), theirs.try_next_u64(), "round {round}");
            let (mut a, mut b) = ([0u8; 7], [0u8; 7]);
            ours.try_fill_bytes(&mut a).unwrap();
            theirs.try_fill_bytes(&mut b).unwrap();
            assert_eq!(a, b, "round {round}");
        }
    }
}
