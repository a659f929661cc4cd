//! The benchmark workloads as the in-process [`runner`](crate::runner)
//! drives them: YCSB-T, TPC-C, movie review and travel reservation.
//!
//! Each adapter says which requests a shard may send (their root entity on
//! that shard), how it splits its load into lanes, and what it checks at
//! the end:
//!
//! - [`Ycsbt`]: debtors drawn among the accounts the shard owns; checks that
//!   every balance is its start plus the committed transfers that touched it
//!   (so the total is conserved) and that none is negative.
//! - [`Tpcc`]: one lane per district the shard owns, as a TPC-C terminal
//!   bound to that district (see below); checks the consistency conditions
//!   of [`tpcc::check`] and that exactly the NewOrders naming an unused item
//!   rolled back.
//! - [`Movie`], [`Travel`]: request ids (the root entities of compose,
//!   search, recommend and reserve) are taken among the ids the shard owns;
//!   a login, keyed by its user, is drawn again until the shard owns it.
//!   Check: [`movie::check`], [`travel::check`], and no abort a valid
//!   request should not have.
//!
//! # TPC-C's terminals
//!
//! NewOrders of one district serialize (they share D_NEXT_O_ID, and their
//! write sets depend on it: see [`crate::tpcc`]), so offering a district
//! many at once only queues them behind each other in phase 3. TPC-C bounds
//! the load instead: ten terminals per warehouse, one transaction
//! outstanding each. Here a terminal is bound to one district, so a
//! warehouse's ten terminals are its ten districts and closed loop keeps
//! `in_flight` requests outstanding per district (default one). The drawn
//! transaction keeps every input TPC-C gives it except the district, which
//! is the terminal's (and, for a local Payment, the customer's district).
//!
//! [`run`] and [`Params`] keep the YCSB-T interface the CLI and tests had.

use crate::Api;
use crate::deathstar::{movie, travel};
use crate::report::Report;
pub use crate::runner::Load;
use crate::runner::{self, Source, State, Workload};
use crate::tpcc;
use crate::ycsbt::{self, START_BALANCE};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use styx_engine::{AbortKind, Address, App, Config, Key, OpId, Outcome, Request, Shard, Value, mix64};

fn ok_or_failure(failures: &mut Vec<String>, unexpected: &mut u64, what: &str, outcome: &Outcome) {
    if let Outcome::Aborted(a) = outcome {
        *unexpected += 1;
        if failures.len() < runner::FAILURES_KEPT_MAX {
            failures.push(format!("{what}: {a}"));
        }
    }
}

/// Unexpected outcomes a source saw.
#[derive(Debug, Default)]
pub struct Surprises {
    pub count: u64,
    pub first: Vec<String>,
}

impl Surprises {
    fn report(tallies: impl IntoIterator<Item = Surprises>, errors: &mut Vec<String>) {
        let (mut count, mut first) = (0, Vec::new());
        for t in tallies {
            count += t.count;
            first.extend(t.first);
        }
        if count > 0 {
            first.truncate(runner::FAILURES_KEPT_MAX);
            errors.push(format!("{count} unexpected outcomes: {}", first.join("; ")));
        }
    }
}

/// The owner of `root` for `request`'s function.
fn root_owner(app: &App, shards: u16, request: &Request) -> u16 {
    match &request.address {
        Address::Entity(key) => Shard::owner(app, shards, request.function.op, key),
        Address::Partition(p) => styx_engine::partition_owner(*p, shards),
    }
}

/// Ids `0, 1, 2, …` of one operator's entities that one shard owns: shards
/// scanning the same sequence take disjoint ids.
struct OwnedIds {
    next: u64,
    shard: u16,
    shards: u16,
}

impl OwnedIds {
    fn new(shard: u16, shards: u16) -> OwnedIds {
        OwnedIds { next: 0, shard, shards }
    }

