//! The movie review services as closures registered by name, calling each
//! other by pre-resolved [`FnId`](styx_engine::FnId): the API the typed
//! entities of [`super`] expand to, kept so that one run can measure both
//! (`styx bench movie --api closures`).

use super::*;

/// Registers the services and their functions on `app` as closures (the
/// API typed entities expand to), kept to measure one against the other:
/// the same operators, functions, arguments, results and state as
/// [`super::install`].
pub fn install_closures(app: &mut App, partitions: u32) -> Functions {
    let compose_review = app.operator(COMPOSE_REVIEW, partitions);
    let unique_id = app.operator(UNIQUE_ID, partitions);
    let user = app.operator(USER, partitions);
    let movie_id = app.operator(MOVIE_ID, partitions);
    let text = app.operator(TEXT, partitions);
    let rating = app.operator(RATING, partitions);
    let review_storage = app.operator(REVIEW_STORAGE, partitions);
    let user_review = app.operator(USER_REVIEW, partitions);
    let movie_review = app.operator(MOVIE_REVIEW, partitions);

    let unique_id = app.function(unique_id, "next", |ctx, (): ()| async move { Ok(ctx.tid()) });
    let user_id = app.function(user, "user_id", |ctx, (): ()| async move {
        ctx.read::<User, _>(|u| u.user_id.to_native())
    });
    let movie_id = app.function(movie_id, "movie_id", |ctx, (): ()| async move { ctx.get::<u64>() });
    let text = app.function(text, "process", |_ctx, text: String| async move {
        if text.len() > TEXT_LEN_MAX {
            return Err(Abort::new(format!("review text of {} bytes", text.len())));
        }
        Ok(text)
    });
    let rating = app.function(rating, "process", |_ctx, rating: u8| async move {
        if rating > RATING_MAX {
            return Err(Abort::new(format!("rating {rating} outside 0..={RATING_MAX}")));
        }
        Ok(rating)
    });
    let store_review = app.function(review_storage, "store", |ctx, review: Review| async move {
        if ctx.read::<Review, _>(|_| ())?.is_some() {
            return Err(Abort::new(format!("review {} stored already", review.review_id)));
        }
        ctx.put(&review)
    });
    let user_review_append = app.function(user_review, "append", append);
    let movie_review_append = app.function(movie_review, "append", append);

    let compose = app.function(compose_review, "compose", move |ctx, c: Compose| async move {
        let req_id = ctx
            .key()
            .as_u64()
            .ok_or_else(|| Abort::new(format!("request id {} is not a u64", ctx.key())))?;
        if ctx.read::<ComposeReview, _>(|_| ())?.is_some() {
            return Err(Abort::new(format!("request {req_id} composed already")));
        }
        let id = ctx.call_fn::<u64>(unique_id, req_id, ());
        let user = ctx.call_fn::<Option<u64>>(user_id, c.username.as_str(), ());
        let movie = ctx.call_fn::<Option<u64>>(movie_id, c.title.as_str(), ());
        let text = ctx.call_fn::<String>(text, req_id, c.text.as_str());
        let rating = ctx.call_fn::<u8>(rating, req_id, c.rating);

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
        ctx.send_fn(store_review, review.review_id, &review)?;
        ctx.send_fn(user_review_append, review.user_id, review.review_id)?;
        ctx.send_fn(movie_review_append, review.movie_id, review.review_id)?;
        Ok(review.review_id)
    });

    Functions {
        compose,
        unique_id,
        user_id,
        movie_id,
        text,
        rating,
        store_review,
        user_review_append,
        movie_review_append,
    }
}
