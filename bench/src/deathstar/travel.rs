//! Travel reservation: DeathStarBench's hotel reservation with the flights
//! Beldi added, so that a reservation spans two services.
//!
//! The mix (benchmarks.md): 60 % search, 39 % recommend, 0.5 % login,
//! 0.5 % reserve.
//!
//! - **search** (`frontend.search`): asks every `geo` partition for its
//!   hotels nearest a point (a partition function scanning its partition),
//!   keeps the [`RESULTS_MAX`] nearest, then reads their rate plans;
//! - **recommend** (`frontend.recommend`): asks every `recommend` partition
//!   for its best hotels by distance, rating or price, keeps the best;
//! - **login** (`user.login`): checks a password against its salted hash;
//! - **reserve** (`order.reserve`): takes a room of a hotel and a seat of a
//!   flight at once, aborting with [`HOTEL_FULL`] or [`FLIGHT_FULL`] when
//!   either has none left, and records the order.
//!
//! | operator    | key        | state                     | partitions        |
//! |-------------|------------|---------------------------|-------------------|
//! | `frontend`  | request id | none                      | `partitions`      |
//! | `geo`       | hotel id   | [`Point`]                 | `geo_partitions`  |
//! | `recommend` | hotel id   | [`Place`]                 | `geo_partitions`  |
//! | `rate`      | hotel id   | [`RatePlan`]              | `partitions`      |
//! | `user`      | username   | [`User`]                  | `partitions`      |
//! | `hotel`     | hotel id   | [`Capacity`]: rooms       | `partitions`      |
//! | `flight`    | flight id  | [`Capacity`]: seats       | `partitions`      |
//! | `order`     | order id   | [`Order`]                 | `partitions`      |
//!
//! Design decisions:
//!
//! - Geo data lives in its own operator with few partitions: a search fans
//!   out to every one of them, so their number is the search's fan-out.
//!   DeathStarBench's geo and recommendation services each hold all hotels
//!   in one process's memory; one partition is that, more spread the scan
//!   over shards. Geo, recommend and rate entities are never written, so
//!   the scans conflict with nothing.
//! - Coordinates are integer microdegrees and distance is squared
//!   Euclidean distance on them: exact, so every replay ranks hotels alike
//!   (DeathStarBench ranks by great-circle distance over floats).
//! - A capacity keeps its total beside what is free, so the checker sees an
//!   overbooking (free below zero, or orders that do not add up) in the
//!   state alone.

mod closures;

pub use closures::install_closures;

use super::{State, Violations, password_hash};
use crate::Api;
use rkyv::{Archive, Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use styx_engine::rng::Rng;
use styx_engine::{
    self as styx, Abort, Address, App, Call, Ctx, FnId, Key, OpId, Payload, Request, Scratch, Store, Value, mix64,
};

pub const FRONTEND: &str = "frontend";
pub const GEO: &str = "geo";
pub const RECOMMEND: &str = "recommend";
pub const RATE: &str = "rate";
pub const USER: &str = "user";
pub const HOTEL: &str = "hotel";
pub const FLIGHT: &str = "flight";
pub const ORDER: &str = "order";

/// The aborts of a reservation that finds no room or no seat.
pub const HOTEL_FULL: &str = "hotel full";
pub const FLIGHT_FULL: &str = "flight full";
/// Hotels a search or recommendation returns at most (DeathStarBench: 5).
pub const RESULTS_MAX: u32 = 5;

/// Amounts of money, in cents.
pub type Cents = i64;

/// A position in microdegrees.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub lat: i32,
    pub lon: i32,
}

/// What the recommendation service knows of a hotel.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub lat: i32,
    pub lon: i32,
    /// Stars in tenths (0..=50).
    pub rating: u16,
    pub price: Cents,
}

#[styx::entity(name = "rate", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RatePlan {
    pub code: String,
    pub in_date: String,
    pub out_date: String,
    pub bookable_rate: Cents,
    pub total_rate: Cents,
    pub total_rate_inclusive: Cents,
    pub room_description: String,
}

#[styx::entity(name = "user", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub salt: u64,
    pub password_hash: u64,
}

/// Rooms of a hotel or seats of a flight.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub total: i64,
    pub free: i64,
}

/// A hotel: its rooms. Archives to the bytes of the bare [`Capacity`]
/// (pinned by a test), which the loader and the checker use.
#[styx::entity(name = "hotel", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hotel {
    pub rooms: Capacity,
}