    fn take(&mut self, app: &App, op: OpId) -> u64 {
        loop {
            let id = self.next;
            self.next += 1;
            if Shard::owner(app, self.shards, op, &Key::from(id)) == self.shard {
                return id;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// YCSB-T.

/// Bank transfers over `keys` accounts.
#[derive(Clone, Debug)]
pub struct Ycsbt {
    pub keys: u64,
    /// Creditor skew; uniform when `None`.
    pub zipf: Option<f64>,
    pub partitions: u32,
    /// How the application is written.
    pub api: Api,
    /// With `zipf`: the hottest creditors are the accounts this shard owns
    /// by the default rule (all of them rank before any other), so the
    /// load is skewed onto one shard (a rebalance's case).
    pub hot_shard: Option<u16>,
    /// With `hot_shard`: every generator roots its transfers on that
    /// shard's accounts (debtors drawn uniformly from them, the requests
    /// hop there from the other shards' generators), so the roots' work,
    /// not only the creditors', lands on one shard — clients that favour
    /// one shard's keys. Creditors stay as `zipf` says.
    pub hot_roots: bool,
}

impl Ycsbt {
    /// Zipf ranks → accounts: the hot shard's accounts first, in order.
    fn ranks(&self, app: &App, shards: u16, hot: u16) -> Vec<u32> {
        let account = app.op_id(ycsbt::OPERATOR).expect("account operator");
        let on = |k: &u64| Shard::owner(app, shards, account, &Key::from(*k)) == hot % shards;
        let (mut ranks, rest): (Vec<u64>, Vec<u64>) = (0..self.keys).partition(on);
        ranks.extend(rest);
        ranks.into_iter().map(|k| k as u32).collect()
    }
}

/// Transfers a generator draws at a time, and committed ones it counts at
/// a time. Drawing a debtor reads a random element of the shard's account
/// list and counting a transfer changes two random per-account tallies:
/// with 1M accounts each is a cache miss on the shard's core, which one
/// request at a time took in turn (14% and 7% of a 1-shard run). In a
/// batch the lookups do not depend on each other and overlap.
const DRAW_AHEAD: usize = 256;
const TALLY_BATCH: usize = 4096;

pub struct YcsbtSource {
    workload: ycsbt::Workload,
    functions: ycsbt::Functions,
    deltas: Vec<i32>,
    /// Transfers drawn ahead, served from `drawn_next` on (the same
    /// sequence as drawing one per request).
    drawn: Vec<(u64, u64)>,
    drawn_next: usize,
    /// Committed transfers not yet counted in `deltas`.
    committed: Vec<(u32, u32)>,
}

impl YcsbtSource {
    fn count_committed(&mut self) {
        for (debtor, creditor) in self.committed.drain(..) {
            self.deltas[debtor as usize] -= 1;
            self.deltas[creditor as usize] += 1;
        }
    }
}

impl Source for YcsbtSource {
    type Tag = (u32, u32);
    type Tally = Vec<i32>;

    fn lanes(&self) -> usize {
        1
    }

    fn next(&mut self, _lane: usize) -> (Request, (u32, u32)) {
        if self.drawn_next == self.drawn.len() {
            self.drawn.clear();
            self.drawn.extend((0..DRAW_AHEAD).map(|_| self.workload.transfer()));
            self.drawn_next = 0;
        }
        let (debtor, creditor) = self.drawn[self.drawn_next];
        self.drawn_next += 1;
        let request = ycsbt::transfer(&self.functions, debtor, creditor, 1);
        (request, (debtor as u32, creditor as u32))
    }

    fn record(&mut self, transfer: (u32, u32), outcome: &Outcome) {
        if let Outcome::Committed(_) = outcome {
            self.committed.push(transfer);
            if self.committed.len() >= TALLY_BATCH {
                self.count_committed();
            }
        }
    }

    fn finish(mut self) -> Vec<i32> {
        self.count_committed();
        self.deltas
    }
}

impl Workload for Ycsbt {
    type Source = YcsbtSource;

    fn name(&self) -> &'static str {
        "ycsbt"
    }

    fn parameters(&self) -> BTreeMap<String, serde_json::Value> {
        let mut p = BTreeMap::new();
        p.insert("keys".into(), self.keys.into());
        p.insert("zipf".into(), self.zipf.map_or(serde_json::Value::Null, Into::into));
        p.insert("partitions".into(), self.partitions.into());
        p.insert("api".into(), self.api.name().into());
        if let Some(hot) = self.hot_shard {
            p.insert("hot_shard".into(), hot.into());
            p.insert("hot_roots".into(), self.hot_roots.into());
        }
        p
    }

    fn app(&self) -> Arc<App> {
        ycsbt::app_with(self.partitions, self.api)
    }

    fn load(&self, app: &App, emit: &mut dyn FnMut(OpId, Key, Value)) {
        let account = app.op_id(ycsbt::OPERATOR).expect("account operator");
        let start = ycsbt::start_value();
        for k in 0..self.keys {
            emit(account, Key::from(k), start.clone());
        }
    }

    fn source(&self, app: &Arc<App>, shard: u16, shards: u16, seed: u64) -> YcsbtSource {
        assert!(
            self.keys >= 2 && self.keys <= u64::from(u32::MAX),
            "{} accounts",
            self.keys
        );
        let account = app.op_id(ycsbt::OPERATOR).expect("account operator");
        let roots = match (self.hot_roots, self.hot_shard) {
            (true, Some(hot)) => hot % shards,
            _ => shard,
        };
        let debtors: Vec<u64> = (0..self.keys)
            .filter(|k| Shard::owner(app, shards, account, &Key::from(*k)) == roots)
            .collect();
        let mut workload = ycsbt::Workload::new(self.keys, debtors, self.zipf, seed);
        if let (Some(hot), Some(_)) = (self.hot_shard, self.zipf) {
            workload = workload.ranked(self.ranks(app, shards, hot));
        }
        YcsbtSource {
            workload,
            functions: ycsbt::Functions::of(app),
            deltas: vec![0; self.keys as usize],
            drawn: Vec::with_capacity(DRAW_AHEAD),
            drawn_next: 0,
            committed: Vec::with_capacity(TALLY_BATCH),
        }
    }

    fn lanes_of(&self, _app: &Arc<App>, _shard: u16, _shards: u16) -> usize {
        1
    }

    /// Each balance is its start plus the committed transfers that touched
    /// it; hence the total is conserved.
    fn check(&self, app: &App, state: &State, tallies: Vec<Vec<i32>>) -> Vec<String> {
        self.check_from(app, None, state, tallies)
    }

    fn checks_from_start(&self) -> bool {
        true
    }

    /// With `start`, each account starts from its balance there (absent:
    /// 0) instead of `START_BALANCE`, and the total is `start`'s.
    fn check_from(&self, app: &App, start: Option<&State>, state: &State, tallies: Vec<Vec<i32>>) -> Vec<String> {
        let account = app.op_id(ycsbt::OPERATOR).expect("account operator");
        let balance = |s: &State, k: u64| {
            s.get(&(account, Key::from(k)))
                .map_or(0, |v| v.decode::<i64>().expect("balances are i64"))
        };
        let mut deltas = vec![0i64; self.keys as usize];
        for t in tallies {
            for (d, x) in deltas.iter_mut().zip(t) {
                *d += i64::from(x);
            }
        }
        let mut errors = Vec::new();
        let (mut total, mut want_total): (i64, i64) = (0, 0);
        for (k, delta) in deltas.iter().enumerate() {
            let got = balance(state, k as u64);
            total += got;
            let from = start.map_or(START_BALANCE, |s| balance(s, k as u64));
            want_total += from;
            let want = from + delta;
            if got != want && errors.len() < 10 {
                errors.push(format!("account {k}: balance {got}, expected {want}"));
            }
            if got < 0 && errors.len() < 10 {
                errors.push(format!("account {k} is overdrawn: {got}"));
            }
        }
        if total != want_total {
            errors.push(format!("total {total}, expected {want_total}"));
        }
        errors
    }
}

// ---------------------------------------------------------------------------
// TPC-C.

/// TPC-C NewOrder and Payment.
#[derive(Clone, Debug)]
pub struct Tpcc {
    pub scale: tpcc::Scale,
    pub mix: tpcc::Mix,
    pub partitions: u32,
    /// The seed of the initial database.
    pub load_seed: u64,
    /// How the application is written.
    pub api: Api,
}

impl Tpcc {
    /// The districts shard `shard` of `shards` owns (their roots are there).
    fn districts(&self, app: &App, shard: u16, shards: u16) -> Vec<(u32, u8)> {
        let t = tpcc::Tables::of(app);
        let mut out = Vec::new();
        for w in 1..=self.scale.warehouses {
            for d in 1..=tpcc::schema::DISTRICTS {
                let key = tpcc::schema::district_key(w, d);
                // Both transactions are rooted on this key, in two tables of
                // the same partition count: one owner.
                let owner = Shard::owner(app, shards, t.district, &key);
                assert_eq!(owner, Shard::owner(app, shards, t.district_next_o_id, &key));
                if owner == shard {
                    out.push((w, d));
                }
            }
        }
        out
    }
}

/// Whether a request named an unused item (it must roll back).
#[derive(Clone, Copy)]
pub struct TpccTag {
    new_order: bool,
    rolls_back: bool,
}

#[derive(Debug, Default)]
pub struct TpccTally {
    pub new_orders: u64,
    pub payments: u64,
    pub rolled_back: u64,
    pub surprises: Surprises,
}

pub struct TpccSource {
    functions: tpcc::Functions,
    items: u32,
    lanes: Vec<(u32, u8)>,
    /// The generator of each warehouse this shard has a district of.
    generators: BTreeMap<u32, tpcc::Generator>,
    tally: TpccTally,
}

impl Source for TpccSource {
    type Tag = TpccTag;
    type Tally = TpccTally;

    fn lanes(&self) -> usize {
        self.lanes.len()
    }

    fn next(&mut self, lane: usize) -> (Request, TpccTag) {
        let (w, d) = self.lanes[lane];
        let generator = self.generators.get_mut(&w).expect("a generator per warehouse");
        let mut txn = generator.next_txn();
        let rolls_back = txn.names_unused_item(self.items);
        let new_order = match &mut txn {
            tpcc::Txn::NewOrder(o) => {
                o.d_id = d;
                true
            }
            tpcc::Txn::Payment(p) => {
                if p.c_w_id == p.w_id && p.c_d_id == p.d_id {
                    p.c_d_id = d;
                }
                p.d_id = d;
                false
            }
        };
        (txn.request(&self.functions), TpccTag { new_order, rolls_back })
    }

    fn record(&mut self, tag: TpccTag, outcome: &Outcome) {
        let t = &mut self.tally;
        match (outcome, tag.rolls_back) {
            (Outcome::Committed(_), false) if tag.new_order => t.new_orders += 1,
            (Outcome::Committed(_), false) => t.payments += 1,
            (Outcome::Aborted(a), true) if a.kind() == AbortKind::User && a.message() == tpcc::ITEM_NOT_VALID => {
                t.rolled_back += 1
            }
            (Outcome::Committed(_), true) => {
                t.surprises.count += 1;
                if t.surprises.first.len() < runner::FAILURES_KEPT_MAX {
                    t.surprises
                        .first
                        .push("a NewOrder naming an unused item committed".into());
                }
            }
            (Outcome::Aborted(_), _) => {
                let what = if tag.new_order { "NewOrder" } else { "Payment" };
                ok_or_failure(&mut t.surprises.first, &mut t.surprises.count, what, outcome);
            }
        }
    }

    fn finish(self) -> TpccTally {
        self.tally
    }
}

impl Workload for Tpcc {
    type Source = TpccSource;

    fn name(&self) -> &'static str {
        "tpcc"
    }

    fn parameters(&self) -> BTreeMap<String, serde_json::Value> {
        let mut p = BTreeMap::new();
        p.insert("warehouses".into(), self.scale.warehouses.into());
        p.insert(
            "customers_per_district".into(),
            self.scale.customers_per_district.into(),
        );
        p.insert("items".into(), self.scale.items.into());
        p.insert("new_order_percent".into(), self.mix.new_order.into());
        p.insert("partitions".into(), self.partitions.into());
        p.insert("api".into(), self.api.name().into());
        p
    }

    fn app(&self) -> Arc<App> {
        tpcc::app_with(self.partitions, self.api)
    }

    fn load(&self, app: &App, emit: &mut dyn FnMut(OpId, Key, Value)) {
        tpcc::load_each(app, &self.scale, self.load_seed, emit);
    }

    fn source(&self, app: &Arc<App>, shard: u16, shards: u16, seed: u64) -> TpccSource {
        let lanes = self.districts(app, shard, shards);
        let functions = tpcc::Functions::of(app);
        let mut generators = BTreeMap::new();
        for &(w, _) in &lanes {
            generators.entry(w).or_insert_with(|| {
                let mut g = tpcc::Generator::new(functions, self.scale, mix64(seed ^ mix64(u64::from(w)))).home(w);
                g.mix = self.mix;
                g
            });
        }
        TpccSource {
            functions,
            items: self.scale.items,
            lanes,
            generators,
            tally: TpccTally::default(),
        }
    }

    fn lanes_of(&self, app: &Arc<App>, shard: u16, shards: u16) -> usize {
        self.districts(app, shard, shards).len()
    }

    fn check(&self, app: &App, state: &State, tallies: Vec<TpccTally>) -> Vec<String> {
        let mut errors = tpcc::check(app, state);
        Surprises::report(tallies.into_iter().map(|t| t.surprises), &mut errors);
        errors
    }
}

// ---------------------------------------------------------------------------
// Movie review.

/// DeathStarBench's movie review write path.
#[derive(Clone, Debug)]
pub struct Movie {
    pub scale: movie::Scale,
    pub partitions: u32,
    /// How the application is written.
    pub api: Api,
}

pub struct MovieSource {
    app: Arc<App>,
    generator: movie::Generator,
    functions: movie::Functions,
    compose_review: OpId,
    ids: OwnedIds,
    surprises: Surprises,
}

impl Source for MovieSource {
    type Tag = ();
    type Tally = Surprises;

    fn lanes(&self) -> usize {
        1
    }

    fn next(&mut self, _lane: usize) -> (Request, ()) {
        let draw = self.generator.draw();
        let req_id = self.ids.take(&self.app, self.compose_review);
        (self.functions.compose_request(req_id, &draw.compose), ())
    }

    fn record(&mut self, (): (), outcome: &Outcome) {
        ok_or_failure(&mut self.surprises.first, &mut self.surprises.count, "compose", outcome);
    }

    fn finish(self) -> Surprises {
        self.surprises
    }
}

impl Workload for Movie {
    type Source = MovieSource;

    fn name(&self) -> &'static str {
        "movie"
    }

    fn parameters(&self) -> BTreeMap<String, serde_json::Value> {
        let mut p = BTreeMap::new();
        p.insert("users".into(), self.scale.users.into());
        p.insert("movies".into(), self.scale.movies.into());
        p.insert("partitions".into(), self.partitions.into());
        p.insert("api".into(), self.api.name().into());
        p
    }

    fn app(&self) -> Arc<App> {
        movie::app_with(self.partitions, self.api)
    }

    fn load(&self, app: &App, emit: &mut dyn FnMut(OpId, Key, Value)) {
        for (op, key, value) in movie::load(app, &self.scale, 1) {
            emit(op, key, value);
        }
    }

    fn source(&self, app: &Arc<App>, shard: u16, shards: u16, seed: u64) -> MovieSource {
        let functions = movie::Functions::of(app);
        MovieSource {
            app: app.clone(),
            generator: movie::Generator::new(functions, self.scale, seed, 0),
            functions,
            compose_review: movie::Services::of(app).compose_review,
            ids: OwnedIds::new(shard, shards),
            surprises: Surprises::default(),
        }
    }

    fn lanes_of(&self, _app: &Arc<App>, _shard: u16, _shards: u16) -> usize {
        1
    }

    fn check(&self, app: &App, state: &State, tallies: Vec<Surprises>) -> Vec<String> {
        let mut errors = movie::check(app, state);
        Surprises::report(tallies, &mut errors);
        errors
    }
}

// ---------------------------------------------------------------------------
// Travel reservation.

/// DeathStarBench's hotel reservation with flights.
#[derive(Clone, Debug)]
pub struct Travel {
    pub scale: travel::Scale,
    pub partitions: u32,
    /// Partitions of the geo and recommendation data: a search's fan-out.
    pub geo_partitions: u32,
    /// How the application is written.
    pub api: Api,
}

/// Which action a request was.
#[derive(Clone, Copy)]
pub struct TravelTag {
    reserve: bool,
}

pub struct TravelSource {
    app: Arc<App>,
    generator: travel::Generator,
    functions: travel::Functions,
    services: travel::Services,
    shard: u16,
    shards: u16,
    ids: OwnedIds,
    surprises: Surprises,
}

impl Source for TravelSource {
    type Tag = TravelTag;
    type Tally = Surprises;

