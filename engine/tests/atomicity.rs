//! Aborts are atomic wherever they happen, panics are contained, and limits
//! and malformed calls give clear errors.

mod common;

use common::{seeds, swarm};
use std::sync::Arc;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{Abort, AbortKind, Address, App, CallLimits, Key, Outcome, Payload, Request};

/// `chain.step(n, mode)` writes its entity, sends an async write to a side
/// entity, then calls `step(n - 1)` on the next key; at `n == 0` it fails
/// according to `mode`: 1 abort, 2 panic, 3 the caller swallows the abort.
fn chain_app() -> Arc<App> {
    common::quiet_expected_panics();
    let mut app = App::new("chain");
    let op = app.operator("chain", 8);
    app.function(op, "step", |ctx, (n, mode): (u64, u8)| async move {
        let me = ctx.key().as_u64().unwrap();
        ctx.put(&(me as i64))?;
        ctx.send("chain", 1_000 + me, "mark", ())?;
        if n == 0 {
            match mode {
                1 | 3 => return Err(Abort::new("boom at the bottom")),
                2 => panic!("expected: panic at the bottom"),
                _ => return Ok(0u64),
            }
        }
        let below = ctx.call::<u64>("chain", me + 1, "step", (n - 1, mode)).await;
        match (below, mode) {
            (Err(_), 3) => Ok(0), // swallowed: the transaction still aborts
            (r, _) => Ok(r? + 1),
        }
    });
    app.function(op, "mark", |ctx, (): ()| async move {
        ctx.put(&1i64)?;
        Ok(())
    });
    app.function(op, "deep", |ctx, (): ()| async move {
        let me = ctx.key().as_u64().unwrap();
        ctx.call::<()>("chain", me + 1, "deep", ()).await
    });
    app.function(op, "wide", |ctx, n: u32| async move {
        for i in 0..n {
            ctx.send("chain", u64::from(i), "mark", ())?;
        }
        Ok(())
    });
    app.function(op, "bad_call", |ctx, which: u8| async move {
        match which {
            0 => ctx.call::<()>("chain", 1u64, "nope", ()).await,
            1 => ctx.call::<()>("nowhere", 1u64, "step", ()).await,
            // Wrong argument type for step: decoded by the callee.
            _ => ctx.call::<u64>("chain", 1u64, "step", "text").await.map(|_| ()),
        }
    });
    app.function(op, "stall", |_ctx, (): ()| async move {
        std::future::pending::<()>().await;
        Ok(())
    });
    app.function(op, "count", |ctx, (): ()| async move {
        let n = ctx.get::<i64>()?.unwrap_or(0) + 1;
        ctx.put(&n)?;
        Ok(n)
    });
    Arc::new(app)
}

fn request(app: &App, function: &str, key: u64, args: Payload) -> Request {
    Request {
        function: app.resolve("chain", function).unwrap(),
        address: Address::Entity(Key::from(key)),
        args,
        client: None,
    }
}

fn run_one(seed: u64, app: &Arc<App>, limits: CallLimits, req: Request) -> (Outcome, Sim) {
    let mut config = test_config(10);
    config.limits = limits;
    let mut sim = Sim::new(app.clone(), config, 3, seed);
    sim.submit(0, 0, req).unwrap();
    sim.run();
    let mut replies = sim.take_replies();
    assert_eq!(replies.len(), 1);
    (replies.pop().unwrap().outcome, sim)
}

#[test]
fn an_abort_deep_in_a_chain_leaves_no_write_anywhere() {
    swarm(seeds(1..2), |seed| {
        let app = chain_app();
        for (mode, kind, text) in [
            (1u8, AbortKind::User, "boom at the bottom"),
            (2, AbortKind::Panic, "panic: expected: panic at the bottom"),
            (3, AbortKind::User, "boom at the bottom"),
        ] {
            let (outcome, sim) = run_one(
                seed,
                &app,
                CallLimits::default(),
                request(&app, "step", 10, Payload::encode(&(6u64, mode))),
            );
            match outcome {
                Outcome::Aborted(a) => {
                    assert_eq!(a.kind(), kind, "mode {mode}");
                    assert_eq!(a.message(), text, "mode {mode}");
                }
                other => panic!("mode {mode}: {other:?}"),
            }
            assert!(sim.state().is_empty(), "mode {mode} left writes: {:?}", sim.state());
        }
        // And the same chain without a failure writes all 7 entities and 7 marks.
        let (outcome, sim) = run_one(
            seed,
            &app,
            CallLimits::default(),
            request(&app, "step", 10, Payload::encode(&(6u64, 0u8))),
        );
        assert_eq!(outcome, Outcome::Committed(Payload::encode(&6u64)));
        assert_eq!(sim.state().len(), 14);
    });
}

