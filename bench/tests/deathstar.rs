//! Deathstar movie review and travel reservation in the simulator, on 1, 2
//! and 3 shards: every request is answered once, every committed review is
//! stored exactly once and listed under its user and its movie, invalid
//! reviews and full reservations roll back without a trace, nothing is
//! overbooked, and the whole run equals serial execution.

mod common;

use common::*;
use std::collections::BTreeMap;
use styx_bench::deathstar::movie::{self, Review};
use styx_bench::deathstar::travel::{self, Action, Capacity, Criterion, Mix};
use styx_engine::{AbortKind, Key, Outcome, Value};

const PARTITIONS: u32 = 8;

fn run_movie(seed: u64, shards: u16, scale: movie::Scale, invalid_percent: u32, requests: usize) {
    let app = movie::app(PARTITIONS);
    let functions = movie::Functions::of(&app);
    let s = movie::Services::of(&app);
    let initial = movie::load(&app, &scale, seed);
    assert_eq!(movie::check(&app, &state_of(&initial)), Vec::<String>::new());

    let mut generator = movie::Generator::new(functions, scale, seed, 1_000);
    generator.invalid_percent = invalid_percent;
    let draws: Vec<movie::Draw> = (0..requests).map(|_| generator.draw()).collect();
    let reqs: Vec<_> = draws
        .iter()
        .map(|d| functions.compose_request(d.req_id, &d.compose))
        .collect();
    let mut run = simulate(&app, &initial, &reqs, shards, seed, 100, 80);

    let user_id = |name: &str| {
        run.state[&(s.user, Key::from(name))]
            .decode::<movie::User>()
            .unwrap()
            .user_id
    };
    let (mut committed, mut aborted) = (0, 0);
    for (d, outcome) in draws.iter().zip(&run.outcomes) {
        match outcome {
            Outcome::Committed(p) => {
                assert!(d.valid, "an invalid review committed: {d:?}");
                committed += 1;
                let review_id: u64 = p.decode().unwrap();
                let review = run.state[&(s.review_storage, Key::from(review_id))]
                    .decode::<Review>()
                    .unwrap();
                assert_eq!(review.req_id, d.req_id);
                assert_eq!(review.user_id, user_id(&d.compose.username));
                let movie_id = run.state[&(s.movie_id, Key::from(d.compose.title.as_str()))]
                    .decode::<u64>()
                    .unwrap();
                assert_eq!(review.movie_id, movie_id);
                assert_eq!(
                    (review.rating, review.text.as_str()),
                    (d.compose.rating, d.compose.text.as_str())
                );
            }
            Outcome::Aborted(a) => {
                assert!(!d.valid, "a valid review aborted: {a:?}");
                assert_eq!(a.kind(), AbortKind::User, "{a:?}");
                aborted += 1;
                // No trace: no compose record for the request.
                assert!(!run.state.contains_key(&(s.compose_review, Key::from(d.req_id))));
            }
        }
    }
    assert!(committed > 0);
    assert_eq!(aborted > 0, invalid_percent > 0);
    let reviews = run.state.keys().filter(|(op, _)| *op == s.review_storage).count();
    assert_eq!(reviews, committed, "one stored review per committed request");

    let violations = movie::check(&app, &run.state);
    assert!(
        violations.is_empty(),
        "seed {seed}, {shards} shards:\n{}",
        violations.join("\n")
    );
    run.check_serial(&app, &initial);
}

#[test]
fn movie_reviews_are_stored_once_and_listed_on_one_to_three_shards() {
    // Seeds 1, 2, 3 run on 1, 2, 3 shards.
    swarm(seeds(1..4), |seed| {
        let shards = 1 + ((seed + 2) % 3) as u16;
        // Few users and movies: their review lists are hot.
        let hot = movie::Scale { users: 20, movies: 10 };
        run_movie(seed, shards, hot, 5, 800);
        run_movie(10 + seed, shards, movie::Scale::default(), 0, 800);
    });
}