/// A flight: its seats, stored like [`Hotel`].
#[styx::entity(name = "flight", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flight {
    pub seats: Capacity,
}

/// The frontend service: no state; its functions never touch their
/// entity (keyed by request id).
#[styx::entity(name = "frontend")]
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frontend;

#[styx::entity(name = "order", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Order {
    pub user: String,
    pub hotel: u64,
    pub flight: u64,
    pub at_us: u64,
}

/// What recommend ranks by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Criterion {
    Distance = 0,
    Rating = 1,
    Price = 2,
}

/// A reservation request; it runs on `order(order_id)`.
#[derive(styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct Reserve {
    pub user: String,
    pub hotel: u64,
    pub flight: u64,
}

/// Search's reply: `(hotel, rate code, bookable rate)`, nearest first.
pub type SearchReply = Vec<(u64, String, Cents)>;

/// The resolved ids of the application's functions.
#[derive(Clone, Copy, Debug)]
pub struct Functions {
    pub search: FnId,
    pub recommend: FnId,
    pub login: FnId,
    pub reserve: FnId,
    pub rate_get: FnId,
    pub hotel_reserve: FnId,
    pub flight_reserve: FnId,
}

impl Functions {
    pub fn of(app: &App) -> Functions {
        let f = |op, name| {
            app.resolve(op, name)
                .unwrap_or_else(|| panic!("{} has no function {op}.{name}", app.name()))
        };
        Functions {
            search: f(FRONTEND, "search"),
            recommend: f(FRONTEND, "recommend"),
            login: f(USER, "login"),
            reserve: f(ORDER, "reserve"),
            rate_get: f(RATE, "get"),
            hotel_reserve: f(HOTEL, "reserve"),
            flight_reserve: f(FLIGHT, "reserve"),
        }
    }
}

/// The operator of every service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Services {
    pub frontend: OpId,
    pub geo: OpId,
    pub recommend: OpId,
    pub rate: OpId,
    pub user: OpId,
    pub hotel: OpId,
    pub flight: OpId,
    pub order: OpId,
}

impl Services {
    pub fn of(app: &App) -> Services {
        let op = |name| {
            app.op_id(name)
                .unwrap_or_else(|| panic!("{} has no operator {name}", app.name()))
        };
        Services {
            frontend: op(FRONTEND),
            geo: op(GEO),
            recommend: op(RECOMMEND),
            rate: op(RATE),
            user: op(USER),
            hotel: op(HOTEL),
            flight: op(FLIGHT),
            order: op(ORDER),
        }
    }
}

/// The travel application: geo data over `geo_partitions`, the rest over
/// `partitions`.
pub fn app(partitions: u32, geo_partitions: u32) -> Arc<App> {
    app_with(partitions, geo_partitions, Api::Typed)
}

/// The travel application written with `api`.
pub fn app_with(partitions: u32, geo_partitions: u32, api: Api) -> Arc<App> {
    let mut app = App::new("travel");
    match api {
        Api::Typed => install(&mut app, partitions, geo_partitions),
        Api::Closures => install_closures(&mut app, partitions, geo_partitions),
    };
    Arc::new(app)
}

fn distance2(a: (i32, i32), b: (i32, i32)) -> u64 {
    let dlat = i64::from(a.0) - i64::from(b.0);
    let dlon = i64::from(a.1) - i64::from(b.1);
    (dlat * dlat + dlon * dlon) as u64
}

/// Keeps the `k` smallest `(score, hotel)` pairs, sorted.
fn keep_best<S: Ord + Copy>(best: &mut Vec<(S, u64)>, k: usize, candidate: (S, u64)) {
    let at = best.partition_point(|b| *b < candidate);
    if at < k {
        best.insert(at, candidate);
        best.truncate(k);
    }
}

fn results(k: u32) -> Result<usize, Abort> {
    if k == 0 || k > RESULTS_MAX {
        return Err(Abort::new(format!("{k} results asked, expected 1..={RESULTS_MAX}")));
    }
    Ok(k as usize)
}

/// Takes one unit of the entity's capacity, or aborts with `full` (the
/// closure version of [`Hotel::reserve`]).
async fn take_one(ctx: styx_engine::Ctx, full: &'static str) -> Result<i64, Abort> {
    let mut c = ctx
        .get::<Capacity>()?
        .ok_or_else(|| Abort::new(format!("no such {}", ctx.key())))?;
    if c.free <= 0 {
        return Err(Abort::new(full));
    }
    c.free -= 1;
    ctx.put(&c)?;
    Ok(c.free)
}

