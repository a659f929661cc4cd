//! The request generator: NewOrder and Payment about half each, with the
//! input distributions of TPC-C 2.4.1 and 2.5.1.
//!
//! A generator is a terminal of one home warehouse ([`Generator::home`]) or
//! of all of them. It draws from its own seeded [`Rng`], so a seed replays
//! the same requests. Customer ids and item ids follow NURand; last names
//! follow NURand over the names the load created.

use super::functions::{Functions, Line, NewOrder, Payment};
use super::load::Scale;
use super::random::*;
use super::schema::*;
use styx_engine::Request;
use styx_engine::rng::Rng;

/// The transaction mix, in percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mix {
    /// NewOrder; the rest is Payment.
    pub new_order: u32,
    /// NewOrders whose last line names an unused item (and roll back).
    pub invalid_item: u32,
    /// Order lines supplied by another warehouse.
    pub remote_line: u32,
    /// Payments for a customer of another warehouse.
    pub remote_payment: u32,
    /// Payments that select the customer by last name.
    pub by_name: u32,
}

impl Default for Mix {
    /// The mix of benchmarks.md (and TPC-C for these two transactions).
    fn default() -> Mix {
        Mix {
            new_order: 50,
            invalid_item: 1,
            remote_line: 1,
            remote_payment: 15,
            by_name: 60,
        }
    }
}

/// One generated transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Txn {
    NewOrder(NewOrder),
    Payment(Payment),
}

impl Txn {
    pub fn request(&self, functions: &Functions) -> Request {
        match self {
            Txn::NewOrder(t) => functions.new_order_request(t),
            Txn::Payment(t) => functions.payment_request(t),
        }
    }

    /// Whether this is a NewOrder naming an item beyond the `items` loaded:
    /// it must abort with [`super::ITEM_NOT_VALID`] and leave no trace.
    pub fn names_unused_item(&self, items: u32) -> bool {
        match self {
            Txn::NewOrder(t) => t.lines.iter().any(|l| l.i_id > items),
            Txn::Payment(_) => false,
        }
    }
}

/// Draws TPC-C requests.
pub struct Generator {
    functions: Functions,
    scale: Scale,
    pub mix: Mix,
    home: Option<u32>,
    rng: Rng,
}

impl Generator {
    pub fn new(functions: Functions, scale: Scale, seed: u64) -> Generator {
        Generator {
            functions,
            scale,
            mix: Mix::default(),
            home: None,
            rng: Rng::new(seed),
        }
    }

    /// Binds the generator to home warehouse `w`, as a TPC-C terminal.
    pub fn home(mut self, w: u32) -> Generator {
        assert!((1..=self.scale.warehouses).contains(&w), "no warehouse {w}");
        self.home = Some(w);
        self
    }

    pub fn functions(&self) -> &Functions {
        &self.functions
    }