    fn lanes(&self) -> usize {
        1
    }

    fn next(&mut self, _lane: usize) -> (Request, TravelTag) {
        loop {
            let mut draw = self.generator.draw();
            let reserve = match &mut draw.action {
                travel::Action::Search { .. } | travel::Action::Recommend { .. } => {
                    draw.req_id = self.ids.take(&self.app, self.services.frontend);
                    false
                }
                travel::Action::Reserve { order_id, .. } => {
                    *order_id = self.ids.take(&self.app, self.services.order);
                    draw.req_id = *order_id;
                    true
                }
                travel::Action::Login { .. } => false,
            };
            let request = draw.request(&self.functions);
            if root_owner(&self.app, self.shards, &request) == self.shard {
                return (request, TravelTag { reserve });
            }
        }
    }

    fn record(&mut self, tag: TravelTag, outcome: &Outcome) {
        if let Outcome::Aborted(a) = outcome
            && tag.reserve
            && a.kind() == AbortKind::User
            && (a.message() == travel::HOTEL_FULL || a.message() == travel::FLIGHT_FULL)
        {
            return;
        }
        let what = if tag.reserve {
            "reserve"
        } else {
            "search/recommend/login"
        };
        ok_or_failure(&mut self.surprises.first, &mut self.surprises.count, what, outcome);
    }