/// Registers the scans of the geo and recommendation partitions, shared by
/// both APIs: typed entities have no partition functions yet, so these
/// stay closures.
fn install_scans(app: &mut App, geo: OpId, recommend: OpId) {
    app.partition_function(geo, "nearby", |ctx, (lat, lon, k): (i32, i32, u32)| async move {
        let k = results(k)?;
        let mut best: Vec<(u64, u64)> = Vec::with_capacity(k + 1);
        ctx.scan::<Point>(|key, p| {
            let hotel = key.as_u64().expect("hotel ids are u64 keys");
            keep_best(
                &mut best,
                k,
                (distance2((lat, lon), (p.lat.to_native(), p.lon.to_native())), hotel),
            );
        })?;
        Ok(best)
    });
    app.partition_function(
        recommend,
        "best",
        |ctx, (criterion, lat, lon, k): (u8, i32, i32, u32)| async move {
            let k = results(k)?;
            let mut best: Vec<(i64, u64)> = Vec::with_capacity(k + 1);
            ctx.scan::<Place>(|key, p| {
                let hotel = key.as_u64().expect("hotel ids are u64 keys");
                let score = match criterion {
                    0 => distance2((lat, lon), (p.lat.to_native(), p.lon.to_native())) as i64,
                    1 => -i64::from(p.rating.to_native()),
                    _ => p.price.to_native(),
                };
                keep_best(&mut best, k, (score, hotel));
            })?;
            Ok(best)
        },
    );
}

/// Registers the services and their functions on `app`: the services as
/// typed entities, declared in the order of [`install_closures`] (so both
/// APIs number the operators alike), the geo scans as partition functions.
pub fn install(app: &mut App, partitions: u32, geo_partitions: u32) -> Functions {
    app.entity_with::<Frontend>(partitions);
    let geo = app.operator(GEO, geo_partitions);
    let recommend = app.operator(RECOMMEND, geo_partitions);
    install_scans(app, geo, recommend);
    app.entity_with::<RatePlan>(partitions);
    app.entity_with::<User>(partitions);
    app.entity_with::<Hotel>(partitions);
    app.entity_with::<Flight>(partitions);
    app.entity_with::<Order>(partitions);
    Functions::of(app)
}

/// Merges the best `RESULTS_MAX` of every partition's answer.
async fn merge_best<S: Ord + Copy + styx::Decode>(calls: Vec<Call<Vec<(S, u64)>>>) -> Result<Vec<(S, u64)>, Abort> {
    let mut best = Vec::with_capacity(RESULTS_MAX as usize + 1);
    for call in calls {
        for candidate in call.await? {
            keep_best(&mut best, RESULTS_MAX as usize, candidate);
        }
    }
    Ok(best)
}

#[styx::functions]
impl Frontend {
    /// The hotels nearest `(lat, lon)` that have a rate plan, with it.
    pub async fn search(ctx: &Ctx, lat: i32, lon: i32) -> Result<SearchReply, Abort> {
        let calls: Vec<Call<Vec<(u64, u64)>>> = (0..ctx.partitions(GEO)?)
            .map(|p| ctx.call_partition(GEO, p, "nearby", (lat, lon, RESULTS_MAX)))
            .collect();
        let best = merge_best(calls).await?;
        let rates: Vec<Call<Option<(String, Cents)>>> =
            best.iter().map(|(_, h)| ctx.entity::<RatePlan>(*h).get()).collect();
        let mut out: SearchReply = Vec::with_capacity(best.len());
        for ((_, hotel), rate) in best.iter().zip(rates) {
            if let Some((code, price)) = rate.await? {
                out.push((*hotel, code, price));
            }
        }
        Ok(out)
    }

    /// The best hotels by `criterion` (a [`Criterion`] as its number).
    pub async fn recommend(ctx: &Ctx, criterion: u8, lat: i32, lon: i32) -> Result<Vec<u64>, Abort> {
        if criterion > Criterion::Price as u8 {
            return Err(Abort::new(format!("no criterion {criterion}")));
        }
        let calls: Vec<Call<Vec<(i64, u64)>>> = (0..ctx.partitions(RECOMMEND)?)
            .map(|p| ctx.call_partition(RECOMMEND, p, "best", (criterion, lat, lon, RESULTS_MAX)))
            .collect();
        let best = merge_best(calls).await?;
        Ok(best.into_iter().map(|(_, h)| h).collect())
    }
}

