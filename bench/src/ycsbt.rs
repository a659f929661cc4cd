//! YCSB-T: bank transfers (benchmarks.md).
//!
//! `transfer(creditor, amount)` runs on the debtor: it reads its balance,
//! calls the creditor's `deposit(amount)`, subtracts the amount and aborts
//! with "insufficient credit" if the result is negative; otherwise it writes
//! it. Two functions, two reads, two writes, usually on two shards.

use crate::Api;
use rkyv::{Archive, Deserialize, Serialize};
use std::sync::Arc;
use styx_engine::rng::{Rng, Zipf};
use styx_engine::{self as styx, Abort, Address, App, Ctx, FnId, Key, Payload, Request, Value};

/// Every account's balance at the start.
pub const START_BALANCE: i64 = 1_000_000;
/// The operator's name and its functions.
pub const OPERATOR: &str = "account";

/// An account: its balance, stored as the bare `i64` (a struct of one
/// number is), so the closure version, the loader and the checks read the
/// same state.
#[styx::entity(name = "account")]
#[derive(Archive, Serialize, Deserialize, Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Account {
    pub balance: i64,
}

#[styx::functions]
impl Account {
    pub async fn deposit(&mut self, amount: i64) -> Result<(), Abort> {
        self.balance += amount;
        Ok(())
    }

    /// Credits `creditor`, then debits this account; aborts, undoing the
    /// credit, when the balance would go negative.
    pub async fn transfer(&mut self, ctx: &Ctx, creditor: u64, amount: i64) -> Result<(), Abort> {
        ctx.entity::<Account>(creditor).deposit(amount).await?;
        if self.balance < amount {
            return Err(Abort::new("insufficient credit"));
        }
        self.balance -= amount;
        Ok(())
    }

    pub async fn balance(&self) -> Result<i64, Abort> {
        Ok(self.balance)
    }
}

/// The YCSB-T application with `partitions` partitions of accounts.
pub fn app(partitions: u32) -> Arc<App> {
    app_with(partitions, Api::Typed)
}

/// The YCSB-T application written with `api`.
pub fn app_with(partitions: u32, api: Api) -> Arc<App> {
    let mut app = App::new("ycsbt");
    match api {
        Api::Typed => install(&mut app, partitions),
        Api::Closures => install_closures(&mut app, partitions),
    }
    Arc::new(app)
}

/// Registers the bank's operator and functions on `app`.
pub fn install(app: &mut App, partitions: u32) {
    app.entity_with::<Account>(partitions);
}

/// The same functions as closures registered by name: the API typed
/// entities expand to, kept to measure one against the other.
pub fn install_closures(app: &mut App, partitions: u32) {
    let account = app.operator(OPERATOR, partitions);
    let deposit = app.function(account, "deposit", |ctx, amount: i64| async move {
        let balance = ctx.get::<i64>()?.unwrap_or(0);
        ctx.put(&(balance + amount))?;
        Ok(())
    });
    app.function(
        account,
        "transfer",
        move |ctx, (creditor, amount): (u64, i64)| async move {
            let balance = ctx.get::<i64>()?.unwrap_or(0);
            ctx.call_fn::<()>(deposit, creditor, amount).await?;
            let balance = balance - amount;
            if balance < 0 {
                return Err(Abort::new("insufficient credit"));
            }
            ctx.put(&balance)?;
            Ok(())
        },
    );
    app.function(account, "balance", |ctx, (): ()| async move {
        Ok(ctx.get::<i64>()?.unwrap_or(0))
    });
}

/// The resolved ids of the workload's functions.
#[derive(Clone, Copy, Debug)]
pub struct Functions {
    pub transfer: FnId,
    pub deposit: FnId,
    pub balance: FnId,
}

impl Functions {
    pub fn of(app: &App) -> Functions {
        let f = |name| app.resolve(OPERATOR, name).expect("ycsbt function");
        Functions {
            transfer: f("transfer"),
            deposit: f("deposit"),
            balance: f("balance"),
        }
    }
}

pub fn transfer(functions: &Functions, debtor: u64, creditor: u64, amount: i64) -> Request {
    Request {
        function: functions.transfer,
        address: Address::Entity(Key::from(debtor)),
        args: Payload::encode(&(creditor, amount)),
        client: None,
    }
}

/// A start balance, archived.
pub fn start_value() -> Value {
    Value::encode(&START_BALANCE, &mut Default::default()).expect("archive i64")
}

/// Draws transfers: the debtor uniform among `debtors`, the creditor uniform
/// or Zipfian over all `keys`, never the debtor. A Zipfian draw is a rank:
/// rank `r` is account `r`, or `ranks[r]` with [`Workload::ranked`].
pub struct Workload {
    keys: u64,
    debtors: Vec<u64>,
    creditors: Option<Zipf>,
    ranks: Option<Vec<u32>>,
    rng: Rng,
}

impl Workload {
    pub fn new(keys: u64, debtors: Vec<u64>, zipf: Option<f64>, seed: u64) -> Workload {
        assert!(keys >= 2, "YCSB-T needs two accounts");
        assert!(!debtors.is_empty());
        Workload {
            keys,
            debtors,
            creditors: zipf.map(|theta| Zipf::new(keys, theta)),
            ranks: None,
            rng: Rng::new(seed),
        }
    }

    /// Zipfian rank `r` draws account `ranks[r]` (a permutation of the
    /// accounts): which accounts are hot, and so which partitions.
    pub fn ranked(mut self, ranks: Vec<u32>) -> Workload {
        assert_eq!(ranks.len() as u64, self.keys, "ranks of every account");
        self.ranks = Some(ranks);
        self
    }

    /// `(debtor, creditor)`.
    #[inline]
    pub fn transfer(&mut self) -> (u64, u64) {
        let debtor = self.debtors[self.rng.below(self.debtors.len() as u64) as usize];
        let creditor = loop {
            let c = match &self.creditors {
                Some(z) => {
                    let r = z.sample(&mut self.rng);
                    self.ranks.as_ref().map_or(r, |ranks| u64::from(ranks[r as usize]))
                }
                None => self.rng.below(self.keys),
            };
            if c != debtor {
                break c;
            }
        };
        (debtor, creditor)
    }
}
