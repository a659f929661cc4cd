//! TPC-C's NewOrder and Payment as closures registered by name, calling
//! each other by pre-resolved [`FnId`](styx_engine::FnId): leaves are registered first and
//! their ids captured by the functions that call them. This is the API the
//! typed entities of [`super`] expand to, kept so that one run can measure
//! both (`styx bench tpcc --api closures`); both register the same
//! operators in the same order, functions, argument and result encodings
//! and rows.

use super::{CustomerPayment, Functions, ITEM_NOT_VALID, NewOrder, NewOrderReply, Payment, PaymentReply, StockOrder};
use super::{bad_credit_data, check_key, history_data, insert, missing};
use crate::tpcc::schema::*;
use styx_engine::{Abort, App, Call};

/// Registers the tables and the functions of NewOrder and Payment as
/// closures (the API typed entities expand to), kept to measure one
/// against the other: the same operators, functions, arguments, results
/// and rows as [`super::install`].
pub fn install_closures(app: &mut App, partitions: u32) -> Functions {
    let t = Tables::declare(app, partitions);

    // -- Leaves: one row each.

    let warehouse_tax = app.function(t.warehouse, "tax", |ctx, (): ()| async move {
        ctx.read::<Warehouse, _>(|w| w.tax.to_native())?
            .ok_or_else(|| missing(WAREHOUSE, &ctx))
    });
    let warehouse_name = app.function(t.warehouse, "name", |ctx, (): ()| async move {
        ctx.read::<Warehouse, _>(|w| w.name.to_text())?
            .ok_or_else(|| missing(WAREHOUSE, &ctx))
    });
    let warehouse_ytd_add = app.function(
        t.warehouse_ytd,
        "add",
        |ctx, amount: Cents| async move { ctx.add(amount) },
    );
    let district_tax = app.function(t.district, "tax", |ctx, (): ()| async move {
        ctx.read::<District, _>(|d| d.tax.to_native())?
            .ok_or_else(|| missing(DISTRICT, &ctx))
    });
    // C_DISCOUNT, C_LAST, C_CREDIT.
    let customer_new_order = app.function(t.customer, "new_order", |ctx, (): ()| async move {
        ctx.read::<Customer, _>(|c| (c.discount.to_native(), c.last.to_text(), c.credit.to_text()))?
            .ok_or_else(|| missing(CUSTOMER, &ctx))
    });
    let customer_payment = app.function(t.customer, "payment", |ctx, p: CustomerPayment| async move {
        let (c_w_id, c_d_id, c_id) = parse_district_u32(ctx.key()).ok_or_else(|| missing(CUSTOMER, &ctx))?;
        let mut c = ctx.get::<Customer>()?.ok_or_else(|| missing(CUSTOMER, &ctx))?;
        c.balance -= p.amount;
        c.ytd_payment += p.amount;
        c.payment_cnt += 1;
        if c.credit.as_bytes() == b"BC" {
            c.data = bad_credit_data((c_w_id, c_d_id, c_id), &p, &c.data);
        }
        ctx.put(&c)?;
        Ok((c_id, c.balance))
    });
    let customer_by_name_payment = app.function(
        t.customer_by_name,
        "payment",
        move |ctx, p: CustomerPayment| async move {
            let (w, d, last) = parse_customer_name(ctx.key()).ok_or_else(|| missing(CUSTOMER_BY_NAME, &ctx))?;
            // The customers are sorted by C_FIRST: take position ceil(n / 2).
            let c_id = ctx
                .read::<Vec<u32>, _>(|ids| ids.get(ids.len().saturating_sub(1) / 2).map(|c| c.to_native()))?
                .flatten()
                .ok_or_else(|| Abort::new(format!("no customer named {last} in district {d} of warehouse {w}")))?;
            let key = customer_key(w, d, c_id);
            ctx.call_fn::<PaymentReply>(customer_payment, key, p).await
        },
    );
    let history_insert = app.function(t.history, "insert", |ctx, h: History| async move {
        insert(&ctx, HISTORY, &h)
    });
    // I_PRICE, I_NAME, and whether I_DATA says "ORIGINAL"; none if unused.
    let item_get = app.function(t.item, "get", |ctx, (): ()| async move {
        ctx.read::<Item, _>(|i| (i.price.to_native(), i.name.to_text(), i.data.contains(b"ORIGINAL")))
    });
    // Takes the ordered quantity; returns S_DIST_xx and whether S_DATA says
    // "ORIGINAL"; none if the warehouse stocks no such item.
    let stock_new_order = app.function(t.stock, "new_order", |ctx, o: StockOrder| async move {
        let Some(mut s) = ctx.get::<Stock>()? else {
            return Ok(None);
        };
        let quantity = i32::from(o.quantity);
        if s.quantity >= quantity + 10 {
            s.quantity -= quantity;
        } else {
            s.quantity = s.quantity - quantity + 91;
        }
        s.ytd += u32::from(o.quantity);
        s.order_cnt += 1;
        if o.remote {
            s.remote_cnt += 1;
        }
        let district = usize::from(o.d_id)
            .checked_sub(1)
            .filter(|d| *d < usize::from(DISTRICTS))
            .ok_or_else(|| Abort::new(format!("no district {}", o.d_id)))?;
        let dist_info = Text::<24>::new(&s.dist[district]);
        let original = s.data.contains(b"ORIGINAL");
        ctx.put(&s)?;
        Ok(Some((dist_info, original)))
    });
    let order_insert = app.function(
        t.order,
        "insert",
        |ctx, o: Order| async move { insert(&ctx, ORDER, &o) },
    );
    let order_line_insert = app.function(t.order_line, "insert", |ctx, lines: Vec<OrderLine>| async move {
        insert(&ctx, ORDER_LINE, &lines)
    });
    let new_order_insert = app.function(t.new_order, "insert", |ctx, o_id: u32| async move {
        insert(&ctx, NEW_ORDER, &o_id)
    });

    // -- The transactions.

    let new_order = app.function(t.district_next_o_id, "new_order", move |ctx, r: NewOrder| async move {
        check_key(&ctx, district_key(r.w_id, r.d_id))?;
        if !(ORDER_LINES_MIN..=ORDER_LINES_MAX).contains(&r.lines.len()) {
            return Err(Abort::new(format!(
                "{} order lines, expected {ORDER_LINES_MIN}..={ORDER_LINES_MAX}",
                r.lines.len()
            )));
        }
        // Lines run in parallel, so they must touch distinct items.
        for (n, line) in r.lines.iter().enumerate() {
            if r.lines[..n].iter().any(|l| l.i_id == line.i_id) {
                return Err(Abort::new(format!("item {} ordered twice", line.i_id)));
            }
        }
        let o_id = ctx.get::<u32>()?.ok_or_else(|| missing(DISTRICT, &ctx))?;
        ctx.put(&(o_id + 1))?;

        let w_tax = ctx.call_fn::<u32>(warehouse_tax, warehouse_key(r.w_id), ());
        let d_tax = ctx.call_fn::<u32>(district_tax, district_key(r.w_id, r.d_id), ());
        let customer =
            ctx.call_fn::<(u32, Text<16>, Text<2>)>(customer_new_order, customer_key(r.w_id, r.d_id, r.c_id), ());
        let items: Vec<Call<Option<(Cents, Text<24>, bool)>>> = r
            .lines
            .iter()
            .map(|l| ctx.call_fn(item_get, item_key(l.i_id), ()))
            .collect();
        let stocks: Vec<Call<Option<(Text<24>, bool)>>> = r
            .lines
            .iter()
            .map(|l| {
                let order = StockOrder {
                    d_id: r.d_id,
                    quantity: l.quantity,
                    remote: l.supply_w_id != r.w_id,
                };
                ctx.call_fn(stock_new_order, stock_key(l.supply_w_id, l.i_id), order)
            })
            .collect();

        let w_tax = i64::from(w_tax.await?);
        let d_tax = i64::from(d_tax.await?);
        let (discount, _last, _credit) = customer.await?;
        let mut lines = Vec::with_capacity(r.lines.len());
        let mut sum: Cents = 0;
        for (n, ((line, item), stock)) in r.lines.iter().zip(items).zip(stocks).enumerate() {
            let Some((price, _name, _item_original)) = item.await? else {
                return Err(Abort::new(ITEM_NOT_VALID));
            };
            let Some((dist_info, _stock_original)) = stock.await? else {
                return Err(Abort::new(format!(
                    "warehouse {} has no stock of item {}",
                    line.supply_w_id, line.i_id
                )));
            };
            let amount = price * Cents::from(line.quantity);
            sum += amount;
            lines.push(OrderLine {
                number: n as u8 + 1,
                i_id: line.i_id,
                supply_w_id: line.supply_w_id,
                delivery_d_us: None,
                quantity: line.quantity,
                amount,
                dist_info,
            });
        }
        let total = sum * (RATE_ONE - i64::from(discount)) * (RATE_ONE + w_tax + d_tax) / (RATE_ONE * RATE_ONE);

        let key = order_key(r.w_id, r.d_id, o_id);
        let order = Order {
            c_id: r.c_id,
            entry_d_us: ctx.now_us(),
            carrier_id: None,
            ol_cnt: lines.len() as u8,
            all_local: r.lines.iter().all(|l| l.supply_w_id == r.w_id),
        };
        ctx.send_fn(order_insert, &key, &order)?;
        ctx.send_fn(order_line_insert, &key, &lines)?;
        ctx.send_fn(new_order_insert, &key, o_id)?;
        Ok::<NewOrderReply, Abort>((o_id, total))
    });

    let payment = app.function(t.district, "payment", move |ctx, p: Payment| async move {
        check_key(&ctx, district_key(p.w_id, p.d_id))?;
        if p.amount <= 0 {
            return Err(Abort::new(format!("payment of {} cents", p.amount)));
        }
        let mut district = ctx.get::<District>()?.ok_or_else(|| missing(DISTRICT, &ctx))?;
        district.ytd += p.amount;
        ctx.put(&district)?;

        let w_name = ctx.call_fn::<Text<10>>(warehouse_name, warehouse_key(p.w_id), ());
        ctx.send_fn(warehouse_ytd_add, warehouse_key(p.w_id), p.amount)?;
        let pay = CustomerPayment {
            w_id: p.w_id,
            d_id: p.d_id,
            amount: p.amount,
        };
        let customer = match p.c_id {
            Some(c_id) => ctx.call_fn::<PaymentReply>(customer_payment, customer_key(p.c_w_id, p.c_d_id, c_id), pay),
            None => ctx.call_fn::<PaymentReply>(
                customer_by_name_payment,
                customer_name_key(p.c_w_id, p.c_d_id, &p.c_last),
                pay,
            ),
        };
        let w_name = w_name.await?;
        let (c_id, balance) = customer.await?;
        let history = History {
            c_id,
            c_d_id: p.c_d_id,
            c_w_id: p.c_w_id,
            d_id: p.d_id,
            w_id: p.w_id,
            date_us: ctx.now_us(),
            amount: p.amount,
            data: history_data(&w_name, &district.name),
        };
        ctx.send_fn(
            history_insert,
            history_key(p.w_id, p.d_id, HISTORY_PAYMENT, ctx.tid()),
            &history,
        )?;
        Ok::<PaymentReply, Abort>((c_id, balance))
    });

    Functions {
        new_order,
        payment,
        warehouse_tax,
        warehouse_name,
        warehouse_ytd_add,
        district_tax,
        customer_new_order,
        customer_payment,
        customer_by_name_payment,
        history_insert,
        item_get,
        stock_new_order,
        order_insert,
        order_line_insert,
        new_order_insert,
    }
}
