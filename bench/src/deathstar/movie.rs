//! Movie review: DeathStarBench's media service, write path.
//!
//! `compose_review.compose(username, title, rating, text)` runs on the
//! compose-review entity of its request id. It calls five services at once
//! — the unique-id service, the user service (username → user id), the
//! movie-id service (title → movie id), the text service and the rating
//! service — and, as each part returns, lands it in its own entity (the
//! compose-review record DeathStarBench keeps in memcached). With all five
//! parts in, it sends the review to review storage and appends its id to
//! the user's and the movie's review lists.
//!
//! | operator         | key        | state                          |
//! |------------------|------------|--------------------------------|
//! | `compose_review` | request id | [`ComposeReview`]: the parts   |
//! | `unique_id`      | request id | none                           |
//! | `user`           | username   | [`User`]                       |
//! | `movie_id`       | title      | `u64` movie id                 |
//! | `text`           | request id | none                           |
//! | `rating`         | request id | none                           |
//! | `review_storage` | review id  | [`Review`]                     |
//! | `user_review`    | user id    | `Vec<u64>` review ids          |
//! | `movie_review`   | movie id   | `Vec<u64>` review ids          |
//!
//! Design decisions:
//!
//! - In DeathStarBench the services push their parts into compose-review
//!   themselves. Here five branches of one transaction would then write the
//!   same entity concurrently, which the engine forbids; so the services
//!   return their parts and the compose function, which owns the entity,
//!   lands them. The record is the same, part by part.
//! - The unique id is the transaction id: unique, and the same when the
//!   transaction is re-executed or replayed. DeathStarBench's generator (a
//!   timestamp and a per-process counter) would need a counter entity that
//!   every review writes, serializing them all.
//! - The compose-review record is kept after composing, marking the request
//!   done: a repeated request id aborts instead of storing a second review,
//!   and the checker can match every review to the request that made it.
//! - A review list grows by one id per review (eight bytes); its length is
//!   bounded by [`REVIEWS_PER_LIST_MAX`].

mod closures;

pub use closures::install_closures;

use super::{State, Violations, password_hash};
use crate::Api;
use rkyv::{Archive, Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use styx_engine::rng::Rng;
use styx_engine::{
    self as styx, Abort, Address, App, Ctx, FnId, Key, OpId, Payload, Request, Scratch, Store, Value, mix64,
};

pub const COMPOSE_REVIEW: &str = "compose_review";
pub const UNIQUE_ID: &str = "unique_id";
pub const USER: &str = "user";
pub const MOVIE_ID: &str = "movie_id";
pub const TEXT: &str = "text";
pub const RATING: &str = "rating";
pub const REVIEW_STORAGE: &str = "review_storage";
pub const USER_REVIEW: &str = "user_review";
pub const MOVIE_REVIEW: &str = "movie_review";

/// Ratings are 0..=10 stars.
pub const RATING_MAX: u8 = 10;
/// Review texts are at most this long (DeathStarBench sends 256 characters).
pub const TEXT_LEN_MAX: usize = 4_096;
/// Reviews one user's or one movie's list holds at most.
pub const REVIEWS_PER_LIST_MAX: usize = 1 << 20;

#[styx::entity(name = "user", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub user_id: u64,
    pub first_name: String,
    pub last_name: String,
    pub salt: u64,
    pub password_hash: u64,
}

/// The parts of one review as they arrive.
#[styx::entity(name = "compose_review")]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ComposeReview {
    pub review_id: Option<u64>,
    pub user_id: Option<u64>,
    pub movie_id: Option<u64>,
    pub text: Option<String>,
    pub rating: Option<u8>,
}

/// A stored review: the state of `review_storage`, keyed by review id.
#[styx::entity(name = "review_storage", required)]
#[derive(Archive, Serialize, Deserialize, styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct Review {
    pub review_id: u64,
    pub req_id: u64,
    pub user_id: u64,
    pub movie_id: u64,
    pub text: String,
    pub rating: u8,
    pub timestamp_us: u64,
}

/// The unique-id service: no state (keyed by request id).
#[styx::entity(name = "unique_id")]
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UniqueId;

/// A title's movie id, stored as the bare `u64` (a struct of one number is).
#[styx::entity(name = "movie_id", required)]
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovieId {
    pub id: u64,
}

/// The text service: no state (keyed by request id).
#[styx::entity(name = "text")]
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Text;

/// The rating service: no state (keyed by request id).
#[styx::entity(name = "rating")]
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rating;

/// A user's review ids. Archives to the bytes of the bare `Vec<u64>`
/// (pinned by a test), which the checker reads.
#[styx::entity(name = "user_review")]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct UserReview {
    pub reviews: Vec<u64>,
}

