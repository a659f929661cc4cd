//! NewOrder and Payment (TPC-C 2.4 and 2.5) as entity functions.
//!
//! NewOrder runs on the district's D_NEXT_O_ID entity: it takes the next
//! order id, then issues every read and update it needs at once — warehouse
//! tax, district tax, customer, and for each line the item and the stock —
//! and awaits them. All of these are distinct entities, as the engine
//! requires of concurrent branches; that is why an order may not name the
//! same item twice (the generator never does, as most TPC-C drivers). An
//! item that does not exist aborts the transaction with [`ITEM_NOT_VALID`],
//! which rolls back everything, the stock updates included. Last it sends
//! the ORDER, ORDER-LINE and NEW-ORDER inserts.
//!
//! Payment runs on the district: it adds to D_YTD, sends an add to W_YTD
//! (which commutes with other Payments' adds), and in parallel calls the
//! warehouse (W_NAME) and the customer — directly by id, or through the
//! last-name index entity, which picks the middle customer by first name
//! and calls it in turn (a sync chain, so the customer is one branch). Then
//! it sends the HISTORY insert.
//!
//! Each table is a typed entity (its row type, marked `#[entity]` in
//! [`super::schema`]) and these are its functions; a transaction calls the
//! rows it needs through typed proxies (`ctx.entity::<Warehouse>(w).tax()`)
//! and sends its inserts through typed senders. Functions that read a large
//! row in place (a tax, a price, a customer's discount) or answer for a
//! missing row (an unused item, an insert that must not overwrite) take no
//! self: they read and write through `ctx`, so they copy no more of a row
//! than the closure version ([`install_closures`]) does, which is kept to
//! measure one API against the other.

mod closures;

pub use closures::install_closures;

use super::schema::*;
use crate::Api;
use std::sync::Arc;
use styx_engine::{self as styx, Abort, Address, App, Call, Ctx, FnId, Key, Payload, Request};

/// The abort of a NewOrder naming an unused item (TPC-C 2.4.2.3).
pub const ITEM_NOT_VALID: &str = "Item number is not valid";

/// One order line of a NewOrder request.
#[derive(styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub i_id: u32,
    pub supply_w_id: u32,
    pub quantity: u8,
}

/// A NewOrder request; it runs on `district_next_o_id(w_id, d_id)`.
#[derive(styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct NewOrder {
    pub w_id: u32,
    pub d_id: u8,
    pub c_id: u32,
    pub lines: Vec<Line>,
}

/// A Payment request; it runs on `district(w_id, d_id)`. The customer is
/// `c_id` if given, else the middle one named `c_last`.
#[derive(styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct Payment {
    pub w_id: u32,
    pub d_id: u8,
    pub c_w_id: u32,
    pub c_d_id: u8,
    pub c_id: Option<u32>,
    pub c_last: String,
    pub amount: Cents,
}

/// What Payment asks of the customer it pays for.
#[derive(styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct CustomerPayment {
    pub w_id: u32,
    pub d_id: u8,
    pub amount: Cents,
}

/// What NewOrder asks of one stock entity.
#[derive(styx::Encode, styx::Decode, Clone, Debug, PartialEq, Eq)]
pub struct StockOrder {
    pub d_id: u8,
    pub quantity: u8,
    pub remote: bool,
}

/// NewOrder's reply: the order id and the total amount in cents.
pub type NewOrderReply = (u32, Cents);
/// Payment's reply: the customer id and the customer's new balance.
pub type PaymentReply = (u32, Cents);

/// The resolved ids of the workload's functions.
#[derive(Clone, Copy, Debug)]
pub struct Functions {
    /// `district_next_o_id.new_order`: the NewOrder transaction.
    pub new_order: FnId,
    /// `district.payment`: the Payment transaction.
    pub payment: FnId,
    pub warehouse_tax: FnId,
    pub warehouse_name: FnId,
    pub warehouse_ytd_add: FnId,
    pub district_tax: FnId,
    pub customer_new_order: FnId,
    pub customer_payment: FnId,
    pub customer_by_name_payment: FnId,
    pub history_insert: FnId,
    pub item_get: FnId,
    pub stock_new_order: FnId,
    pub order_insert: FnId,
    pub order_line_insert: FnId,
    pub new_order_insert: FnId,
}