#[test]
fn call_depth_and_fan_out_limits_abort_with_a_clear_error() {
    swarm(seeds(1..2), |seed| {
        let app = chain_app();
        let limits = CallLimits {
            depth_max: 5,
            fan_out_max: 10,
        };
        let (outcome, sim) = run_one(seed, &app, limits, request(&app, "deep", 0, Payload::encode(&())));
        match outcome {
            Outcome::Aborted(a) => {
                assert_eq!(a.kind(), AbortKind::Limit);
                assert!(a.message().contains("call depth would exceed 5"), "{a}");
            }
            other => panic!("{other:?}"),
        }
        assert!(sim.state().is_empty());
        let (outcome, sim) = run_one(seed, &app, limits, request(&app, "wide", 0, Payload::encode(&11u32)));
        match outcome {
            Outcome::Aborted(a) => {
                assert_eq!(a.kind(), AbortKind::Limit);
                assert!(a.message().contains("more than 10 calls"), "{a}");
            }
            other => panic!("{other:?}"),
        }
        assert!(sim.state().is_empty(), "the sends before the limit are rolled back too");
        let (outcome, _) = run_one(seed, &app, limits, request(&app, "wide", 0, Payload::encode(&10u32)));
        assert!(matches!(outcome, Outcome::Committed(_)));
    });
}

#[test]
fn unknown_functions_and_bad_arguments_are_clear_errors() {
    swarm(seeds(1..2), |seed| {
        let app = chain_app();
        for (which, kind, text) in [
            (0u8, AbortKind::UnknownFunction, "no function chain.nope"),
            (1, AbortKind::UnknownFunction, "no function nowhere.step"),
            (2, AbortKind::BadArguments, "arguments of chain.step"),
        ] {
            let (outcome, _) = run_one(
                seed,
                &app,
                CallLimits::default(),
                request(&app, "bad_call", 0, Payload::encode(&which)),
            );
            match outcome {
                Outcome::Aborted(a) => {
                    assert_eq!(a.kind(), kind);
                    assert!(a.message().contains(text), "{a}");
                }
                other => panic!("{other:?}"),
            }
        }
        // A request whose arguments do not decode.
        let (outcome, _) = run_one(
            seed,
            &app,
            CallLimits::default(),
            request(&app, "count", 0, Payload::from_bytes(&[1, 2])),
        );
        assert!(matches!(outcome, Outcome::Aborted(a) if a.kind() == AbortKind::BadArguments));
        // A request for a partition function on an entity is refused at submit.
        let mut sim = Sim::new(app.clone(), test_config(10), 2, seed);
        let bad = Request {
            function: app.resolve("chain", "count").unwrap(),
            address: Address::Partition(0),
            args: Payload::EMPTY,
            client: None,
        };
        let err = sim.submit(0, 0, bad).unwrap_err();
        assert_eq!(err.kind(), AbortKind::UnknownFunction);
    });
}

