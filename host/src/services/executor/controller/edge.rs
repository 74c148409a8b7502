//! Probes beyond an edge that refusals found again and again: each probe of
//! a fixed edge costs a refused request, so it waits longer each time the
//! same edge refuses it, as TCP CUBIC dwells longer near the window where it
//! last lost.

use super::*;

/// Answers a probe of an edge found again and again is spread over at
/// most: the limit waits below the edge for up to this many answers' worth
/// of round trips. Growing back a slot in two or three round trips, a run
/// against a server that takes 4 at once was refused once in seven answers
/// (1.13 to 1.18 calls per row on real sockets) and one that takes 2, in
/// `sim.rs`, up to once in four.
const PROBE_EVERY_ANSWERS: f64 = 64.0;

/// Nor longer than this many round trips, whatever the edge: a server whose
/// room grows is found by the next probe, and a slow server with room for
/// one or two would otherwise wait tens of seconds for it.
const MOST_HOLD_ROUND_TRIPS: u32 = 16;

/// How far below the edge a held limit stays: its whole-number part is the
/// slot below.
const EDGE_MARGIN: f64 = 1e-6;

/// The whole-number limit the last cuts for losses were made from.
pub(super) struct EdgeHold {
    /// The whole-number limit refused.
    edge: f64,
    /// Cuts in a row that found it.
    found: u32,
    /// Until when growth stays below it.
    until: Instant,
    /// When growth took the limit back to it after the hold.
    reached: Option<Instant>,
}

impl Controller {
    /// Notes a cut for losses at `now` from a limit of `from`. A cut from
    /// the whole-number limit the last one was made from, with no window
    /// served clean there since, found the same edge again: the first
    /// finding holds growth below the edge for a round trip, each one after
    /// for twice as many as the last, up to `PROBE_EVERY_ANSWERS` answers'
    /// worth and `MOST_HOLD_ROUND_TRIPS`. A cut in slow start finds no edge
    /// to hold.
    pub(super) fn note_edge(&mut self, from: f64, now: Instant) {
        if self.slow_start {
            self.edge_hold = None;
            return;
        }
        let edge = from.floor();
        let found = match &self.edge_hold {
            Some(hold) if hold.edge == edge => hold.found + 1,
            _ => 1,
        };
        let doubled = 1u32.checked_shl(found - 1).unwrap_or(u32::MAX);
        let by_answers = (PROBE_EVERY_ANSWERS / edge.max(1.0)).ceil() as u32;
        let round_trips = doubled.min(by_answers).clamp(1, MOST_HOLD_ROUND_TRIPS);
        self.edge_hold = Some(EdgeHold {
            edge,
            found,
            until: now + round_trips * self.window_len(),
            reached: None,
        });
    }

    /// The most growth may take the limit to at `now`: just below an edge
    /// held, else anywhere.
    pub(super) fn edge_bound(&self, now: Instant) -> f64 {
        match &self.edge_hold {
            Some(hold) if now < hold.until => hold.edge - EDGE_MARGIN,
            _ => f64::INFINITY,
        }
    }

    /// Growth took the limit back, past slow start, to the whole-number
    /// limit the pending cut was made from. A single refusal there found
    /// the same edge again, which says the cut was the load's: it stands
    /// without waiting for the answers that would judge it, and the
    /// refusal is cut for as at the edge (one slot). Waited for, at a few
    /// slots the probe came back before the judgement, and its refusal and
    /// the next in its freed slot were cut for together by their share, two
    /// slots of five against a server taking 4 (real sockets).
    pub(super) fn back_at_pending_edge(&self) -> bool {
        !self.slow_start
            && self
                .pending
                .as_ref()
                .is_some_and(|cut| self.limit.floor() >= cut.before.floor())
    }

    /// Notes when growth took the limit back to the edge held.
    pub(super) fn note_edge_reached(&mut self, now: Instant) {
        if let Some(hold) = self.edge_hold.as_mut()
            && hold.reached.is_none()
            && self.limit.floor() >= hold.edge
        {
            hold.reached = Some(now);
        }
    }

    /// A window that began at a full limit at the edge held, or past it,
    /// came back without a refusal: the endpoint has more room now, and the
    /// edge is gone. A window begun below it says nothing of the edge:
    /// growth reaches it within a window, whose requests sent before were
    /// all answered.
    pub(super) fn edge_served(&mut self, window_start: Instant) {
        if self
            .edge_hold
            .as_ref()
            .and_then(|hold| hold.reached)
            .is_some_and(|reached| window_start >= reached)
        {
            self.edge_hold = None;
        }
    }
}