/// A movie's review ids, stored like [`UserReview`].
#[styx::entity(name = "movie_review")]
#[derive(Archive, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct MovieReview {
    pub reviews: Vec<u64>,
}

impl ComposeReview {
    /// The review, once every part is in.
    fn complete(&self, req_id: u64, timestamp_us: u64) -> Option<Review> {
        Some(Review {
            review_id: self.review_id?,
            req_id,
            user_id: self.user_id?,
            movie_id: self.movie_id?,
            text: self.text.clone()?,
            rating: self.rating?,
            timestamp_us,
        })
    }
}

/// A `compose_review` request; it runs on `compose_review(req_id)`.
#[derive(styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct Compose {
    pub username: String,
    pub title: String,
    pub rating: u8,
    pub text: String,
}

/// The resolved ids of the application's functions.
#[derive(Clone, Copy, Debug)]
pub struct Functions {
    /// `compose_review.compose`: the transaction.
    pub compose: FnId,
    pub unique_id: FnId,
    pub user_id: FnId,
    pub movie_id: FnId,
    pub text: FnId,
    pub rating: FnId,
    pub store_review: FnId,
    pub user_review_append: FnId,
    pub movie_review_append: FnId,
}

impl Functions {
    pub fn of(app: &App) -> Functions {
        let f = |op, name| {
            app.resolve(op, name)
                .unwrap_or_else(|| panic!("{} has no function {op}.{name}", app.name()))
        };
        Functions {
            compose: f(COMPOSE_REVIEW, "compose"),
            unique_id: f(UNIQUE_ID, "next"),
            user_id: f(USER, "user_id"),
            movie_id: f(MOVIE_ID, "movie_id"),
            text: f(TEXT, "process"),
            rating: f(RATING, "process"),
            store_review: f(REVIEW_STORAGE, "store"),
            user_review_append: f(USER_REVIEW, "append"),
            movie_review_append: f(MOVIE_REVIEW, "append"),
        }
    }

    /// The request composing review `req_id`.
    pub fn compose_request(&self, req_id: u64, compose: &Compose) -> Request {
        Request {
            function: self.compose,
            address: Address::Entity(Key::from(req_id)),
            args: Payload::encode(compose),
            client: None,
        }
    }
}

/// The operator of every service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Services {
    pub compose_review: OpId,
    pub unique_id: OpId,
    pub user: OpId,
    pub movie_id: OpId,
    pub text: OpId,
    pub rating: OpId,
    pub review_storage: OpId,
    pub user_review: OpId,
    pub movie_review: OpId,
}

impl Services {
    pub fn of(app: &App) -> Services {
        let op = |name| {
            app.op_id(name)
                .unwrap_or_else(|| panic!("{} has no operator {name}", app.name()))
        };
        Services {
            compose_review: op(COMPOSE_REVIEW),
            unique_id: op(UNIQUE_ID),
            user: op(USER),
            movie_id: op(MOVIE_ID),
            text: op(TEXT),
            rating: op(RATING),
            review_storage: op(REVIEW_STORAGE),
            user_review: op(USER_REVIEW),
            movie_review: op(MOVIE_REVIEW),
        }
    }
}

/// The movie review application with every service over `partitions`.
pub fn app(partitions: u32) -> Arc<App> {
    app_with(partitions, Api::Typed)
}

/// The movie review application written with `api`.
pub fn app_with(partitions: u32, api: Api) -> Arc<App> {
    let mut app = App::new("movie");
    match api {
        Api::Typed => install(&mut app, partitions),
        Api::Closures => install_closures(&mut app, partitions),
    };
    Arc::new(app)
}

/// Appends `review_id` to the entity's list of review ids (the closure
/// version of [`UserReview::append`]).
async fn append(ctx: Ctx, review_id: u64) -> Result<(), Abort> {
    let mut list = ctx.get::<Vec<u64>>()?.unwrap_or_default();
    if list.len() >= REVIEWS_PER_LIST_MAX {
        return Err(Abort::new(format!(
            "review list {} holds {REVIEWS_PER_LIST_MAX} reviews",
            ctx.key()
        )));
    }
    list.push(review_id);
    ctx.put(&list)
}

/// Registers the services and their functions on `app`, each a typed
/// entity, declared in the order of [`install_closures`] (so both APIs
/// number the operators alike).
pub fn install(app: &mut App, partitions: u32) -> Functions {
    app.entity_with::<ComposeReview>(partitions);
    app.entity_with::<UniqueId>(partitions);
    app.entity_with::<User>(partitions);
    app.entity_with::<MovieId>(partitions);
    app.entity_with::<Text>(partitions);
    app.entity_with::<Rating>(partitions);
    app.entity_with::<Review>(partitions);
    app.entity_with::<UserReview>(partitions);
    app.entity_with::<MovieReview>(partitions);
    Functions::of(app)
}