impl Functions {
    /// The functions of an application built by [`install`] or
    /// [`install_closures`] (resolved by name: the ids differ).
    pub fn of(app: &App) -> Functions {
        let f = |op, name| {
            app.resolve(op, name)
                .unwrap_or_else(|| panic!("{} has no function {op}.{name}", app.name()))
        };
        Functions {
            new_order: f(DISTRICT_NEXT_O_ID, "new_order"),
            payment: f(DISTRICT, "payment"),
            warehouse_tax: f(WAREHOUSE, "tax"),
            warehouse_name: f(WAREHOUSE, "name"),
            warehouse_ytd_add: f(WAREHOUSE_YTD, "add"),
            district_tax: f(DISTRICT, "tax"),
            customer_new_order: f(CUSTOMER, "new_order"),
            customer_payment: f(CUSTOMER, "payment"),
            customer_by_name_payment: f(CUSTOMER_BY_NAME, "payment"),
            history_insert: f(HISTORY, "insert"),
            item_get: f(ITEM, "get"),
            stock_new_order: f(STOCK, "new_order"),
            order_insert: f(ORDER, "insert"),
            order_line_insert: f(ORDER_LINE, "insert"),
            new_order_insert: f(NEW_ORDER, "insert"),
        }
    }

    /// The request of a NewOrder transaction.
    pub fn new_order_request(&self, t: &NewOrder) -> Request {
        Request {
            function: self.new_order,
            address: Address::Entity(district_key(t.w_id, t.d_id)),
            args: Payload::encode(t),
            client: None,
        }
    }

    /// The request of a Payment transaction.
    pub fn payment_request(&self, t: &Payment) -> Request {
        Request {
            function: self.payment,
            address: Address::Entity(district_key(t.w_id, t.d_id)),
            args: Payload::encode(t),
            client: None,
        }
    }
}

/// The TPC-C application with every table over `partitions` partitions.
pub fn app(partitions: u32) -> Arc<App> {
    app_with(partitions, Api::Typed)
}

/// The TPC-C application written with `api`.
pub fn app_with(partitions: u32, api: Api) -> Arc<App> {
    let mut app = App::new("tpcc");
    match api {
        Api::Typed => install(&mut app, partitions),
        Api::Closures => install_closures(&mut app, partitions),
    };
    Arc::new(app)
}

fn missing(table: &str, ctx: &Ctx) -> Abort {
    Abort::new(format!("no {table} row with key {}", ctx.key()))
}

fn check_key(ctx: &Ctx, expected: Key) -> Result<(), Abort> {
    if *ctx.key() != expected {
        return Err(Abort::new(format!(
            "request for {expected} sent to entity {}",
            ctx.key()
        )));
    }
    Ok(())
}

/// C_DATA after a Payment by a customer with bad credit: the payment's
/// ids and amount prepended, cut to [`CUSTOMER_DATA_LEN_MAX`].
fn bad_credit_data(
    (c_w_id, c_d_id, c_id): (u32, u8, u32),
    p: &CustomerPayment,
    old: &Text<CUSTOMER_DATA_LEN_MAX>,
) -> Text<CUSTOMER_DATA_LEN_MAX> {
    let mut data = format!(
        "{c_id} {c_d_id} {c_w_id} {} {} {}.{:02} ",
        p.d_id,
        p.w_id,
        p.amount / 100,
        p.amount % 100
    )
    .into_bytes();
    data.extend_from_slice(old.as_bytes());
    Text::new(&data)
}

/// H_DATA: W_NAME, four spaces, D_NAME.
fn history_data(w_name: &Text<10>, d_name: &Text<10>) -> Text<24> {
    let mut data = Vec::with_capacity(24);
    data.extend_from_slice(w_name.as_bytes());
    data.extend_from_slice(b"    ");
    data.extend_from_slice(d_name.as_bytes());
    Text::new(&data)
}

/// Puts `v` on an entity that must not exist yet: inserts never overwrite,
/// so a key collision shows up as an abort instead of a lost row.
fn insert<T: styx_engine::Store + styx_engine::Load>(ctx: &Ctx, table: &str, v: &T) -> Result<(), Abort> {
    if ctx.read::<T, _>(|_| ())?.is_some() {
        return Err(Abort::new(format!("{table} row {} exists already", ctx.key())));
    }
    ctx.put(v)
}

