//! Answers counted together: how many were answered and refused, and what
//! their round trips say, with the statistics that judge them.

use super::*;

#[derive(Default, Clone, Copy)]
pub(super) struct Tally {
    pub(super) ok: u32,
    pub(super) lost: u32,
    /// Round trips, each at most `OUTLIER` times the smoothed one: a queue
    /// delays every request, while a few answers slow by nature (a long
    /// completion, a server's hiccup) would otherwise raise the mean of a
    /// small window past `TOLERANCE` on their own.
    pub(super) rtt_sum: f64,
    /// Their squares, for their spread.
    pub(super) rtt_sq_sum: f64,
    /// The requests in flight at the sends of those answers.
    pub(super) in_flight_sum: f64,
}

impl Tally {
    /// Counts an outcome: an answer or a refusal (`Neutral` says nothing).
    pub(super) fn count(&mut self, signal: Signal) {
        match signal {
            Signal::Success => self.ok += 1,
            Signal::Overload => self.lost += 1,
            Signal::Neutral => {}
        }
    }

    /// Counts a successful answer: its round trip, at most `OUTLIER` times
    /// the smoothed one `srtt`, and the requests in flight at its send.
    pub(super) fn answered(&mut self, rtt: f64, in_flight: usize, srtt: f64) {
        self.ok += 1;
        let rtt = rtt.min(OUTLIER * srtt);
        self.rtt_sum += rtt;
        self.rtt_sq_sum += rtt * rtt;
        self.in_flight_sum += in_flight as f64;
    }

    /// The mean round trip of the answers, and the mean requests in flight
    /// at their sends.
    pub(super) fn point(&self) -> Option<(f64, f64)> {
        let n = f64::from(self.ok);
        (self.ok > 0).then(|| (self.rtt_sum / n, self.in_flight_sum / n))
    }

    /// The mean round trip of the answers and their standard deviation.
    pub(super) fn rtt_spread(&self) -> Option<(f64, f64)> {
        let n = f64::from(self.ok);
        if n < 2.0 || self.rtt_sum <= 0.0 {
            return None;
        }
        let mean = self.rtt_sum / n;
        let variance = (self.rtt_sq_sum / n - mean * mean).max(0.0) * n / (n - 1.0);
        Some((mean, variance.sqrt()))
    }

    /// The standard error of the log of the mean round trip: how far the
    /// mean of these few answers may stray from that of many.
    pub(super) fn log_rtt_error(&self) -> f64 {
        self.rtt_spread().map_or(f64::INFINITY, |(mean, sd)| {
            sd / (mean * f64::from(self.ok).sqrt())
        })
    }

    /// How low the no-load round trip may be taken from these answers: their
    /// mean, two standard errors higher. The quickest of many windows of one
    /// or two answers is the quickest answer, and taken for the no-load round
    /// trip it made answers of ordinary length look queued: against a server
    /// taking two at once whose answers took half to one and a half times
    /// their mean, the limit stayed at one for a minute, at half its capacity.
    pub(super) fn no_load_at_most(&self) -> Option<f64> {
        let (rtt, _) = self.point()?;
        Some(rtt * (1.0 + self.two_sided_95() * self.log_rtt_error()))
    }

    /// How quick the answers' round trip may surely be taken to be: their
    /// mean, low by as many standard errors (on a log scale) as few answers
    /// leave in doubt.
    pub(super) fn rtt_at_least(&self) -> Option<f64> {
        let (rtt, _) = self.point()?;
        Some(rtt * (-self.two_sided_95() * self.log_rtt_error()).exp())
    }

    /// How many standard errors bound the mean of these answers: Student's
    /// t at 95 %, two-sided, for their count. Two standard errors took the
    /// spread of a few answers as known, and the spread of two or three is
    /// a guess: two answers of a long tail, each held to twice the smoothed
    /// round trip, were alike and three times the median, and cut the limit
    /// from 10 to 2.5 in slow start.
    pub(super) fn two_sided_95(&self) -> f64 {
        const T: [f64; 9] = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26];
        match self.ok.saturating_sub(1) as usize {
            0 => f64::INFINITY,
            df @ 1..=9 => T[df - 1],
            df => 2.0 + 2.3 / df as f64,
        }
    }

    /// Keeps half the answers, their means as they were.
    pub(super) fn halve(&mut self) {
        let kept = f64::from(self.ok / 2) / f64::from(self.ok.max(1));
        self.rtt_sum *= kept;
        self.rtt_sq_sum *= kept;
        self.in_flight_sum *= kept;
        self.ok /= 2;
        self.lost /= 2;
    }
}

/// How the round trip rose from a lower load `low` to a higher one `high`
/// (each a mean round trip and the requests in flight), against the load,
/// both on a log scale: 1 for a queue, whose round trip follows the load in
/// proportion; near 0 where the round trip is the answers' own.
pub(super) fn elasticity(low: (f64, f64), high: (f64, f64)) -> f64 {
    (high.0 / low.0).ln() / (high.1 / low.1).ln()
}

/// The share of `n` attempts that `lost` of them shows, at its highest
/// likely value: Wilson's score interval at two standard deviations. Few
/// attempts say little (none refused of ten allows up to 29 %).
pub(super) fn upper_bound(lost: u32, n: u32) -> f64 {
    if n == 0 {
        return 1.0;
    }
    const Z2: f64 = 4.0;
    let n = f64::from(n);
    let p = f64::from(lost) / n;
    let spread = (p * (1.0 - p) / n + Z2 / (4.0 * n * n)).sqrt();
    ((p + Z2 / (2.0 * n) + 2.0 * spread) / (1.0 + Z2 / n)).min(1.0)
}
