//! Why the limit moved: each cut, undo and drain the controller decides,
//! kept with its reason for the run summary and the `weir::limit` log.
//! Growth between them is not a decision: it follows every answer, and
//! the changes it makes are in `Controller::changes`.

use std::fmt;
use std::time::Duration;

/// What set off a change of the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Why {
    /// Requests refused (429/503/529, or no answer in time) beyond the
    /// endpoint's usual share, in slow start or after it.
    Refused { refused: u32, slow_start: bool },
    /// A cut for refusals did not lower them: they come whatever the load,
    /// and `share` is now taken as the endpoint's usual share.
    RefusedWhateverTheLoad { share: f64 },
    /// Answers came back in `rtt` seconds against `no_load` with no queue.
    Queued { rtt: f64, no_load: f64 },
    /// A request ran out of time after `waited` seconds in the endpoint's
    /// queue, while it answered `served` requests.
    TimedOutInQueue { served: u32, waited: f64 },
    /// The round trip did not fall with fewer requests in flight: the
    /// queue cuts are undone and `no_load` is the round trip with no queue.
    NotAQueue { no_load: f64 },
    /// The limit is held low for a round trip or two, to measure the round
    /// trip with no queue anew.
    Draining,
    /// The drain is over: `no_load` is the round trip it measured (or the
    /// estimate kept, where it was lower).
    Drained { no_load: f64 },
}

/// One decision: when (since the controller started), the whole-number
/// limit before and after, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub at: Duration,
    pub from: u32,
    pub to: u32,
    pub why: Why,
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Why::Refused {
                refused,
                slow_start,
            } => {
                let plural = if refused == 1 { "" } else { "s" };
                write!(
                    f,
                    "{refused} request{plural} refused (429/503/529 or timed out)"
                )?;
                if slow_start {
                    write!(f, " in slow start")?;
                }
                Ok(())
            }
            Why::RefusedWhateverTheLoad { share } => write!(
                f,
                "a cut did not lower the refusals: they come whatever the load, and {:.0} % \
                 refused is now taken as the endpoint's usual share",
                share * 100.0
            ),
            Why::Queued { rtt, no_load } => write!(
                f,
                "a queue at the endpoint: answers in {} against {} with none",
                seconds(rtt),
                seconds(no_load)
            ),
            Why::TimedOutInQueue { served, waited } => write!(
                f,
                "a request timed out after {} in the endpoint's queue, which answered {served} \
                 meanwhile",
                seconds(waited)
            ),
            Why::NotAQueue { no_load } => write!(
                f,
                "the round trip did not fall with fewer in flight, so it was no queue: {} is \
                 now taken as the round trip with none",
                seconds(no_load)
            ),
            Why::Draining => write!(f, "draining the queue to measure the round trip with none"),
            Why::Drained { no_load } => {
                write!(
                    f,
                    "drained: the round trip with no queue is {}",
                    seconds(no_load)
                )
            }
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "limit {} → {} at {:.1} s: {}",
            self.from,
            self.to,
            self.at.as_secs_f64(),
            self.why
        )
    }
}

/// A round trip as people read one: milliseconds below ten seconds.
fn seconds(secs: f64) -> String {
    if secs < 10.0 {
        format!("{:.0} ms", secs * 1000.0)
    } else {
        format!("{secs:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_reads_as_a_sentence() {
        let queued = Decision {
            at: Duration::from_millis(1240),
            from: 14,
            to: 2,
            why: Why::Queued {
                rtt: 3.1,
                no_load: 0.27,
            },
        };
        assert_eq!(
            queued.to_string(),
            "limit 14 → 2 at 1.2 s: a queue at the endpoint: answers in 3100 ms against 270 ms \
             with none"
        );
        let refused = Why::Refused {
            refused: 1,
            slow_start: false,
        };
        assert_eq!(
            refused.to_string(),
            "1 request refused (429/503/529 or timed out)"
        );
        let usual = Why::RefusedWhateverTheLoad { share: 0.123 };
        assert!(usual.to_string().contains("12 % refused"), "{usual}");
    }
}