/// Registers the tables and the functions of NewOrder and Payment: each
/// table a typed entity, declared in the order of [`Tables::declare`] (so
/// both APIs number the operators alike).
pub fn install(app: &mut App, partitions: u32) -> Functions {
    app.entity_with::<Warehouse>(partitions);
    app.entity_with::<District>(partitions);
    app.entity_with::<DistrictNextOId>(partitions);
    app.entity_with::<Customer>(partitions);
    app.entity_with::<CustomerByName>(partitions);
    app.entity_with::<History>(partitions);
    app.entity_with::<Item>(partitions);
    app.entity_with::<Stock>(partitions);
    app.entity_with::<Order>(partitions);
    app.entity_with::<OrderLines>(partitions);
    app.entity_with::<NewOrderRow>(partitions);
    app.entity_with::<WarehouseYtd>(partitions);
    Functions::of(app)
}

#[styx::functions]
impl Warehouse {
    /// W_TAX, read in place.
    pub async fn tax(ctx: &Ctx) -> Result<u32, Abort> {
        ctx.read::<Warehouse, _>(|w| w.tax.to_native())?
            .ok_or_else(|| missing(WAREHOUSE, ctx))
    }

    /// W_NAME, read in place.
    pub async fn name(ctx: &Ctx) -> Result<Text<10>, Abort> {
        ctx.read::<Warehouse, _>(|w| w.name.to_text())?
            .ok_or_else(|| missing(WAREHOUSE, ctx))
    }
}

#[styx::functions]
impl WarehouseYtd {
    /// Adds a payment to W_YTD without reading it: Payments of one
    /// warehouse commute.
    pub async fn add(ctx: &Ctx, amount: Cents) -> Result<(), Abort> {
        ctx.add(amount)
    }
}

#[styx::functions]
impl District {
    /// D_TAX, read in place.
    pub async fn tax(ctx: &Ctx) -> Result<u32, Abort> {
        ctx.read::<District, _>(|d| d.tax.to_native())?
            .ok_or_else(|| missing(DISTRICT, ctx))
    }

    /// The Payment transaction.
    pub async fn payment(&mut self, ctx: &Ctx, p: Payment) -> Result<PaymentReply, Abort> {
        check_key(ctx, district_key(p.w_id, p.d_id))?;
        if p.amount <= 0 {
            return Err(Abort::new(format!("payment of {} cents", p.amount)));
        }
        self.ytd += p.amount;

        let w_name = ctx.entity::<Warehouse>(warehouse_key(p.w_id)).name();
        ctx.send_to::<WarehouseYtd>(warehouse_key(p.w_id)).add(p.amount)?;
        let pay = CustomerPayment {
            w_id: p.w_id,
            d_id: p.d_id,
            amount: p.amount,
        };
        let customer = match p.c_id {
            Some(c_id) => ctx
                .entity::<Customer>(customer_key(p.c_w_id, p.c_d_id, c_id))
                .payment(pay),
            None => ctx
                .entity::<CustomerByName>(customer_name_key(p.c_w_id, p.c_d_id, &p.c_last))
                .payment(pay),
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
            data: history_data(&w_name, &self.name),
        };
        ctx.send_to::<History>(history_key(p.w_id, p.d_id, HISTORY_PAYMENT, ctx.tid()))
            .insert(history)?;
        Ok((c_id, balance))
    }
}

#[styx::functions]
impl DistrictNextOId {
    /// The NewOrder transaction.
    pub async fn new_order(&mut self, ctx: &Ctx, r: NewOrder) -> Result<NewOrderReply, Abort> {
        check_key(ctx, district_key(r.w_id, r.d_id))?;
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
        let o_id = self.next_o_id;
        self.next_o_id = o_id + 1;

        let w_tax = ctx.entity::<Warehouse>(warehouse_key(r.w_id)).tax();
        let d_tax = ctx.entity::<District>(district_key(r.w_id, r.d_id)).tax();
        let customer = ctx.entity::<Customer>(customer_key(r.w_id, r.d_id, r.c_id)).new_order();
        let items: Vec<Call<Option<(Cents, Text<24>, bool)>>> = r
            .lines
            .iter()
            .map(|l| ctx.entity::<Item>(item_key(l.i_id)).get())
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
                ctx.entity::<Stock>(stock_key(l.supply_w_id, l.i_id)).new_order(order)
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
        ctx.send_to::<Order>(key.clone()).insert(order)?;
        ctx.send_to::<OrderLines>(key.clone()).insert(lines)?;
        ctx.send_to::<NewOrderRow>(key).insert(o_id)?;
        Ok((o_id, total))
    }
}

#[styx::functions]
impl Customer {
    /// C_DISCOUNT, C_LAST, C_CREDIT, read in place.
    pub async fn new_order(ctx: &Ctx) -> Result<(u32, Text<16>, Text<2>), Abort> {
        ctx.read::<Customer, _>(|c| (c.discount.to_native(), c.last.to_text(), c.credit.to_text()))?
            .ok_or_else(|| missing(CUSTOMER, ctx))
    }