fn run_travel(seed: u64, shards: u16, scale: travel::Scale, mix: Mix, requests: usize) -> usize {
    let geo_partitions = 1 + (seed % 3) as u32;
    let app = travel::app(PARTITIONS, geo_partitions);
    let functions = travel::Functions::of(&app);
    let s = travel::Services::of(&app);
    let initial = travel::load(&app, &scale, seed);
    assert_eq!(travel::check(&app, &state_of(&initial)), Vec::<String>::new());

    let mut generator = travel::Generator::new(functions, scale, seed, 1);
    generator.mix = mix;
    generator.wrong_password_percent = 20;
    let draws: Vec<travel::Draw> = (0..requests).map(|_| generator.draw()).collect();
    let reqs: Vec<_> = draws.iter().map(|d| d.request(&functions)).collect();
    let mut run = simulate(&app, &initial, &reqs, shards, seed, 100, 80);

    // The nearest hotels and the best ones, straight from the load.
    let points: Vec<travel::Point> = (0..scale.hotels).map(travel::hotel_point).collect();
    let places: BTreeMap<u64, travel::Place> = initial
        .iter()
        .filter(|(op, _, _)| *op == s.recommend)
        .map(|(_, k, v)| (k.as_u64().unwrap(), v.decode().unwrap()))
        .collect();
    let best = |score: &dyn Fn(u64) -> i64| {
        let mut hotels: Vec<(i64, u64)> = (0..scale.hotels).map(|h| (score(h), h)).collect();
        hotels.sort();
        hotels
            .into_iter()
            .take(travel::RESULTS_MAX as usize)
            .map(|(_, h)| h)
            .collect::<Vec<u64>>()
    };
    let distance = |lat: i32, lon: i32, h: u64| {
        let p = points[h as usize];
        let (a, b) = (i64::from(p.lat - lat), i64::from(p.lon - lon));
        a * a + b * b
    };

    let (mut reserved, mut full, mut wrong_passwords) = (0, 0, 0);
    let mut orders: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (d, outcome) in draws.iter().zip(&run.outcomes) {
        match (&d.action, outcome) {
            (Action::Search { lat, lon }, Outcome::Committed(p)) => {
                let found: travel::SearchReply = p.decode().unwrap();
                let hotels: Vec<u64> = found.iter().map(|(h, _, _)| *h).collect();
                assert_eq!(hotels, best(&|h| distance(*lat, *lon, h)), "search near {lat}, {lon}");
                for (h, _, rate) in &found {
                    assert_eq!(*rate, places[h].price);
                }
            }
            (Action::Recommend { criterion, lat, lon }, Outcome::Committed(p)) => {
                let found: Vec<u64> = p.decode().unwrap();
                let expected = match criterion {
                    Criterion::Distance => best(&|h| distance(*lat, *lon, h)),
                    Criterion::Rating => best(&|h| -i64::from(places[&h].rating)),
                    Criterion::Price => best(&|h| places[&h].price),
                };
                assert_eq!(found, expected, "recommend by {criterion:?}");
            }
            (Action::Login { password, user }, Outcome::Committed(p)) => {
                let ok: bool = p.decode().unwrap();
                assert_eq!(ok, *password == travel::password(*user));
                wrong_passwords += usize::from(!ok);
            }
            (Action::Reserve { order_id, reserve }, Outcome::Committed(_)) => {
                reserved += 1;
                orders.insert(*order_id, (reserve.hotel, reserve.flight));
            }
            (Action::Reserve { order_id, .. }, Outcome::Aborted(a)) => {
                assert_eq!(a.kind(), AbortKind::User, "{a:?}");
                assert!(
                    [travel::HOTEL_FULL, travel::FLIGHT_FULL].contains(&a.message()),
                    "{a:?}"
                );
                assert!(!run.state.contains_key(&(s.order, Key::from(*order_id))), "no trace");
                full += 1;
            }
            (action, outcome) => panic!("{action:?} ended {outcome:?}"),
        }
    }
    // Every committed reservation is an order, and only those.
    let stored: BTreeMap<u64, (u64, u64)> = run
        .state
        .iter()
        .filter(|((op, _), _)| *op == s.order)
        .map(|((_, k), v)| {
            let o = v.decode::<travel::Order>().unwrap();
            (k.as_u64().unwrap(), (o.hotel, o.flight))
        })
        .collect();
    assert_eq!(stored, orders);
    let capacity = |op, id: u64| run.state[&(op, Key::from(id))].decode::<Capacity>().unwrap();
    if full > 0 {
        // A reservation aborts only when a room or a seat had run out.
        assert!(
            (0..scale.hotels).any(|h| capacity(s.hotel, h).free == 0)
                || (0..scale.flights).any(|f| capacity(s.flight, f).free == 0)
        );
    }
    assert!(reserved > 0);
    if mix.login > 0 {
        assert!(wrong_passwords > 0);
    }

    let violations = travel::check(&app, &run.state);
    assert!(
        violations.is_empty(),
        "seed {seed}, {shards} shards:\n{}",
        violations.join("\n")
    );
    run.check_serial(&app, &initial);
    full
}