    fn finish(self) -> Surprises {
        self.surprises
    }
}

impl Workload for Travel {
    type Source = TravelSource;

    fn name(&self) -> &'static str {
        "travel"
    }

    fn parameters(&self) -> BTreeMap<String, serde_json::Value> {
        let mut p = BTreeMap::new();
        p.insert("hotels".into(), self.scale.hotels.into());
        p.insert("flights".into(), self.scale.flights.into());
        p.insert("users".into(), self.scale.users.into());
        p.insert("partitions".into(), self.partitions.into());
        p.insert("geo_partitions".into(), self.geo_partitions.into());
        p.insert("api".into(), self.api.name().into());
        p
    }

    fn app(&self) -> Arc<App> {
        travel::app_with(self.partitions, self.geo_partitions, self.api)
    }

    fn load(&self, app: &App, emit: &mut dyn FnMut(OpId, Key, Value)) {
        for (op, key, value) in travel::load(app, &self.scale, 1) {
            emit(op, key, value);
        }
    }

    fn source(&self, app: &Arc<App>, shard: u16, shards: u16, seed: u64) -> TravelSource {
        let functions = travel::Functions::of(app);
        TravelSource {
            app: app.clone(),
            generator: travel::Generator::new(functions, self.scale, seed, 0),
            functions,
            services: travel::Services::of(app),
            shard,
            shards,
            ids: OwnedIds::new(shard, shards),
            surprises: Surprises::default(),
        }
    }

