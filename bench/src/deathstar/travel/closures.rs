//! The travel services as closures registered by name, calling each other
//! by pre-resolved [`FnId`](styx_engine::FnId): the API the typed entities
//! of [`super`] expand to, kept so that one run can measure both (`styx
//! bench travel --api closures`).

use super::*;

/// Registers the services and their functions on `app` as closures (the
/// API typed entities expand to), kept to measure one against the other:
/// the same operators, functions, arguments, results and state as
/// [`super::install`].
pub fn install_closures(app: &mut App, partitions: u32, geo_partitions: u32) -> Functions {
    let frontend = app.operator(FRONTEND, partitions);
    let geo = app.operator(GEO, geo_partitions);
    let recommend = app.operator(RECOMMEND, geo_partitions);
    let rate = app.operator(RATE, partitions);
    let user = app.operator(USER, partitions);
    let hotel = app.operator(HOTEL, partitions);
    let flight = app.operator(FLIGHT, partitions);
    let order = app.operator(ORDER, partitions);

    install_scans(app, geo, recommend);
    let rate_get = app.function(rate, "get", |ctx, (): ()| async move {
        ctx.read::<RatePlan, _>(|r| (r.code.to_string(), r.bookable_rate.to_native()))
    });
    let login = app.function(user, "login", |ctx, password: String| async move {
        Ok(ctx
            .read::<User, _>(|u| password_hash(u.salt.to_native(), &password) == u.password_hash.to_native())?
            .unwrap_or(false))
    });
    let hotel_reserve = app.function(hotel, "reserve", |ctx, (): ()| take_one(ctx, HOTEL_FULL));
    let flight_reserve = app.function(flight, "reserve", |ctx, (): ()| take_one(ctx, FLIGHT_FULL));

    let search = app.function(frontend, "search", move |ctx, (lat, lon): (i32, i32)| async move {
        let calls: Vec<Call<Vec<(u64, u64)>>> = (0..ctx.partitions(GEO)?)
            .map(|p| ctx.call_partition(GEO, p, "nearby", (lat, lon, RESULTS_MAX)))
            .collect();
        let mut best = Vec::with_capacity(RESULTS_MAX as usize + 1);
        for call in calls {
            for candidate in call.await? {
                keep_best(&mut best, RESULTS_MAX as usize, candidate);
            }
        }
        let rates: Vec<Call<Option<(String, Cents)>>> =
            best.iter().map(|(_, h)| ctx.call_fn(rate_get, *h, ())).collect();
        let mut out: SearchReply = Vec::with_capacity(best.len());
        for ((_, hotel), rate) in best.iter().zip(rates) {
            if let Some((code, price)) = rate.await? {
                out.push((*hotel, code, price));
            }
        }
        Ok(out)
    });
    let recommend = app.function(
        frontend,
        "recommend",
        |ctx, (criterion, lat, lon): (u8, i32, i32)| async move {
            if criterion > Criterion::Price as u8 {
                return Err(Abort::new(format!("no criterion {criterion}")));
            }
            let calls: Vec<Call<Vec<(i64, u64)>>> = (0..ctx.partitions(RECOMMEND)?)
                .map(|p| ctx.call_partition(RECOMMEND, p, "best", (criterion, lat, lon, RESULTS_MAX)))
                .collect();
            let mut best = Vec::with_capacity(RESULTS_MAX as usize + 1);
            for call in calls {
                for candidate in call.await? {
                    keep_best(&mut best, RESULTS_MAX as usize, candidate);
                }
            }
            Ok(best.into_iter().map(|(_, h)| h).collect::<Vec<u64>>())
        },
    );
    let reserve = app.function(order, "reserve", move |ctx, r: Reserve| async move {
        if ctx.read::<Order, _>(|_| ())?.is_some() {
            return Err(Abort::new(format!("order {} exists already", ctx.key())));
        }
        let room = ctx.call_fn::<i64>(hotel_reserve, r.hotel, ());
        let seat = ctx.call_fn::<i64>(flight_reserve, r.flight, ());
        room.await?;
        seat.await?;
        ctx.put(&Order {
            user: r.user,
            hotel: r.hotel,
            flight: r.flight,
            at_us: ctx.now_us(),
        })
    });

    Functions {
        search,
        recommend,
        login,
        reserve,
        rate_get,
        hotel_reserve,
        flight_reserve,
    }
}