#[styx::functions]
impl RatePlan {
    /// The rate code and bookable rate, read in place; none for a hotel
    /// without a plan.
    pub async fn get(ctx: &Ctx) -> Result<Option<(String, Cents)>, Abort> {
        ctx.read::<RatePlan, _>(|r| (r.code.to_string(), r.bookable_rate.to_native()))
    }
}

#[styx::functions]
impl User {
    /// Whether `password` is the user's, read in place; false for an
    /// unknown user.
    pub async fn login(ctx: &Ctx, password: String) -> Result<bool, Abort> {
        Ok(ctx
            .read::<User, _>(|u| password_hash(u.salt.to_native(), &password) == u.password_hash.to_native())?
            .unwrap_or(false))
    }
}

impl Capacity {
    /// Takes one unit, or aborts with `full`; returns what is left.
    fn take_one(&mut self, full: &'static str) -> Result<i64, Abort> {
        if self.free <= 0 {
            return Err(Abort::new(full));
        }
        self.free -= 1;
        Ok(self.free)
    }
}

#[styx::functions]
impl Hotel {
    /// Takes a room, or aborts with [`HOTEL_FULL`].
    pub async fn reserve(&mut self) -> Result<i64, Abort> {
        self.rooms.take_one(HOTEL_FULL)
    }
}

#[styx::functions]
impl Flight {
    /// Takes a seat, or aborts with [`FLIGHT_FULL`].
    pub async fn reserve(&mut self) -> Result<i64, Abort> {
        self.seats.take_one(FLIGHT_FULL)
    }
}

#[styx::functions]
impl Order {
    /// The reservation: a room and a seat at once, then the order.
    pub async fn reserve(ctx: &Ctx, r: Reserve) -> Result<(), Abort> {
        if ctx.read::<Order, _>(|_| ())?.is_some() {
            return Err(Abort::new(format!("order {} exists already", ctx.key())));
        }
        let room = ctx.entity::<Hotel>(r.hotel).reserve();
        let seat = ctx.entity::<Flight>(r.flight).reserve();
        room.await?;
        seat.await?;
        ctx.put(&Order {
            user: r.user,
            hotel: r.hotel,
            flight: r.flight,
            at_us: ctx.now_us(),
        })
    }
}
// ---------------------------------------------------------------------------
// Load.

/// How much to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub hotels: u64,
    pub flights: u64,
    pub users: u64,
    pub rooms_per_hotel: i64,
    pub seats_per_flight: i64,
}

impl Default for Scale {
    /// DeathStarBench's hotel setup (80 hotels, 500 users), as many
    /// flights, 200 rooms and 200 seats each.
    fn default() -> Scale {
        Scale {
            hotels: 80,
            flights: 80,
            users: 500,
            rooms_per_hotel: 200,
            seats_per_flight: 200,
        }
    }
}

/// User `i`'s name and password (DeathStarBench's: "Cornell_i", and i's
/// digits repeated ten times).
pub fn username(i: u64) -> String {
    format!("Cornell_{i}")
}

pub fn password(i: u64) -> String {
    i.to_string().repeat(10)
}

/// Hotel `i`'s position, on DeathStarBench's diagonal south of the search
/// area's centre.
pub fn hotel_point(i: u64) -> Point {
    Point {
        lat: 37_783_500 + 6_000 * i as i32,
        lon: -122_410_000 + 8_000 * i as i32,
    }
}