#[styx::functions]
impl ComposeReview {
    /// The transaction. Takes no self: it treats an existing record as an
    /// abort (read in place) and lands each part as it arrives.
    pub async fn compose(ctx: &Ctx, c: Compose) -> Result<u64, Abort> {
        let req_id = ctx
            .key()
            .as_u64()
            .ok_or_else(|| Abort::new(format!("request id {} is not a u64", ctx.key())))?;
        if ctx.read::<ComposeReview, _>(|_| ())?.is_some() {
            return Err(Abort::new(format!("request {req_id} composed already")));
        }
        let id = ctx.entity::<UniqueId>(req_id).next();
        let user = ctx.entity::<User>(c.username.as_str()).user_id();
        let movie = ctx.entity::<MovieId>(c.title.as_str()).movie_id();
        let text = ctx.entity::<Text>(req_id).process(c.text);
        let rating = ctx.entity::<Rating>(req_id).process(c.rating);

        let mut parts = ComposeReview {
            review_id: Some(id.await?),
            ..ComposeReview::default()
        };
        ctx.put(&parts)?;
        let user = user
            .await?
            .ok_or_else(|| Abort::new(format!("no user {}", c.username)))?;
        parts.user_id = Some(user);
        ctx.put(&parts)?;
        let movie = movie
            .await?
            .ok_or_else(|| Abort::new(format!("no movie {}", c.title)))?;
        parts.movie_id = Some(movie);
        ctx.put(&parts)?;
        parts.text = Some(text.await?);
        ctx.put(&parts)?;
        parts.rating = Some(rating.await?);
        ctx.put(&parts)?;

        let review = parts
            .complete(req_id, ctx.now_us())
            .expect("every part of the review has landed");
        let (review_id, user_id, movie_id) = (review.review_id, review.user_id, review.movie_id);
        ctx.send_to::<Review>(review_id).store(review)?;
        ctx.send_to::<UserReview>(user_id).append(review_id)?;
        ctx.send_to::<MovieReview>(movie_id).append(review_id)?;
        Ok(review_id)
    }
}

#[styx::functions]
impl UniqueId {
    /// The transaction id: unique, and the same on re-execution.
    pub async fn next(ctx: &Ctx) -> Result<u64, Abort> {
        Ok(ctx.tid())
    }
}

#[styx::functions]
impl User {
    /// The user's id, read in place; none for an unknown user.
    pub async fn user_id(ctx: &Ctx) -> Result<Option<u64>, Abort> {
        ctx.read::<User, _>(|u| u.user_id.to_native())
    }
}

#[styx::functions]
impl MovieId {
    /// The movie's id; none for an unknown title.
    pub async fn movie_id(ctx: &Ctx) -> Result<Option<u64>, Abort> {
        Ok(<MovieId as styx::Entity>::load(ctx)?.map(|m| m.id))
    }
}

#[styx::functions]
impl Text {
    pub async fn process(_ctx: &Ctx, text: String) -> Result<String, Abort> {
        if text.len() > TEXT_LEN_MAX {
            return Err(Abort::new(format!("review text of {} bytes", text.len())));
        }
        Ok(text)
    }
}

#[styx::functions]
impl Rating {
    pub async fn process(_ctx: &Ctx, rating: u8) -> Result<u8, Abort> {
        if rating > RATING_MAX {
            return Err(Abort::new(format!("rating {rating} outside 0..={RATING_MAX}")));
        }
        Ok(rating)
    }
}

#[styx::functions]
impl Review {
    /// Stores the review; a review id stored already aborts.
    pub async fn store(ctx: &Ctx, review: Review) -> Result<(), Abort> {
        if ctx.read::<Review, _>(|_| ())?.is_some() {
            return Err(Abort::new(format!("review {} stored already", review.review_id)));
        }
        ctx.put(&review)
    }
}

/// Appends `review_id` to a review list, up to [`REVIEWS_PER_LIST_MAX`].
fn append_to(ctx: &Ctx, list: &mut Vec<u64>, review_id: u64) -> Result<(), Abort> {
    if list.len() >= REVIEWS_PER_LIST_MAX {
        return Err(Abort::new(format!(
            "review list {} holds {REVIEWS_PER_LIST_MAX} reviews",
            ctx.key()
        )));
    }
    list.push(review_id);
    Ok(())
}