    fn lanes_of(&self, _app: &Arc<App>, _shard: u16, _shards: u16) -> usize {
        1
    }

    fn check(&self, app: &App, state: &State, tallies: Vec<Surprises>) -> Vec<String> {
        let mut errors = travel::check(app, state);
        Surprises::report(tallies, &mut errors);
        errors
    }
}

// ---------------------------------------------------------------------------
// The YCSB-T interface of before.

/// Parameters of an in-process YCSB-T run.
#[derive(Clone, Debug)]
pub struct Params {
    pub shards: u16,
    /// Executor threads for the shards (`None`: one per shard; see
    /// `styx_runtime::Options::threads`).
    pub threads: Option<usize>,
    pub keys: u64,
    pub zipf: Option<f64>,
    pub warmup: Duration,
    pub duration: Duration,
    pub load: Load,
    pub epoch_txns_max: usize,
    pub epoch_gather_us: u64,
    /// Local messages a shard handles per step (see `Config::step_messages_max`).
    pub step_messages_max: usize,
    pub partitions: u32,
    pub api: Api,
    pub seed: u64,
    /// Measure the serial ceiling in the same run.
    pub serial: bool,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            shards: std::thread::available_parallelism().map_or(1, |n| n.get()) as u16,
            threads: None,
            keys: 10_000,
            zipf: None,
            warmup: Duration::from_secs(2),
            duration: Duration::from_secs(10),
            load: Load::Closed { in_flight: 20_000 },
            epoch_txns_max: styx_engine::EPOCH_TXNS_MAX_DEFAULT,
            epoch_gather_us: 0,
            step_messages_max: Config::default().step_messages_max,
            partitions: 64,
            api: Api::default(),
            seed: 1,
            serial: true,
        }
    }
}