    /// Pays `p.amount`; returns C_ID and the new C_BALANCE.
    pub async fn payment(&mut self, ctx: &Ctx, p: CustomerPayment) -> Result<PaymentReply, Abort> {
        let (c_w_id, c_d_id, c_id) = parse_district_u32(ctx.key()).ok_or_else(|| missing(CUSTOMER, ctx))?;
        self.balance -= p.amount;
        self.ytd_payment += p.amount;
        self.payment_cnt += 1;
        if self.credit.as_bytes() == b"BC" {
            self.data = bad_credit_data((c_w_id, c_d_id, c_id), &p, &self.data);
        }
        Ok((c_id, self.balance))
    }
}

#[styx::functions]
impl CustomerByName {
    /// Pays for the middle customer of the name (by C_FIRST), read in place.
    pub async fn payment(ctx: &Ctx, p: CustomerPayment) -> Result<PaymentReply, Abort> {
        let (w, d, last) = parse_customer_name(ctx.key()).ok_or_else(|| missing(CUSTOMER_BY_NAME, ctx))?;
        // The customers are sorted by C_FIRST: take position ceil(n / 2).
        let c_id = ctx
            .read::<CustomerByName, _>(|c| c.ids.get(c.ids.len().saturating_sub(1) / 2).map(|c| c.to_native()))?
            .flatten()
            .ok_or_else(|| Abort::new(format!("no customer named {last} in district {d} of warehouse {w}")))?;
        ctx.entity::<Customer>(customer_key(w, d, c_id)).payment(p).await
    }
}

#[styx::functions]
impl History {
    pub async fn insert(ctx: &Ctx, h: History) -> Result<(), Abort> {
        insert(ctx, HISTORY, &h)
    }
}

#[styx::functions]
impl Item {
    /// I_PRICE, I_NAME, and whether I_DATA says "ORIGINAL", read in place;
    /// none if the item is unused.
    pub async fn get(ctx: &Ctx) -> Result<Option<(Cents, Text<24>, bool)>, Abort> {
        ctx.read::<Item, _>(|i| (i.price.to_native(), i.name.to_text(), i.data.contains(b"ORIGINAL")))
    }
}

#[styx::functions]
impl Stock {
    /// Takes the ordered quantity; returns S_DIST_xx and whether S_DATA
    /// says "ORIGINAL"; none if the warehouse stocks no such item.
    pub async fn new_order(ctx: &Ctx, o: StockOrder) -> Result<Option<(Text<24>, bool)>, Abort> {
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
    }
}

#[styx::functions]
impl Order {
    pub async fn insert(ctx: &Ctx, o: Order) -> Result<(), Abort> {
        insert(ctx, ORDER, &o)
    }
}

#[styx::functions]
impl OrderLines {
    /// Stores the lines as the bare vector, the bytes an `OrderLines`
    /// archives to.
    pub async fn insert(ctx: &Ctx, lines: Vec<OrderLine>) -> Result<(), Abort> {
        insert(ctx, ORDER_LINE, &lines)
    }
}

#[styx::functions]
impl NewOrderRow {
    pub async fn insert(ctx: &Ctx, o_id: u32) -> Result<(), Abort> {
        insert(ctx, NEW_ORDER, &o_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_credit_data_prepends_the_payment_and_keeps_500_bytes() {
        let p = CustomerPayment {
            w_id: 2,
            d_id: 3,
            amount: 12_345,
        };
        let old = Text::<CUSTOMER_DATA_LEN_MAX>::from("y".repeat(490));
        let data = bad_credit_data((1, 7, 42), &p, &old);
        let prefix = b"42 7 1 3 2 123.45 ";
        assert_eq!(data.as_bytes().len(), CUSTOMER_DATA_LEN_MAX);
        assert_eq!(&data.as_bytes()[..prefix.len()], prefix);
        assert!(data.as_bytes()[prefix.len()..].iter().all(|b| *b == b'y'));
        let short = bad_credit_data((1, 7, 42), &p, &Text::from("old"));
        assert_eq!(short.as_bytes(), b"42 7 1 3 2 123.45 old");
    }

    #[test]
    fn history_data_is_the_two_names_four_spaces_apart() {
        let data = history_data(&"WAREHOUSE1".into(), &"DISTRICT10".into());
        assert_eq!(data.as_bytes(), b"WAREHOUSE1    DISTRICT10");
    }
}