    /// The next request; the entity it runs on is its `address`.
    // Not an `Iterator`: the stream never ends, so `Option` would only be noise.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Request {
        self.next_txn().request(&self.functions)
    }

    pub fn next_txn(&mut self) -> Txn {
        if self.percent(self.mix.new_order) {
            Txn::NewOrder(self.new_order())
        } else {
            Txn::Payment(self.payment())
        }
    }

    fn percent(&mut self, p: u32) -> bool {
        uniform(&mut self.rng, 1, 100) <= u64::from(p)
    }

    fn warehouse(&mut self) -> u32 {
        match self.home {
            Some(w) => w,
            None => uniform(&mut self.rng, 1, u64::from(self.scale.warehouses)) as u32,
        }
    }

    /// A warehouse other than `w`, or `w` if it is the only one.
    fn other_warehouse(&mut self, w: u32) -> u32 {
        if self.scale.warehouses == 1 {
            return w;
        }
        let o = uniform(&mut self.rng, 1, u64::from(self.scale.warehouses) - 1) as u32;
        if o >= w { o + 1 } else { o }
    }

    fn customer_id(&mut self) -> u32 {
        nurand(
            &mut self.rng,
            1023,
            C_ID,
            1,
            u64::from(self.scale.customers_per_district),
        ) as u32
    }

    fn district(&mut self) -> u8 {
        uniform(&mut self.rng, 1, u64::from(DISTRICTS)) as u8
    }

    pub fn new_order(&mut self) -> NewOrder {
        let w_id = self.warehouse();
        let d_id = self.district();
        let c_id = self.customer_id();
        let ol_cnt = uniform(&mut self.rng, ORDER_LINES_MIN as u64, ORDER_LINES_MAX as u64) as usize;
        let rollback = self.percent(self.mix.invalid_item);
        let items = u64::from(self.scale.items);
        let mut lines: Vec<Line> = Vec::with_capacity(ol_cnt);
        for n in 0..ol_cnt {
            let i_id = if rollback && n + 1 == ol_cnt {
                self.scale.items + 1
            } else {
                // Distinct items: lines run in parallel. Redraw on a repeat;
                // after a few tries (a tiny item range) take the next free id.
                let mut i = nurand(&mut self.rng, 8191, C_OL_I_ID, 1, items) as u32;
                let mut tries = 0;
                while lines.iter().any(|l| l.i_id == i) {
                    tries += 1;
                    i = if tries < 16 {
                        nurand(&mut self.rng, 8191, C_OL_I_ID, 1, items) as u32
                    } else {
                        i % self.scale.items + 1
                    };
                }
                i
            };
            let supply_w_id = if self.percent(self.mix.remote_line) {
                self.other_warehouse(w_id)
            } else {
                w_id
            };
            let quantity = uniform(&mut self.rng, 1, 10) as u8;
            lines.push(Line {
                i_id,
                supply_w_id,
                quantity,
            });
        }
        NewOrder {
            w_id,
            d_id,
            c_id,
            lines,
        }
    }

    pub fn payment(&mut self) -> Payment {
        let w_id = self.warehouse();
        let d_id = self.district();
        let (c_w_id, c_d_id) = if self.scale.warehouses > 1 && self.percent(self.mix.remote_payment) {
            let c_w_id = self.other_warehouse(w_id);
            (c_w_id, self.district())
        } else {
            (w_id, d_id)
        };
        let (c_id, c_last) = if self.percent(self.mix.by_name) {
            let names = last_names(self.scale.customers_per_district);
            (None, last_name(last_name_number(&mut self.rng, C_LAST_RUN, names)))
        } else {
            (Some(self.customer_id()), String::new())
        };
        Payment {
            w_id,
            d_id,
            c_w_id,
            c_d_id,
            c_id,
            c_last,
            amount: uniform(&mut self.rng, 100, 500_000) as Cents,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_matches_the_specification() {
        let app = crate::tpcc::app(4);
        let scale = Scale::small(4);
        let mut g = Generator::new(Functions::of(&app), scale, 1);
        let (mut new_orders, mut invalid, mut lines, mut remote_lines) = (0, 0, 0, 0);
        let (mut payments, mut by_name, mut remote_payments) = (0, 0, 0);
        for _ in 0..20_000 {
            match g.next_txn() {
                t @ Txn::NewOrder(_) => {
                    new_orders += 1;
                    invalid += usize::from(t.names_unused_item(scale.items));
                    let Txn::NewOrder(o) = t else { unreachable!() };
                    assert!((ORDER_LINES_MIN..=ORDER_LINES_MAX).contains(&o.lines.len()));
                    for (n, l) in o.lines.iter().enumerate() {
                        assert!(o.lines[..n].iter().all(|m| m.i_id != l.i_id), "distinct items");
                        lines += 1;
                        remote_lines += usize::from(l.supply_w_id != o.w_id);
                    }
                }
                Txn::Payment(p) => {
                    payments += 1;
                    by_name += usize::from(p.c_id.is_none());
                    remote_payments += usize::from(p.c_w_id != p.w_id);
                }
            }
        }
        let near = |x: usize, of: usize, pct: f64| (x as f64 / of as f64 - pct / 100.0).abs() < 0.01 + pct / 1000.0;
        assert!(near(new_orders, 20_000, 50.0), "{new_orders}");
        assert!(near(invalid, new_orders, 1.0), "{invalid}");
        assert!(near(remote_lines, lines, 1.0), "{remote_lines} of {lines}");
        assert!(near(by_name, payments, 60.0), "{by_name}");
        assert!(near(remote_payments, payments, 15.0), "{remote_payments}");
    }
}