/// The initial state.
pub fn load(app: &App, scale: &Scale, seed: u64) -> Vec<(OpId, Key, Value)> {
    let s = Services::of(app);
    let mut rng = Rng::new(mix64(seed));
    let mut scratch = Scratch::default();
    let mut out = Vec::new();
    for h in 0..scale.hotels {
        let point = hotel_point(h);
        let price = 10_000 + rng.below(20_000) as Cents;
        let place = Place {
            lat: point.lat,
            lon: point.lon,
            rating: 10 + rng.below(41) as u16,
            price,
        };
        let plan = RatePlan {
            code: format!("RACK{h}"),
            in_date: "2015-04-09".to_string(),
            out_date: "2015-04-10".to_string(),
            bookable_rate: price,
            total_rate: price,
            total_rate_inclusive: price + price / 10,
            room_description: "King sized bed".to_string(),
        };
        let rooms = Capacity {
            total: scale.rooms_per_hotel,
            free: scale.rooms_per_hotel,
        };
        out.push((s.geo, Key::from(h), archive(&point, &mut scratch)));
        out.push((s.recommend, Key::from(h), archive(&place, &mut scratch)));
        out.push((s.rate, Key::from(h), archive(&plan, &mut scratch)));
        out.push((s.hotel, Key::from(h), archive(&rooms, &mut scratch)));
    }
    for f in 0..scale.flights {
        let seats = Capacity {
            total: scale.seats_per_flight,
            free: scale.seats_per_flight,
        };
        out.push((s.flight, Key::from(f), archive(&seats, &mut scratch)));
    }
    for u in 0..scale.users {
        let salt = mix64(seed ^ mix64(u));
        let user = User {
            salt,
            password_hash: password_hash(salt, &password(u)),
        };
        out.push((s.user, Key::from(username(u)), archive(&user, &mut scratch)));
    }
    out
}

fn archive<T: Store>(v: &T, scratch: &mut Scratch) -> Value {
    Value::encode(v, scratch).expect("a loaded row archives")
}

// ---------------------------------------------------------------------------
// Requests.

/// The mix, in hundredths of a percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    pub search: u32,
    pub recommend: u32,
    pub login: u32,
    pub reserve: u32,
}

impl Default for Mix {
    /// 60 % search, 39 % recommend, 0.5 % login, 0.5 % reserve.
    fn default() -> Mix {
        Mix {
            search: 6_000,
            recommend: 3_900,
            login: 50,
            reserve: 50,
        }
    }
}

/// One generated request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Search { lat: i32, lon: i32 },
    Recommend { criterion: Criterion, lat: i32, lon: i32 },
    Login { user: u64, password: String },
    Reserve { order_id: u64, reserve: Reserve },
}

/// A generated request: its id and what it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Draw {
    pub req_id: u64,
    pub action: Action,
}

impl Draw {
    pub fn request(&self, f: &Functions) -> Request {
        let (function, key, args) = match &self.action {
            Action::Search { lat, lon } => (f.search, Key::from(self.req_id), Payload::encode(&(*lat, *lon))),
            Action::Recommend { criterion, lat, lon } => (
                f.recommend,
                Key::from(self.req_id),
                Payload::encode(&(*criterion as u8, *lat, *lon)),
            ),
            Action::Login { user, password } => (f.login, Key::from(username(*user)), Payload::encode(password)),
            Action::Reserve { order_id, reserve } => (f.reserve, Key::from(*order_id), Payload::encode(reserve)),
        };
        Request {
            function,
            address: Address::Entity(key),
            args,
            client: None,
        }
    }
}

/// Draws travel requests: points uniform in DeathStarBench's search area
/// (38.0235 ± 0.2405 N, 122.095 ± 0.157 W), users, hotels and flights
/// uniform.
pub struct Generator {
    functions: Functions,
    scale: Scale,
    next_req_id: u64,
    pub mix: Mix,
    /// Percent of logins with a wrong password.
    pub wrong_password_percent: u32,
    rng: Rng,
}

impl Generator {
    /// Request ids (and order ids) start at `first_req_id`; give generators
    /// that run side by side disjoint ranges.
    pub fn new(functions: Functions, scale: Scale, seed: u64, first_req_id: u64) -> Generator {
        Generator {
            functions,
            scale,
            next_req_id: first_req_id,
            mix: Mix::default(),
            wrong_password_percent: 0,
            rng: Rng::new(seed),
        }
    }

    /// The next request; the entity it runs on is its `address`.
    // Not an `Iterator`: the stream never ends, so `Option` would only be noise.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Request {
        self.draw().request(&self.functions)
    }

    fn point(&mut self) -> (i32, i32) {
        let lat = 38_023_500 - 240_500 + self.rng.below(481_001) as i32;
        let lon = -122_095_000 - 157_000 + self.rng.below(314_001) as i32;
        (lat, lon)
    }

    pub fn draw(&mut self) -> Draw {
        let req_id = self.next_req_id;
        self.next_req_id += 1;
        let m = self.mix;
        let total = u64::from(m.search + m.recommend + m.login + m.reserve);
        assert!(total > 0, "an empty mix");
        let roll = self.rng.below(total) as u32;
        let action = if roll < m.search {
            let (lat, lon) = self.point();
            Action::Search { lat, lon }
        } else if roll < m.search + m.recommend {
            let criterion = [Criterion::Distance, Criterion::Rating, Criterion::Price][self.rng.below(3) as usize];
            let (lat, lon) = self.point();
            Action::Recommend { criterion, lat, lon }
        } else if roll < m.search + m.recommend + m.login {
            let user = self.rng.below(self.scale.users);
            let mut password = password(user);
            if self.rng.below(100) < u64::from(self.wrong_password_percent) {
                password.push('x');
            }
            Action::Login { user, password }
        } else {
            let user = self.rng.below(self.scale.users);
            Action::Reserve {
                order_id: req_id,
                reserve: Reserve {
                    user: username(user),
                    hotel: self.rng.below(self.scale.hotels),
                    flight: self.rng.below(self.scale.flights),
                },
            }
        };
        Draw { req_id, action }
    }
}

