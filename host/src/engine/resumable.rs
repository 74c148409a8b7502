//! A call of a node granted a Batch API endpoint, whose rows may wait on
//! provider batches for hours and by the hundred thousand.
//!
//! An async function waiting would keep its whole state machine, which is as
//! large as the largest state it can be in (the guest's run), for every
//! waiting row. Here a waiting call is data instead: its rows as the guest
//! takes them, packed into one buffer, and the requests they wait for. The
//! guest's run is a boxed future made only once the call has its turn at the
//! node's guest slots, and made afresh when the answers are in: the many
//! calls waiting for a turn hold only the small future that waits for it.

use super::packed::PackedCall;
use super::setup::Node;
use super::stage::{Attempt, Call, Flow};
use crate::services::audit::AuditLog;
use crate::services::batch::Parked;
use crate::types::RowError;
use futures::future::BoxFuture;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::sync::OwnedSemaphorePermit;

pub struct ResumableCall {
    node: Arc<Node>,
    audit: Option<Arc<AuditLog>>,
    /// Time spent waiting on batches, which row deadlines do not count.
    waited: Duration,
    state: State,
}

enum State {
    /// Waits for a turn at the node's guest slots.
    Queued {
        call: PackedCall,
        turn: BoxFuture<'static, Option<OwnedSemaphorePermit>>,
    },
    /// The guest runs over the call's rows.
    Running(BoxFuture<'static, (Call, Attempt)>),
    Waiting {
        call: PackedCall,
        parked: Parked,
        since: Instant,
    },
    /// Nothing left to run: no live row, or a node stopped after traps.
    Finished(Vec<Flow>),
    Taken,
}

impl Node {
    /// Runs the guest over the live rows of `flows` (see `process_batch`)
    /// as a call that waits on provider batches as data.
    pub fn resumable(
        self: Arc<Self>,
        flows: Vec<Flow>,
        audit: Option<Arc<AuditLog>>,
    ) -> ResumableCall {
        let state = match self.prepare_call(flows, audit.as_ref()) {
            Err(flows) => State::Finished(flows),
            Ok(call) => match self.stopped_after_traps() {
                Some(stopped) => {
                    State::Finished(self.finish_call(call, Err(stopped), audit.as_ref()))
                }
                None => queue(&self, call.pack()),
            },
        };
        ResumableCall {
            node: self,
            audit,
            waited: Duration::ZERO,
            state,
        }
    }
}

fn queue(node: &Node, call: PackedCall) -> State {
    let slots = node.guest_slots.clone();
    State::Queued {
        call,
        turn: Box::pin(async move {
            match slots {
                Some(slots) => Some(slots.acquire_owned().await.expect("never closed")),
                None => None,
            }
        }),
    }
}

fn run(
    node: Arc<Node>,
    call: Call,
    waited: Duration,
    slot: Option<OwnedSemaphorePermit>,
) -> BoxFuture<'static, (Call, Attempt)> {
    Box::pin(async move {
        let attempt = node.attempt(&call.input, &call.scopes, waited, slot).await;
        (call, attempt)
    })
}

impl Future for ResumableCall {
    type Output = Vec<Flow>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<Flow>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Queued { turn, .. } => {
                    let slot = ready!(turn.as_mut().poll(cx));
                    let State::Queued { call, .. } =
                        std::mem::replace(&mut this.state, State::Taken)
                    else {
                        unreachable!("matched above")
                    };
                    this.state = State::Running(run(
                        Arc::clone(&this.node),
                        call.unpack(),
                        this.waited,
                        slot,
                    ));
                }
                State::Running(running) => {
                    let (mut call, attempt) = ready!(running.as_mut().poll(cx));
                    this.state = match attempt {
                        Attempt::Finished(outcomes) => {
                            call.restore_rows();
                            State::Finished(this.node.finish_call(
                                call,
                                outcomes,
                                this.audit.as_ref(),
                            ))
                        }
                        Attempt::Parked(parked) => State::Waiting {
                            call: call.pack(),
                            parked,
                            since: Instant::now(),
                        },
                    };
                }
                State::Waiting { parked, .. } => {
                    let answered = ready!(parked.poll_answered(cx));
                    let State::Waiting { call, since, .. } =
                        std::mem::replace(&mut this.state, State::Taken)
                    else {
                        unreachable!("matched above")
                    };
                    this.state = match answered {
                        Ok(()) => {
                            this.waited += since.elapsed();
                            queue(&this.node, call)
                        }
                        // The run stops: the rows keep no outcome, and a
                        // resume takes them up.
                        Err(detached) => {
                            let mut call = call.unpack();
                            call.restore_rows();
                            State::Finished(this.node.finish_call(
                                call,
                                Err(RowError::new("detached", detached)),
                                this.audit.as_ref(),
                            ))
                        }
                    };
                }
                State::Finished(_) => {
                    let State::Finished(flows) = std::mem::replace(&mut this.state, State::Taken)
                    else {
                        unreachable!("matched above")
                    };
                    return Poll::Ready(flows);
                }
                State::Taken => panic!("a ResumableCall polled after it finished"),
            }
        }
    }
}