#[test]
fn the_travel_mix_on_one_to_three_shards() {
    // The specified mix: mostly scans. Reservations are 0.5 %, so run
    // enough requests to see some.
    // Seeds 1, 2, 3 run on 1, 2, 3 shards.
    swarm(seeds(1..4), |seed| {
        let shards = 1 + ((seed + 2) % 3) as u16;
        run_travel(seed, shards, travel::Scale::default(), Mix::default(), 1_500);
    });
}

#[test]
fn reservations_never_overbook() {
    // Mostly reservations on a few small hotels and flights: they fill up
    // and later reservations must abort.
    let scale = travel::Scale {
        hotels: 6,
        flights: 4,
        users: 50,
        rooms_per_hotel: 12,
        seats_per_flight: 15,
    };
    let mix = Mix {
        search: 1_000,
        recommend: 1_000,
        login: 1_000,
        reserve: 7_000,
    };
    // Seed index i runs seed 10 (2 + i / 3) + 1 + i % 3 (21, 22, 23, 31, …)
    // on as many shards as its last digit says.
    swarm(seeds_of(0..6, |i| 10 * (2 + i / 3) + 1 + i % 3), |seed| {
        let shards = 1 + ((seed % 10 + 2) % 3) as u16;
        let full = run_travel(seed, shards, scale, mix, 400);
        assert!(full > 0, "reservations ran out of rooms or seats");
    });
}

#[test]
fn the_checkers_catch_broken_states() {
    // Movie: a review missing from its movie's list, and a review stored
    // twice under two lists.
    let app = movie::app(PARTITIONS);
    let s = movie::Services::of(&app);
    let functions = movie::Functions::of(&app);
    let scale = movie::Scale { users: 5, movies: 5 };
    let initial = movie::load(&app, &scale, 1);
    let mut generator = movie::Generator::new(functions, scale, 1, 0);
    let reqs: Vec<_> = (0..50).map(|_| generator.next()).collect();
    let run = simulate(&app, &initial, &reqs, 2, 1, 100, 20);
    assert!(movie::check(&app, &run.state).is_empty());
    let (key, list) = run
        .state
        .iter()
        .find(|((op, _), _)| *op == s.movie_review)
        .map(|((_, k), v)| (k.clone(), v.decode::<Vec<u64>>().unwrap()))
        .unwrap();
    let mut broken = run.state.clone();
    broken.insert((s.movie_review, key.clone()), encode(&list[1..].to_vec()));
    assert!(!movie::check(&app, &broken).is_empty(), "a review missing from a list");
    let mut broken = run.state.clone();
    let mut twice = list.clone();
    twice.push(list[0]);
    broken.insert((s.movie_review, key), encode(&twice));
    assert!(!movie::check(&app, &broken).is_empty(), "a review listed twice");
    let mut broken = run.state.clone();
    let (k, _) = broken.iter().find(|((op, _), _)| *op == s.compose_review).unwrap();
    let k = k.clone();
    broken.remove(&k);
    assert!(!movie::check(&app, &broken).is_empty(), "a review no request composed");

    // Travel: an overbooked hotel, and a seat taken without an order.
    let app = travel::app(PARTITIONS, 2);
    let s = travel::Services::of(&app);
    let state = state_of(&travel::load(&app, &travel::Scale::default(), 1));
    assert!(travel::check(&app, &state).is_empty());
    let mut broken = state.clone();
    broken.insert((s.hotel, Key::from(3u64)), encode(&Capacity { total: 200, free: -1 }));
    assert!(!travel::check(&app, &broken).is_empty(), "an overbooked hotel");
    let mut broken = state;
    broken.insert((s.flight, Key::from(7u64)), encode(&Capacity { total: 200, free: 199 }));
    assert!(
        !travel::check(&app, &broken).is_empty(),
        "a seat taken without an order"
    );
}

fn encode<T: styx_engine::Store>(v: &T) -> Value {
    Value::encode(v, &mut Default::default()).unwrap()
}
