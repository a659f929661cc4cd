//! The initial database (TPC-C 4.3.3.1), at full or reduced scale.
//!
//! [`Scale::spec`] is the real thing: 100 000 items, and per warehouse
//! 100 000 stock rows, ten districts of 3 000 customers, 3 000 orders (the
//! last 900 of them new) with 5..=15 lines each, and a HISTORY row per
//! customer. [`Scale::small`] keeps every rule but the counts, for tests.
//! The quantities that depend on the counts scale with them, so the
//! consistency conditions hold at load whatever the scale: D_YTD is 10.00
//! per customer (30 000.00 at full scale), W_YTD the sum of its districts',
//! and the last 30 % of each district's orders are undelivered.
//!
//! Every warehouse draws from its own generator seeded from the load seed,
//! so a warehouse's rows do not depend on how many warehouses are loaded.

use super::random::*;
use super::schema::*;
use styx_engine::rng::Rng;
use styx_engine::{App, Key, OpId, Scratch, Store, Value, mix64};

/// The time every loaded row carries (C_SINCE, O_ENTRY_D, H_DATE).
pub const LOAD_TIME_US: u64 = 1_700_000_000_000_000;
/// Initial C_BALANCE, C_YTD_PAYMENT and H_AMOUNT (4.3.3.1).
pub const LOADED_PAYMENT: Cents = 1_000;

/// How much to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub warehouses: u32,
    /// Customers per district, and orders per district (3 000 in TPC-C).
    pub customers_per_district: u32,
    /// Items, and stock rows per warehouse (100 000 in TPC-C).
    pub items: u32,
}

impl Scale {
    /// TPC-C's cardinalities.
    pub fn spec(warehouses: u32) -> Scale {
        Scale {
            warehouses,
            customers_per_district: 3_000,
            items: 100_000,
        }
    }

    /// A load small enough for a simulation test: 30 customers per district
    /// and 1 000 items.
    pub fn small(warehouses: u32) -> Scale {
        Scale {
            warehouses,
            customers_per_district: 30,
            items: 1_000,
        }
    }

    /// The first undelivered order of each district (2 101 in TPC-C): the
    /// last 30 % of the loaded orders have a NEW-ORDER row.
    pub fn first_new_order(&self) -> u32 {
        let n = self.customers_per_district;
        n - n * 3 / 10 + 1
    }

    /// Loaded entities, for sizing.
    pub fn entities(&self) -> usize {
        let n = self.customers_per_district as usize;
        let per_district = 2 + 2 * n + last_names(self.customers_per_district) as usize + 2 * n + n * 3 / 10;
        self.items as usize
            + self.warehouses as usize * (2 + self.items as usize + usize::from(DISTRICTS) * per_district)
    }

    fn validate(&self) {
        assert!(self.warehouses >= 1, "TPC-C needs a warehouse");
        // At least three NEW-ORDER rows per district, so the conditions on
        // their ids are defined at load.
        assert!(
            self.customers_per_district >= 10,
            "{} customers per district; at least 10",
            self.customers_per_district
        );
        // An order names 5..=15 distinct items.
        assert!(
            self.items >= ORDER_LINES_MAX as u32,
            "{} items; at least 15",
            self.items
        );
    }
}

/// The initial state as `(operator, key, value)` triples.
pub fn load(app: &App, scale: &Scale, seed: u64) -> Vec<(OpId, Key, Value)> {
    let mut out = Vec::with_capacity(scale.entities());
    load_each(app, scale, seed, |op, key, value| out.push((op, key, value)));
    out
}

/// Calls `emit` with every entity of the initial state, without holding
/// them all (a 100-warehouse load is ten gigabytes).
pub fn load_each(app: &App, scale: &Scale, seed: u64, mut emit: impl FnMut(OpId, Key, Value)) {
    scale.validate();
    let t = Tables::of(app);
    let mut out = Emitter {
        scratch: Scratch::default(),
        emit: &mut emit,
    };

    let mut rng = Rng::new(mix64(seed));
    for i in 1..=scale.items {
        let item = Item {
            im_id: uniform(&mut rng, 1, 10_000) as u32,
            name: a_string(&mut rng, 14, 24).into(),
            price: uniform(&mut rng, 100, 10_000) as Cents,
            data: data_with_original(&mut rng).into(),
        };
        out.put(t.item, item_key(i), &item);
    }

    let n = scale.customers_per_district;
    let district_ytd = Cents::from(n) * LOADED_PAYMENT;
    for w in 1..=scale.warehouses {
        let mut rng = Rng::new(mix64(seed ^ mix64(u64::from(w))));
        let warehouse = Warehouse {
            name: a_string(&mut rng, 6, 10).into(),
            street_1: a_string(&mut rng, 10, 20).into(),
            street_2: a_string(&mut rng, 10, 20).into(),
            city: a_string(&mut rng, 10, 20).into(),
            state: a_string(&mut rng, 2, 2).into(),
            zip: zip(&mut rng).into(),
            tax: uniform(&mut rng, 0, 2_000) as u32,
        };
        out.put(t.warehouse, warehouse_key(w), &warehouse);
        let ytd = WarehouseYtd {
            ytd: district_ytd * Cents::from(DISTRICTS),
        };
        out.put(t.warehouse_ytd, warehouse_key(w), &ytd);

        for i in 1..=scale.items {
            let stock = Stock {
                quantity: uniform(&mut rng, 10, 100) as i32,
                dist: std::array::from_fn(|_| {
                    a_string(&mut rng, 24, 24)
                        .into_bytes()
                        .try_into()
                        .expect("24 characters of ASCII")
                }),
                ytd: 0,
                order_cnt: 0,
                remote_cnt: 0,
                data: data_with_original(&mut rng).into(),
            };
            out.put(t.stock, stock_key(w, i), &stock);
        }

        for d in 1..=DISTRICTS {
            load_district(&t, scale, w, d, &mut rng, &mut out);
        }
    }
}

