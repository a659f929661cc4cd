//! `Options::on_quiet`: a shard calls it on its thread once it has been
//! quiet for a while after doing something (after loading, and after each
//! burst of requests), and not again until it has done something more.
//! `styxd` gives the allocator's cached memory back there.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use styx_engine::{Address, App, FnId, Outcome, Payload, Reply, Request, Shard};
use styx_runtime::{Frontend, Options, run};

/// Calls of the hook (this test binary's only run uses it).
static QUIET: AtomicUsize = AtomicUsize::new(0);

fn quiet() {
    QUIET.fetch_add(1, Ordering::SeqCst);
}

/// How long the script waits for any one step before giving up.
const STEP_US: u64 = 10_000_000;
/// How long it stays quiet after the second call, to see no third.
const QUIET_AFTER_US: u64 = 2_500_000;

#[derive(Debug, Default)]
struct Seen {
    /// Hook calls seen when the request was sent (after loading).
    before_request: usize,
    committed: bool,
    /// Hook calls seen once it came again after the request.
    after_request: usize,
    /// Hook calls at the end, after a long quiet spell more.
    at_end: usize,
    timed_out: bool,
}

struct Script {
    bump: FnId,
    step_started_us: Option<u64>,
    phase: u8,
    seen: Seen,
}

impl Frontend for Script {
    type Output = Seen;

    fn pump(&mut self, shard: &mut Shard, now: u64) -> bool {
        let started = *self.step_started_us.get_or_insert(now);
        let calls = QUIET.load(Ordering::SeqCst);
        if now > started + STEP_US && self.phase < 3 {
            self.seen.timed_out = true;
            self.phase = 4;
            return false;
        }
        match self.phase {
            // Loading counts as work: the shard goes quiet once.
            0 if calls >= 1 => {
                self.seen.before_request = calls;
                let request = Request {
                    function: self.bump,
                    address: Address::Entity(7u64.into()),
                    args: Payload::encode(&()),
                    client: None,
                };
                shard.submit(0, request).expect("submitted");
                self.phase = 1;
                true
            }
            // The reply came: the shard goes quiet again, once.
            2 if calls > self.seen.before_request => {
                self.seen.after_request = calls;
                self.step_started_us = Some(now);
                self.phase = 3;
                false
            }
            3 if now > started + QUIET_AFTER_US => {
                self.seen.at_end = calls;
                self.phase = 4;
                false
            }
            _ => false,
        }
    }

    fn deliver(&mut self, replies: &mut Vec<Reply>, now: u64) {
        for r in replies.drain(..) {
            self.seen.committed = matches!(r.outcome, Outcome::Committed(_));
            self.phase = 2;
            self.step_started_us = Some(now);
        }
    }

    fn does_io(&self) -> bool {
        false
    }

    fn is_done(&self) -> bool {
        self.phase == 4
    }

    fn finish(self, _shard: &Shard) -> Seen {
        self.seen
    }
}

#[test]
fn a_shard_calls_on_quiet_once_per_quiet_spell() {
    let mut app = App::new("quiet");
    let op = app.operator("counter", 4);
    let bump = app.function(op, "bump", |ctx, (): ()| async move {
        let n = ctx.get::<u64>()?.unwrap_or(0);
        ctx.put(&(n + 1))?;
        Ok(())
    });
    let opts = Options {
        shards: 1,
        pin: false,
        spin_before_park: Duration::ZERO,
        on_quiet: Some(quiet),
        ..Options::default()
    };
    let outputs = run(Arc::new(app), opts, move |_shard: &mut Shard| Script {
        bump,
        step_started_us: None,
        phase: 0,
        seen: Seen::default(),
    })
    .expect("run");
    let seen = &outputs[0];
    assert!(!seen.timed_out, "the hook was not called in time: {seen:?}");
    assert!(seen.committed, "{seen:?}");
    assert_eq!(seen.before_request, 1, "once after loading: {seen:?}");
    assert_eq!(seen.after_request, 2, "once after the request: {seen:?}");
    assert_eq!(seen.at_end, 2, "not again while nothing happened: {seen:?}");
}
