//! Two single-threaded primitives for the client: [`Slots`], a counting
//! semaphore with FIFO hand-off (in-flight slots, the connect lock), and
//! [`Answer`], a one-shot cell that carries one answer to one call.
//!
//! Why not glommio's `Semaphore`: a waiter it wakes is already out of the
//! queue, so a waiter dropped between its wake-up and its next poll (a call
//! cancelled by its deadline) loses the wake-up, and the next waiter sleeps
//! until some later release. Here a release hands the unit to the first
//! waiter, and a waiter dropped holding an unclaimed unit passes it on.
//!
//! Invariants: `free > 0` only while no waiter is queued; a unit is held by
//! exactly one of `free`, a granted waiter, or its owner until `release`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// A counting semaphore; units are returned with [`Slots::release`].
pub(crate) struct Slots {
    state: RefCell<SlotsState>,
}

struct SlotsState {
    free: usize,
    closed: bool,
    waiters: VecDeque<Rc<Waiter>>,
}

#[derive(Default)]
struct Waiter {
    granted: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

/// The semaphore was closed: no unit will come.
#[derive(Debug)]
pub(crate) struct Closed;

impl Slots {
    pub(crate) fn new(free: usize) -> Slots {
        Slots {
            state: RefCell::new(SlotsState {
                free,
                closed: false,
                waiters: VecDeque::new(),
            }),
        }
    }

    /// Waits for one unit, first come first served. Dropping the future
    /// gives up its place (and its unit, if one was already handed to it).
    pub(crate) fn acquire(&self) -> Acquire<'_> {
        Acquire {
            slots: self,
            waiter: None,
            done: false,
        }
    }

    /// Returns one unit: to the first waiter, else to the free count.
    pub(crate) fn release(&self) {
        let mut state = self.state.borrow_mut();
        match state.waiters.pop_front() {
            Some(waiter) => {
                assert_eq!(state.free, 0, "units free while a waiter queued");
                waiter.granted.set(true);
                if let Some(waker) = waiter.waker.take() {
                    waker.wake();
                }
            }
            None => state.free += 1,
        }
    }

    /// Fails every waiter and every later `acquire`.
    pub(crate) fn close(&self) {
        let waiters = {
            let mut state = self.state.borrow_mut();
            state.closed = true;
            std::mem::take(&mut state.waiters)
        };
        for waiter in waiters {
            if let Some(waker) = waiter.waker.take() {
                waker.wake();
            }
        }
    }

    /// Units free now.
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        self.state.borrow().free
    }
}

/// The future of [`Slots::acquire`].
pub(crate) struct Acquire<'a> {
    slots: &'a Slots,
    waiter: Option<Rc<Waiter>>,
    done: bool,
}

impl Future for Acquire<'_> {
    type Output = Result<(), Closed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Closed>> {
        assert!(!self.done, "Acquire polled after completion");
        if let Some(waiter) = self.waiter.clone() {
            if waiter.granted.get() {
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            if self.slots.state.borrow().closed {
                self.done = true;
                return Poll::Ready(Err(Closed));
            }
            waiter.waker.set(Some(cx.waker().clone()));
            return Poll::Pending;
        }
        let mut state = self.slots.state.borrow_mut();
        if state.closed {
            drop(state);
            self.done = true;
            return Poll::Ready(Err(Closed));
        }
        if state.free > 0 {
            assert!(state.waiters.is_empty(), "units free while a waiter queued");
            state.free -= 1;
            drop(state);
            self.done = true;
            return Poll::Ready(Ok(()));
        }
        let waiter = Rc::new(Waiter::default());
        waiter.waker.set(Some(cx.waker().clone()));
        state.waiters.push_back(waiter.clone());
        drop(state);
        self.waiter = Some(waiter);
        Poll::Pending
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Some(waiter) = self.waiter.take() else { return };
        if waiter.granted.get() {
            // Handed a unit it will never use: pass it on.
            self.slots.release();
        } else {
            self.slots
                .state
                .borrow_mut()
                .waiters
                .retain(|w| !Rc::ptr_eq(w, &waiter));
        }
    }
}

/// One answer for one call: filled once by the connection, taken once by
/// the call. A call that gave up leaves the cell to be dropped unread.
pub(crate) struct Answer<T> {
    value: RefCell<Option<T>>,
    waker: Cell<Option<Waker>>,
}

impl<T> Answer<T> {
    pub(crate) fn new() -> Rc<Answer<T>> {
        Rc::new(Answer {
            value: RefCell::new(None),
            waker: Cell::new(None),
        })
    }

    /// Sets the answer, unless one was set already (the first one wins).
    pub(crate) fn fill(&self, value: T) {
        let mut slot = self.value.borrow_mut();
        if slot.is_none() {
            *slot = Some(value);
            drop(slot);
            if let Some(waker) = self.waker.take() {
                waker.wake();
            }
        }
    }

    /// Waits for the answer.
    pub(crate) fn wait(self: &Rc<Self>) -> impl Future<Output = T> + '_ {
        std::future::poll_fn(move |cx| match self.value.borrow_mut().take() {
            Some(value) => Poll::Ready(value),
            None => {
                self.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn units_go_to_waiters_in_order_and_dropped_grants_pass_on() {
        let slots = Slots::new(1);
        let mut a = slots.acquire();
        assert!(matches!(poll(&mut a), Poll::Ready(Ok(()))));
        let mut b = slots.acquire();
        let mut c = slots.acquire();
        assert!(poll(&mut b).is_pending());
        assert!(poll(&mut c).is_pending());
        slots.release(); // to b
        drop(b); // b never used it: c gets it
        assert!(matches!(poll(&mut c), Poll::Ready(Ok(()))));
        assert_eq!(slots.free(), 0);
        slots.release();
        assert_eq!(slots.free(), 1);
    }

    #[test]
    fn closing_fails_waiters_and_later_acquires() {
        let slots = Slots::new(0);
        let mut a = slots.acquire();
        assert!(poll(&mut a).is_pending());
        slots.close();
        assert!(matches!(poll(&mut a), Poll::Ready(Err(Closed))));
        assert!(matches!(poll(&mut slots.acquire()), Poll::Ready(Err(Closed))));
    }

    #[test]
    fn a_dropped_waiter_leaves_the_queue() {
        let slots = Slots::new(0);
        let mut a = slots.acquire();
        assert!(poll(&mut a).is_pending());
        drop(a);
        slots.release();
        assert_eq!(slots.free(), 1);
    }

    #[test]
    fn an_answer_is_filled_once() {
        let answer = Answer::new();
        answer.fill(1);
        answer.fill(2);
        let mut wait = Box::pin(answer.wait());
        assert_eq!(
            wait.as_mut().poll(&mut Context::from_waker(Waker::noop())),
            Poll::Ready(1)
        );
    }
}