#[styx::functions]
impl UserReview {
    pub async fn append(&mut self, ctx: &Ctx, review_id: u64) -> Result<(), Abort> {
        append_to(ctx, &mut self.reviews, review_id)
    }
}

#[styx::functions]
impl MovieReview {
    pub async fn append(&mut self, ctx: &Ctx, review_id: u64) -> Result<(), Abort> {
        append_to(ctx, &mut self.reviews, review_id)
    }
}

// ---------------------------------------------------------------------------
// Load.

/// How many users and movies to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub users: u64,
    pub movies: u64,
}

impl Default for Scale {
    /// DeathStarBench's media-service setup: 1 000 users, 1 000 movies.
    fn default() -> Scale {
        Scale {
            users: 1_000,
            movies: 1_000,
        }
    }
}

/// User `i`'s name (`i` in `0..users`).
pub fn username(i: u64) -> String {
    format!("username_{i}")
}

/// User `i`'s password.
pub fn password(i: u64) -> String {
    format!("password_{i}")
}

/// Movie `i`'s title.
pub fn title(i: u64) -> String {
    format!("movie_{i}")
}

/// The initial state: users (by username) and movie ids (by title).
pub fn load(app: &App, scale: &Scale, seed: u64) -> Vec<(OpId, Key, Value)> {
    let s = Services::of(app);
    let mut scratch = Scratch::default();
    let mut out = Vec::with_capacity((scale.users + scale.movies) as usize);
    for i in 0..scale.users {
        let salt = mix64(seed ^ mix64(i));
        let user = User {
            user_id: i,
            first_name: format!("first_name_{i}"),
            last_name: format!("last_name_{i}"),
            salt,
            password_hash: password_hash(salt, &password(i)),
        };
        out.push((s.user, Key::from(username(i)), archive(&user, &mut scratch)));
    }
    for i in 0..scale.movies {
        out.push((s.movie_id, Key::from(title(i)), archive(&i, &mut scratch)));
    }
    out
}

fn archive<T: Store>(v: &T, scratch: &mut Scratch) -> Value {
    Value::encode(v, scratch).expect("a loaded row archives")
}

// ---------------------------------------------------------------------------
// Requests.

/// One generated request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Draw {
    pub req_id: u64,
    pub compose: Compose,
    /// False when the request names an unknown user or movie or an
    /// impossible rating: it must abort and leave no trace.
    pub valid: bool,
}

/// Draws `compose_review` requests: user and movie uniform, rating
/// uniform in 0..=10, a random text of 256 characters (as DeathStarBench's
/// workload script).
pub struct Generator {
    functions: Functions,
    scale: Scale,
    next_req_id: u64,
    /// Percent of requests that are invalid.
    pub invalid_percent: u32,
    rng: Rng,
}

impl Generator {
    /// Request ids start at `first_req_id`; give generators that run side by
    /// side disjoint ranges.
    pub fn new(functions: Functions, scale: Scale, seed: u64, first_req_id: u64) -> Generator {
        Generator {
            functions,
            scale,
            next_req_id: first_req_id,
            invalid_percent: 0,
            rng: Rng::new(seed),
        }
    }

    /// The next request; the entity it runs on is its `address`.
    // Not an `Iterator`: the stream never ends, so `Option` would only be noise.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Request {
        let d = self.draw();
        self.functions.compose_request(d.req_id, &d.compose)
    }

    pub fn draw(&mut self) -> Draw {
        let req_id = self.next_req_id;
        self.next_req_id += 1;
        let mut user = self.rng.below(self.scale.users);
        let mut movie = self.rng.below(self.scale.movies);
        let mut rating = self.rng.below(u64::from(RATING_MAX) + 1) as u8;
        let text: String = (0..256).map(|_| char::from(b'a' + self.rng.below(26) as u8)).collect();
        let valid = self.rng.below(100) >= u64::from(self.invalid_percent);
        if !valid {
            match self.rng.below(3) {
                0 => user = self.scale.users + self.rng.below(10),
                1 => movie = self.scale.movies + self.rng.below(10),
                _ => rating = RATING_MAX + 1,
            }
        }
        Draw {
            req_id,
            compose: Compose {
                username: username(user),
                title: title(movie),
                rating,
                text,
            },
            valid,
        }
    }
}

// ---------------------------------------------------------------------------
// The checker.