// ---------------------------------------------------------------------------
// The checker.

/// No overbooking: every hotel and flight has between zero and all of its
/// capacity free, and what it lacks is exactly the orders that name it;
/// every order names a hotel, a flight and a user that exist.
pub fn check(app: &App, state: &State) -> Vec<String> {
    let s = Services::of(app);
    let mut v = Violations::default();
    let mut hotels: BTreeMap<u64, Capacity> = BTreeMap::new();
    let mut flights: BTreeMap<u64, Capacity> = BTreeMap::new();
    let mut users: BTreeSet<Key> = BTreeSet::new();
    let mut orders: Vec<(Key, Order)> = Vec::new();
    for ((op, key), value) in state {
        let op = *op;
        if op == s.hotel || op == s.flight {
            match (key.as_u64(), value.decode::<Capacity>()) {
                (Some(id), Ok(c)) if op == s.hotel => drop(hotels.insert(id, c)),
                (Some(id), Ok(c)) => drop(flights.insert(id, c)),
                (id, c) => v.add(format!("{op:?} {key}: id {id:?}, capacity {c:?}")),
            }
        } else if op == s.user {
            users.insert(key.clone());
        } else if op == s.order {
            match value.decode::<Order>() {
                Ok(o) => orders.push((key.clone(), o)),
                Err(e) => v.add(format!("order {key}: {e}")),
            }
        }
    }
    let mut rooms_taken: BTreeMap<u64, i64> = BTreeMap::new();
    let mut seats_taken: BTreeMap<u64, i64> = BTreeMap::new();
    for (key, o) in &orders {
        if !hotels.contains_key(&o.hotel) || !flights.contains_key(&o.flight) {
            v.add(format!(
                "order {key} names hotel {} and flight {}: not both exist",
                o.hotel, o.flight
            ));
        }
        if !users.contains(&Key::from(o.user.as_str())) {
            v.add(format!("order {key} names unknown user {}", o.user));
        }
        *rooms_taken.entry(o.hotel).or_default() += 1;
        *seats_taken.entry(o.flight).or_default() += 1;
    }
    for (what, capacities, taken) in [("hotel", &hotels, &rooms_taken), ("flight", &flights, &seats_taken)] {
        for (id, c) in capacities {
            let taken = taken.get(id).copied().unwrap_or(0);
            if c.free < 0 || c.free > c.total {
                v.add(format!("{what} {id}: {} of {} free", c.free, c.total));
            }
            if c.total - c.free != taken {
                v.add(format!(
                    "{what} {id}: {} of {} taken, but {taken} orders name it",
                    c.total - c.free,
                    c.total
                ));
            }
        }
    }
    v.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use styx_engine::Entity;

    /// The typed entities name the operators the closures declare, and a
    /// hotel or flight stores the bytes of its bare capacity.
    #[test]
    fn entities_are_the_services_and_capacities_archive_bare() {
        assert_eq!(
            [
                Frontend::NAME,
                RatePlan::NAME,
                User::NAME,
                Hotel::NAME,
                Flight::NAME,
                Order::NAME
            ],
            [FRONTEND, RATE, USER, HOTEL, FLIGHT, ORDER]
        );
        for c in [Capacity { total: 0, free: 0 }, Capacity { total: 200, free: -3 }] {
            let bare = archive(&c, &mut Scratch::default()).to_vec();
            assert_eq!(bare, archive(&Hotel { rooms: c }, &mut Scratch::default()).to_vec());
            assert_eq!(bare, archive(&Flight { seats: c }, &mut Scratch::default()).to_vec());
        }
    }
}