#[test]
fn a_function_that_waits_for_something_else_is_stopped() {
    swarm(seeds(1..2), |seed| {
        let app = chain_app();
        let (outcome, _) = run_one(
            seed,
            &app,
            CallLimits::default(),
            request(&app, "stall", 0, Payload::EMPTY),
        );
        match outcome {
            Outcome::Aborted(a) => {
                assert_eq!(a.kind(), AbortKind::Stalled);
                assert!(
                    a.message().contains("chain.stall awaited something other than a call"),
                    "{a}"
                );
            }
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn panics_do_not_take_the_shard_down() {
    swarm(seeds(3..4), |seed| {
        let app = chain_app();
        let mut sim = Sim::new(app.clone(), test_config(10), 2, seed);
        for token in 0..20 {
            let req = if token % 2 == 0 {
                request(&app, "step", 100, Payload::encode(&(2u64, 2u8)))
            } else {
                request(&app, "count", 7, Payload::EMPTY)
            };
            sim.submit((token % 2) as u16, token, req).unwrap();
            sim.run();
        }
        let replies = sim.take_replies();
        assert_eq!(replies.len(), 20);
        let counts: Vec<&Outcome> = replies
            .iter()
            .filter(|r| r.token % 2 == 1)
            .map(|r| &r.outcome)
            .collect();
        assert_eq!(counts.last().unwrap(), &&Outcome::Committed(Payload::encode(&10i64)));
    });
}

/// Functions that call one entity twice: concurrently (refused), and in
/// sequence (fine).
fn twice_app() -> Arc<App> {
    let mut app = App::new("twice");
    let op = app.operator("counter", 4);
    let bump = app.function(op, "bump", |ctx, (): ()| async move {
        let n = ctx.get::<i64>()?.unwrap_or(0) + 1;
        ctx.put(&n)?;
        Ok(n)
    });
    // Both calls issued before either is awaited: concurrent branches.
    app.function(op, "joined", move |ctx, target: u64| async move {
        let a = ctx.call_fn::<i64>(bump, target, ());
        let b = ctx.call_fn::<i64>(bump, target, ());
        let (a, b) = futures_lite::future::zip(a, b).await;
        Ok(a? + b?)
    });
    // A send stays open: a later call to the same entity is concurrent.
    app.function(op, "sent", move |ctx, target: u64| async move {
        ctx.send_fn(bump, target, ())?;
        ctx.call_fn::<i64>(bump, target, ()).await
    });
    // The first result taken before the second call: a sequence.
    app.function(op, "sequence", move |ctx, target: u64| async move {
        let a = ctx.call_fn::<i64>(bump, target, ()).await?;
        let b = ctx.call_fn::<i64>(bump, target, ()).await?;
        Ok(a + b)
    });
    // Concurrent calls to different entities are what joins are for.
    app.function(op, "spread", move |ctx, target: u64| async move {
        let a = ctx.call_fn::<i64>(bump, target, ());
        let b = ctx.call_fn::<i64>(bump, target + 1, ());
        let (a, b) = futures_lite::future::zip(a, b).await;
        Ok(a? + b?)
    });
    Arc::new(app)
}

#[test]
fn concurrent_calls_to_one_entity_abort_in_the_engine_and_the_serial_executor_alike() {
    swarm(seeds(0..4), |seed| {
        let app = twice_app();
        let call = |function: &str| Request {
            function: app.resolve("counter", function).unwrap(),
            address: Address::Entity(Key::from(1u64)),
            args: Payload::encode(&7u64),
            client: None,
        };
        for (tid, (function, committed)) in [
            ("joined", None),
            ("sent", None),
            ("sequence", Some(3)),
            ("spread", Some(2)),
        ]
        .into_iter()
        .enumerate()
        {
            let mut sim = Sim::new(app.clone(), test_config(10), 3, seed);
            sim.submit(0, 0, call(function)).unwrap();
            sim.run();
            let engine = sim.take_replies().pop().unwrap().outcome;
            let serial = styx_engine::Serial::new(app.clone(), CallLimits::default());
            let oracle = serial.execute(tid as u64 + 1, 0, &call(function));
            for outcome in [&engine, &oracle] {
                match (outcome, committed) {
                    (Outcome::Committed(p), Some(n)) => assert_eq!(p.decode::<i64>(), Ok(n), "{function}"),
                    (Outcome::Aborted(a), None) => {
                        assert_eq!(a.kind(), AbortKind::Concurrent, "{function}: {a}");
                        assert!(a.message().contains("still open: await it first"), "{a}");
                    }
                    other => panic!("{function}: {other:?}"),
                }
            }
            if committed.is_none() {
                // Nothing of the refused transaction is left.
                assert!(sim.state().is_empty(), "{function}: {:?}", sim.state());
            }
        }
    });
}