/// Every composed review is complete, stored exactly once as composed, and
/// listed exactly once under its user and once under its movie; nothing is
/// stored or listed that no request composed.
pub fn check(app: &App, state: &State) -> Vec<String> {
    let s = Services::of(app);
    let mut v = Violations::default();
    let mut composes: BTreeMap<u64, ComposeReview> = BTreeMap::new();
    let mut reviews: BTreeMap<u64, Review> = BTreeMap::new();
    let mut user_lists: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut movie_lists: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for ((op, key), value) in state {
        let id = key.as_u64();
        let bad = |e: Abort| format!("{op:?} {key}: {e}");
        match id {
            Some(id) if *op == s.compose_review => match value.decode::<ComposeReview>() {
                Ok(c) => drop(composes.insert(id, c)),
                Err(e) => v.add(bad(e)),
            },
            Some(id) if *op == s.review_storage => match value.decode::<Review>() {
                Ok(r) if r.review_id == id => drop(reviews.insert(id, r)),
                Ok(r) => v.add(format!("review {} stored under id {id}", r.review_id)),
                Err(e) => v.add(bad(e)),
            },
            Some(id) if *op == s.user_review || *op == s.movie_review => match value.decode::<Vec<u64>>() {
                Ok(list) if *op == s.user_review => drop(user_lists.insert(id, list)),
                Ok(list) => drop(movie_lists.insert(id, list)),
                Err(e) => v.add(bad(e)),
            },
            None if *op == s.compose_review
                || *op == s.review_storage
                || *op == s.user_review
                || *op == s.movie_review =>
            {
                v.add(format!("{op:?}: malformed key {key}"))
            }
            _ => {}
        }
    }
    let count = |lists: &BTreeMap<u64, Vec<u64>>, owner: u64, review: u64| {
        lists
            .get(&owner)
            .map_or(0, |l| l.iter().filter(|r| **r == review).count())
    };
    let mut composed: BTreeMap<u64, u64> = BTreeMap::new();
    for (&req_id, c) in &composes {
        let Some(expected) = c.complete(req_id, 0) else {
            v.add(format!("request {req_id}: composed in part: {c:?}"));
            continue;
        };
        if let Some(other) = composed.insert(expected.review_id, req_id) {
            v.add(format!(
                "requests {other} and {req_id} got review id {}",
                expected.review_id
            ));
        }
        match reviews.get(&expected.review_id) {
            None => v.add(format!("request {req_id}: review {} not stored", expected.review_id)),
            Some(r)
                if Review {
                    timestamp_us: 0,
                    ..r.clone()
                } != expected =>
            {
                v.add(format!(
                    "request {req_id}: stored review {r:?} differs from its parts {c:?}"
                ))
            }
            Some(_) => {}
        }
        let in_user = count(&user_lists, expected.user_id, expected.review_id);
        let in_movie = count(&movie_lists, expected.movie_id, expected.review_id);
        if in_user != 1 || in_movie != 1 {
            v.add(format!(
                "review {}: listed {in_user} times under user {} and {in_movie} times under movie {}",
                expected.review_id, expected.user_id, expected.movie_id
            ));
        }
    }
    for (&id, r) in &reviews {
        if composed.get(&id) != Some(&r.req_id) {
            v.add(format!("review {id} stored but not composed by request {}", r.req_id));
        }
    }
    for (what, lists) in [("user", &user_lists), ("movie", &movie_lists)] {
        for (&owner, list) in lists {
            for id in list {
                let listed_right = reviews.get(id).is_some_and(|r| match what {
                    "user" => r.user_id == owner,
                    _ => r.movie_id == owner,
                });
                if !listed_right {
                    v.add(format!(
                        "{what} {owner} lists review {id}, which is not theirs or not stored"
                    ));
                }
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
    /// review list stores the bytes of the bare vector.
    #[test]
    fn entities_are_the_services_and_lists_archive_bare() {
        assert_eq!(
            [
                ComposeReview::NAME,
                UniqueId::NAME,
                User::NAME,
                MovieId::NAME,
                Text::NAME,
                Rating::NAME,
                Review::NAME,
                UserReview::NAME,
                MovieReview::NAME
            ],
            [
                COMPOSE_REVIEW,
                UNIQUE_ID,
                USER,
                MOVIE_ID,
                TEXT,
                RATING,
                REVIEW_STORAGE,
                USER_REVIEW,
                MOVIE_REVIEW
            ]
        );
        for reviews in [vec![], vec![1u64], (0..100).collect()] {
            let bare = archive(&reviews, &mut Scratch::default()).to_vec();
            let user = UserReview {
                reviews: reviews.clone(),
            };
            assert_eq!(bare, archive(&user, &mut Scratch::default()).to_vec());
            assert_eq!(
                bare,
                archive(&MovieReview { reviews }, &mut Scratch::default()).to_vec()
            );
        }
    }
}