fn load_district(t: &Tables, scale: &Scale, w: u32, d: u8, rng: &mut Rng, out: &mut Emitter<'_>) {
    let n = scale.customers_per_district;
    let district = District {
        name: a_string(rng, 6, 10).into(),
        street_1: a_string(rng, 10, 20).into(),
        street_2: a_string(rng, 10, 20).into(),
        city: a_string(rng, 10, 20).into(),
        state: a_string(rng, 2, 2).into(),
        zip: zip(rng).into(),
        tax: uniform(rng, 0, 2_000) as u32,
        ytd: Cents::from(n) * LOADED_PAYMENT,
    };
    out.put(t.district, district_key(w, d), &district);
    out.put(t.district_next_o_id, district_key(w, d), &(n + 1));

    let names = last_names(n);
    let mut by_name: std::collections::BTreeMap<String, Vec<(String, u32)>> = Default::default();
    for c in 1..=n {
        let number = if u64::from(c) <= names {
            u64::from(c) - 1
        } else {
            last_name_number(rng, C_LAST_LOAD, names)
        };
        let customer = Customer {
            first: a_string(rng, 8, 16).into(),
            middle: "OE".into(),
            last: last_name(number).into(),
            street_1: a_string(rng, 10, 20).into(),
            street_2: a_string(rng, 10, 20).into(),
            city: a_string(rng, 10, 20).into(),
            state: a_string(rng, 2, 2).into(),
            zip: zip(rng).into(),
            phone: n_string(rng, 16, 16).into(),
            since_us: LOAD_TIME_US,
            credit: if rng.below(10) == 0 { "BC" } else { "GC" }.into(),
            credit_lim: 5_000_000,
            discount: uniform(rng, 0, 5_000) as u32,
            balance: -LOADED_PAYMENT,
            ytd_payment: LOADED_PAYMENT,
            payment_cnt: 1,
            delivery_cnt: 0,
            data: a_string(rng, 300, 500).into(),
        };
        by_name
            .entry(customer.last.to_string())
            .or_default()
            .push((customer.first.to_string(), c));
        out.put(t.customer, customer_key(w, d, c), &customer);
        let history = History {
            c_id: c,
            c_d_id: d,
            c_w_id: w,
            d_id: d,
            w_id: w,
            date_us: LOAD_TIME_US,
            amount: LOADED_PAYMENT,
            data: a_string(rng, 12, 24).into(),
        };
        let key = history_key(w, d, HISTORY_LOADED, u64::from(c));
        out.put(t.history, key, &history);
    }
    for (last, mut customers) in by_name {
        customers.sort();
        let ids: Vec<u32> = customers.into_iter().map(|(_, c)| c).collect();
        out.put(t.customer_by_name, customer_name_key(w, d, &last), &ids);
    }

    // O_C_ID is a random permutation of the customers.
    let mut customers: Vec<u32> = (1..=n).collect();
    for i in (1..customers.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        customers.swap(i, j);
    }
    let first_new = scale.first_new_order();
    for o in 1..=n {
        let delivered = o < first_new;
        let ol_cnt = uniform(rng, ORDER_LINES_MIN as u64, ORDER_LINES_MAX as u64) as u8;
        let order = Order {
            c_id: customers[o as usize - 1],
            entry_d_us: LOAD_TIME_US,
            carrier_id: delivered.then(|| uniform(rng, 1, 10) as u8),
            ol_cnt,
            all_local: true,
        };
        let lines: Vec<OrderLine> = (1..=ol_cnt)
            .map(|number| OrderLine {
                number,
                i_id: uniform(rng, 1, u64::from(scale.items)) as u32,
                supply_w_id: w,
                delivery_d_us: delivered.then_some(LOAD_TIME_US),
                quantity: 5,
                amount: if delivered {
                    0
                } else {
                    uniform(rng, 1, 999_999) as Cents
                },
                dist_info: a_string(rng, 24, 24).into(),
            })
            .collect();
        out.put(t.order, order_key(w, d, o), &order);
        out.put(t.order_line, order_key(w, d, o), &lines);
        if !delivered {
            out.put(t.new_order, order_key(w, d, o), &o);
        }
    }
}

/// Archives rows and hands them on, reusing one scratch buffer.
struct Emitter<'a> {
    scratch: Scratch,
    emit: &'a mut dyn FnMut(OpId, Key, Value),
}

impl Emitter<'_> {
    fn put<T: Store>(&mut self, op: OpId, key: Key, v: &T) {
        let value = Value::encode(v, &mut self.scratch).expect("a loaded row archives");
        (self.emit)(op, key, value);
    }
}