/// Runs YCSB-T in-process and reports what it measured.
pub fn run(params: &Params) -> Result<Report, styx_runtime::Error> {
    let workload = Ycsbt {
        keys: params.keys,
        zipf: params.zipf,
        partitions: params.partitions,
        api: params.api,
        hot_shard: None,
        hot_roots: false,
    };
    let p = runner::Params {
        shards: params.shards,
        threads: params.threads,
        warmup: params.warmup,
        duration: params.duration,
        load: params.load,
        epoch_txns_max: params.epoch_txns_max,
        epoch_gather_us: params.epoch_gather_us,
        step_messages_max: params.step_messages_max,
        move_share_entities: styx_engine::Config::default().move_share_entities,
        move_share_min_entities: styx_engine::Config::default().move_share_min_entities,
        move_share_per_ms: styx_engine::Config::default().move_share_per_ms,
        seed: params.seed,
        serial: if params.serial {
            Duration::from_secs(2)
        } else {
            Duration::ZERO
        },
        progress: false,
        moves: None,
    };
    runner::run(Arc::new(workload), &p)
}

/// The YCSB-T serial ceiling (see [`runner::serial_tps`]).
pub fn serial_tps(keys: u64, zipf: Option<f64>, partitions: u32, time: Duration, seed: u64) -> f64 {
    let api = Api::default();
    runner::serial_tps(
        &Ycsbt {
            keys,
            zipf,
            partitions,
            api,
            hot_shard: None,
            hot_roots: false,
        },
        time,
        seed,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpcc_districts_split_over_shards_without_overlap() {
        let w = Tpcc {
            scale: tpcc::Scale::small(3),
            mix: tpcc::Mix::default(),
            partitions: 8,
            load_seed: 1,
            api: Api::Typed,
        };
        let app = w.app();
        let mut all: Vec<(u32, u8)> = (0..3).flat_map(|s| w.districts(&app, s, 3)).collect();
        all.sort();
        let want: Vec<(u32, u8)> = (1..=3).flat_map(|wh| (1..=10).map(move |d| (wh, d))).collect();
        assert_eq!(all, want);
        // A lane's requests are rooted on its own district, on its shard.
        let mut source = w.source(&app, 1, 3, 5);
        for lane in 0..source.lanes() {
            for _ in 0..20 {
                let (request, _) = source.next(lane);
                assert_eq!(root_owner(&app, 3, &request), 1);
                let Address::Entity(key) = &request.address else {
                    panic!()
                };
                assert_eq!(tpcc::schema::parse_district(key), Some(source.lanes[lane]));
            }
        }
    }

    #[test]
    fn request_ids_are_owned_and_disjoint_across_shards() {
        let app = movie::app(8);
        let op = movie::Services::of(&app).compose_review;
        let mut seen = std::collections::BTreeSet::new();
        for shard in 0..3 {
            let mut ids = OwnedIds::new(shard, 3);
            for _ in 0..100 {
                let id = ids.take(&app, op);
                assert_eq!(Shard::owner(&app, 3, op, &Key::from(id)), shard);
                assert!(seen.insert(id), "id {id} taken twice");
            }
        }
    }

    #[test]
    fn the_ycsbt_check_finds_a_lost_deposit() {
        let w = Ycsbt {
            keys: 4,
            zipf: None,
            partitions: 2,
            api: Api::Typed,
            hot_shard: None,
            hot_roots: false,
        };
        let app = w.app();
        let mut state = State::new();
        w.load(&app, &mut |op, k, v| {
            state.insert((op, k), v);
        });
        assert!(w.check(&app, &state, vec![vec![0; 4]]).is_empty());
        // A transfer 0 -> 1 committed, but only the debit is in the state.
        let account = app.op_id(ycsbt::OPERATOR).unwrap();
        let debited = Value::encode(&(START_BALANCE - 1), &mut Default::default()).unwrap();
        state.insert((account, Key::from(0u64)), debited);
        let errors = w.check(&app, &state, vec![vec![-1, 1, 0, 0]]);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("account 1") && errors[1].starts_with("total"));
    }
}
