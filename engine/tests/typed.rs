//! Typed entities (`#[entity]`, `#[functions]`, typed proxies) run through
//! the engine like closures: a typed call across entities commits and
//! aborts with its transaction, a randomized typed bank equals serial
//! execution, and the schema lists what the application serves.

mod common;

use common::*;
use rkyv::{Archive, Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use styx_engine::rng::Rng;
use styx_engine::sim::{Sim, test_config};
use styx_engine::{
    self as styx, Abort, AbortKind, App, Ctx, Decode, Field, Key, OpId, Outcome, Payload, TypeDef, TypedRequest, Value,
    Variant, WireType,
};

/// A transfer, as one struct argument.
#[derive(styx::Encode, styx::Decode, Clone, Debug, PartialEq)]
struct Entry {
    from: u64,
    to: u64,
    amount: i64,
}

/// What a transfer did, as an enum result.
#[derive(styx::Encode, styx::Decode, Clone, Debug, PartialEq)]
enum Verdict {
    Moved { balance: i64 },
    Nothing,
}

#[styx::entity(name = "account", partitions = 8)]
#[derive(Archive, Serialize, Deserialize, Default, Debug)]
struct Account {
    balance: i64,
    transfers: u32,
}

/// Ledgers hold the transfers of the accounts they are keyed by (`from % 4`).
const LEDGERS: u64 = 4;

#[styx::functions]
impl Account {
    /// Adds `amount`; returns the new balance.
    async fn deposit(&mut self, amount: i64) -> Result<i64, Abort> {
        self.balance += amount;
        Ok(self.balance)
    }

    async fn balance(&self) -> Result<i64, Abort> {
        Ok(self.balance)
    }

    /// Credits `entry.to` and records the entry in a ledger, then debits
    /// this account: when it is short, the abort undoes the credit and the
    /// ledger entry too.
    async fn transfer(&mut self, ctx: &Ctx, entry: Entry) -> Result<Verdict, Abort> {
        if entry.amount == 0 {
            return Ok(Verdict::Nothing);
        }
        ctx.entity::<Account>(entry.to).deposit(entry.amount).await?;
        ctx.entity::<Ledger>(entry.from % LEDGERS).record(entry.clone()).await?;
        if self.balance < entry.amount {
            return Err(Abort::new("insufficient credit"));
        }
        self.balance -= entry.amount;
        self.transfers += 1;
        Ok(Verdict::Moved { balance: self.balance })
    }
}

#[styx::entity(partitions = 4)]
#[derive(Archive, Serialize, Deserialize, Default)]
struct Ledger {
    entries: Vec<(u64, u64, i64)>,
}

#[styx::functions]
impl Ledger {
    async fn record(&mut self, entry: Entry) -> Result<u32, Abort> {
        self.entries.push((entry.from, entry.to, entry.amount));
        Ok(self.entries.len() as u32)
    }

    async fn entries(&self) -> Result<Vec<Entry>, Abort> {
        Ok(self
            .entries
            .iter()
            .map(|&(from, to, amount)| Entry { from, to, amount })
            .collect())
    }
}

fn app() -> Arc<App> {
    let mut app = App::new("typed-bank");
    let account = app.entity::<Account>();
    app.entity::<Ledger>();
    // The closure API still works on a typed operator.
    app.function(account, "audit", |ctx, (): ()| async move {
        Ok(ctx.get::<Account>()?.map_or(0, |a| a.transfers))
    });
    Arc::new(app)
}

/// Runs `request` alone to completion and returns its outcome, decoded.
fn run<R: Decode>(sim: &mut Sim, app: &App, token: u64, request: TypedRequest<R>) -> Result<R, Abort> {
    let shard = (token % u64::from(sim.n_shards())) as u16;
    sim.submit(shard, token, request.request(app).expect("registered"))
        .unwrap();
    sim.run();
    let replies = sim.take_replies();
    assert_eq!(replies.len(), 1, "{replies:?}");
    match &replies[0].outcome {
        Outcome::Committed(p) => Ok(request.decode(p).expect("result type")),
        Outcome::Aborted(a) => Err(a.clone()),
    }
}

#[test]
fn a_typed_call_across_entities_commits_and_aborts_with_its_transaction() {
    for seed in seeds(0..4) {
        let app = app();
        let mut sim = Sim::new(app.clone(), test_config(100), 2, seed);
        assert_eq!(run(&mut sim, &app, 1, AccountRequest::new(1u64).deposit(10)), Ok(10));
        assert_eq!(run(&mut sim, &app, 2, AccountRequest::new(2u64).deposit(10)), Ok(10));
        let entry = |amount| Entry { from: 1, to: 2, amount };
        assert_eq!(
            run(&mut sim, &app, 3, AccountRequest::new(1u64).transfer(entry(7))),
            Ok(Verdict::Moved { balance: 3 })
        );
        // Short now: the credit of account 2 and the ledger entry, both
        // already made when the debtor aborts, are rolled back.
        let abort = run(&mut sim, &app, 4, AccountRequest::new(1u64).transfer(entry(7))).unwrap_err();
        assert_eq!(abort.kind(), AbortKind::User);
        assert_eq!(abort.message(), "insufficient credit");
        assert_eq!(
            run(&mut sim, &app, 5, AccountRequest::new(1u64).transfer(entry(0))),
            Ok(Verdict::Nothing)
        );
        assert_eq!(run(&mut sim, &app, 6, AccountRequest::new(1u64).balance()), Ok(3));
        assert_eq!(run(&mut sim, &app, 7, AccountRequest::new(2u64).balance()), Ok(17));
        assert_eq!(
            run(&mut sim, &app, 8, LedgerRequest::new(1u64).entries()),
            Ok(vec![entry(7)])
        );
        // The closure registered beside the typed functions sees the same state.
        let audit = TypedRequest::<u32>::new("account", "audit", Key::from(1u64), &());
        assert_eq!(run(&mut sim, &app, 9, audit), Ok(1));
        // Reads (`&self`) write nothing: an entity never written has no state.
        assert_eq!(run(&mut sim, &app, 10, AccountRequest::new(99u64).balance()), Ok(0));
        assert!(!sim.state().contains_key(&(OpId(0), Key::from(99u64))));
    }
}

fn decode_account(v: &Value) -> Account {
    v.decode::<Account>().expect("an Account")
}

#[test]
fn a_typed_bank_under_contention_equals_serial_execution() {
    swarm(seeds(0..6), |seed| {
        let app = app();
        let shards = 1 + (seed % 3) as u16;
        let mut config = test_config(200);
        config.epoch_gather_us = 200;
        let limits = config.limits;
        let mut sim = Sim::new(app.clone(), config, shards, seed);
        let mut rng = Rng::new(seed);
        let accounts = 20u64;
        let start = 5i64;
        let account_op = app.op_id("account").unwrap();
        let initial: Vec<(OpId, Key, Value)> = (0..accounts)
            .map(|k| {
                let state = Account {
                    balance: start,
                    transfers: 0,
                };
                (
                    account_op,
                    Key::from(k),
                    Value::encode(&state, &mut Default::default()).unwrap(),
                )
            })
            .collect();
        for (op, k, v) in &initial {
            sim.load(*op, k, Some(v.clone()));
        }
        let mut sent = HashMap::new();
        for token in 0..600u64 {
            let from = rng.below(accounts);
            let to = (from + 1 + rng.below(accounts - 1)) % accounts;
            let amount = 1 + rng.below(4) as i64;
            let request = AccountRequest::new(from).transfer(Entry { from, to, amount });
            sim.submit(
                rng.below(u64::from(shards)) as u16,
                token,
                request.request(&app).unwrap(),
            )
            .unwrap();
            sent.insert(token, (from, to, amount));
            for _ in 0..rng.below(20) {
                sim.step();
            }
        }
        sim.run();
        let replies = sim.take_replies();
        assert_eq!(replies.len(), sent.len(), "every request is answered once");
        let mut expected: HashMap<u64, i64> = (0..accounts).map(|k| (k, start)).collect();
        let mut committed = 0;
        for r in &replies {
            let (from, to, amount) = sent[&r.token];
            match &r.outcome {
                Outcome::Committed(p) => {
                    assert!(matches!(p.decode::<Verdict>().unwrap(), Verdict::Moved { .. }));
                    *expected.get_mut(&from).unwrap() -= amount;
                    *expected.get_mut(&to).unwrap() += amount;
                    committed += 1;
                }
                Outcome::Aborted(a) => assert_eq!(a.message(), "insufficient credit", "{a:?}"),
            }
        }
        assert!(committed > 0);
        let state = sim.state();
        let mut ledger_entries = 0;
        for ((op, key), value) in &state {
            if *op == account_op {
                let k = key.as_u64().unwrap();
                assert_eq!(decode_account(value).balance, expected[&k], "account {k}");
            } else {
                ledger_entries += value.decode::<Ledger>().expect("a Ledger").entries.len();
            }
        }
        assert_eq!(ledger_entries, committed, "one ledger entry per committed transfer");
        let history = sim.take_history();
        check_run(&app, limits, &initial, &sim.logs(), &history, &replies, &state);
    });
}

#[test]
fn the_schema_lists_operators_functions_and_types() {
    let schema = app().schema();
    let text = schema.to_string();
    let expected = "\
app typed-bank
operator account: 8 partitions, state Account
  __get() -> Option<Vec<u8>>
  partition __scan(Option<Vec<u8>>, u32) -> (Vec<(Vec<u8>, Vec<u8>)>, bool)
  deposit(amount: i64) -> i64
  balance() -> i64
  transfer(entry: Entry) -> Verdict
  audit() -> u32
operator ledger: 4 partitions, state Ledger
  __get() -> Option<Vec<u8>>
  partition __scan(Option<Vec<u8>>, u32) -> (Vec<(Vec<u8>, Vec<u8>)>, bool)
  record(entry: Entry) -> u32
  entries() -> Vec<Entry>
";
    assert_eq!(text, expected);
    let transfer = schema.operator("account").unwrap().function("transfer").unwrap();
    assert_eq!(transfer.signature.args, "entry: Entry");
    assert_eq!(transfer.signature.arg_names, vec!["entry".to_string()]);
    assert_eq!(transfer.signature.arg_types, vec![WireType::Named("Entry".into())]);
    assert_eq!(transfer.signature.result_type, WireType::Named("Verdict".into()));
    let number = |n| Field {
        name: Some(String::from(n)),
        ty: WireType::Number(if n == "amount" { "i64" } else { "u64" }),
    };
    assert_eq!(
        schema.types["Entry"],
        TypeDef::Struct(vec![number("from"), number("to"), number("amount")])
    );
    assert_eq!(
        schema.types["Verdict"],
        TypeDef::Enum(vec![
            Variant {
                name: "Moved".into(),
                fields: vec![Field {
                    name: Some("balance".into()),
                    ty: WireType::Number("i64"),
                }],
            },
            Variant {
                name: "Nothing".into(),
                fields: vec![],
            },
        ])
    );

    // The JSON form carries the same, for clients in other languages.
    let json: serde_json::Value = serde_json::from_str(&schema.to_json()).expect("valid JSON");
    assert_eq!(json["app"], "typed-bank");
    let account = &json["operators"][0];
    assert_eq!(account["name"], "account");
    assert_eq!(account["partitions"], 8);
    let transfer = account["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "transfer")
        .unwrap();
    assert_eq!(transfer["kind"], "entity");
    assert_eq!(
        transfer["args"],
        serde_json::json!([{"name": "entry", "type": {"named": "Entry"}}])
    );
    assert_eq!(transfer["result"], serde_json::json!({"named": "Verdict"}));
    assert_eq!(
        json["types"]["Entry"],
        serde_json::json!({"struct": [
            {"name": "from", "type": "u64"},
            {"name": "to", "type": "u64"},
            {"name": "amount", "type": "i64"}
        ]})
    );
    assert_eq!(
        json["types"]["Verdict"]["enum"][1],
        serde_json::json!({"name": "Nothing", "fields": []})
    );
    let scan = &account["functions"][1];
    assert_eq!(scan["kind"], "partition");
    assert_eq!(scan["args"][0]["type"], serde_json::json!({"option": {"vec": "u8"}}));
}

#[test]
fn derived_codecs_encode_like_tuples_and_tagged_variants() {
    let entry = Entry {
        from: 1,
        to: 2,
        amount: -3,
    };
    assert_eq!(Payload::encode(&entry), Payload::encode(&(1u64, 2u64, -3i64)));
    assert_eq!(Payload::encode(&entry).decode::<Entry>().unwrap(), entry);
    let moved = Verdict::Moved { balance: 9 };
    assert_eq!(Payload::encode(&moved), Payload::encode(&(0u8, 9i64)));
    assert_eq!(Payload::encode(&Verdict::Nothing).as_bytes(), &[1]);
    assert_eq!(Payload::encode(&moved).decode::<Verdict>().unwrap(), moved);
    assert_eq!(
        Payload::from_bytes(&[2]).decode::<Verdict>(),
        Err(styx_engine::DecodeError::Tag(2))
    );
    // A one-argument function's payload is its argument's encoding, so
    // untyped clients call typed functions as before.
    let typed = AccountRequest::new(1u64).deposit(5);
    assert_eq!(typed.args, Payload::encode(&5i64));
}

/// A counter stored as its one number: the entity's fast path.
#[styx::entity(partitions = 4)]
#[derive(Archive, Serialize, Deserialize, Default)]
struct Hits(u64);

/// A row that must exist: methods on a missing one abort.
#[styx::entity(partitions = 4, required)]
#[derive(Archive, Serialize, Deserialize)]
struct Item {
    price: i64,
    name: String,
}

#[styx::functions]
impl Hits {
    async fn hit(&mut self) -> Result<u64, Abort> {
        self.0 += 1;
        Ok(self.0)
    }
}

#[styx::functions]
impl Item {
    async fn price(&self) -> Result<i64, Abort> {
        Ok(self.price)
    }

    /// Without self: reads the row in place, and a missing row is an answer.
    async fn name_len(ctx: &Ctx) -> Result<Option<u32>, Abort> {
        ctx.read::<Item, _>(|item| item.name.len() as u32)
    }

    /// Without self: creates the row, which a method with self could not.
    async fn create(ctx: &Ctx, price: i64, name: String) -> Result<(), Abort> {
        if ctx.get::<Item>()?.is_some() {
            return Err(Abort::new("item exists"));
        }
        ctx.put(&Item { price, name })
    }

    /// Calls another entity's function through its proxy, from a method without self.
    async fn hit_and_price(ctx: &Ctx, counter: u64) -> Result<(u64, i64), Abort> {
        let hits = ctx.entity::<Hits>(counter).hit().await?;
        let price = ctx.read::<Item, _>(|item| item.price.to_native())?;
        Ok((hits, price.unwrap_or(-1)))
    }

    /// Sends a hit through the typed sender without awaiting it: the hit
    /// commits or rolls back with the transaction.
    async fn hit_later(ctx: &Ctx, counter: u64, abort: bool) -> Result<(), Abort> {
        ctx.send_to::<Hits>(counter).hit()?;
        if abort {
            return Err(Abort::new("changed my mind"));
        }
        Ok(())
    }
}

fn shop() -> Arc<App> {
    let mut app = App::new("shop");
    app.entity::<Hits>();
    app.entity::<Item>();
    Arc::new(app)
}

#[test]
fn required_entities_abort_when_missing_and_methods_without_self_manage_state() {
    for seed in seeds(0..3) {
        let app = shop();
        let mut sim = Sim::new(app.clone(), test_config(100), 2, seed);
        let abort = run(&mut sim, &app, 1, ItemRequest::new(5u64).price()).unwrap_err();
        assert_eq!(abort.kind(), AbortKind::User);
        assert_eq!(abort.message(), "no item with key 5");
        assert_eq!(run(&mut sim, &app, 2, ItemRequest::new(5u64).name_len()), Ok(None));
        assert_eq!(
            run(&mut sim, &app, 3, ItemRequest::new(5u64).create(250, "lamp".into())),
            Ok(())
        );
        let again = run(&mut sim, &app, 4, ItemRequest::new(5u64).create(1, "x".into()));
        assert_eq!(again.unwrap_err().message(), "item exists");
        assert_eq!(run(&mut sim, &app, 5, ItemRequest::new(5u64).price()), Ok(250));
        assert_eq!(run(&mut sim, &app, 6, ItemRequest::new(5u64).name_len()), Ok(Some(4)));
        assert_eq!(
            run(&mut sim, &app, 7, ItemRequest::new(5u64).hit_and_price(9)),
            Ok((1, 250))
        );
        assert_eq!(
            run(&mut sim, &app, 8, ItemRequest::new(5u64).hit_later(9, false)),
            Ok(())
        );
        let aborted = run(&mut sim, &app, 9, ItemRequest::new(5u64).hit_later(9, true));
        assert_eq!(aborted.unwrap_err().message(), "changed my mind");
        // The sent hit of the committed call counted, the aborted one's not.
        assert_eq!(run(&mut sim, &app, 10, HitsRequest::new(9u64).hit()), Ok(3));
    }
}

#[test]
fn a_struct_of_one_number_is_stored_as_the_number() {
    let app = shop();
    let mut sim = Sim::new(app.clone(), test_config(100), 2, 1);
    assert_eq!(run(&mut sim, &app, 1, HitsRequest::new(3u64).hit()), Ok(1));
    assert_eq!(run(&mut sim, &app, 2, HitsRequest::new(3u64).hit()), Ok(2));
    let stored = &sim.state()[&(OpId(0), Key::from(3u64))];
    // The fast path writes the number's bytes, which are rkyv's archive of
    // the struct: both readers agree.
    assert_eq!(stored.decode::<u64>(), Ok(2));
    assert_eq!(stored.decode::<Hits>().map(|h| h.0), Ok(2));
    let rkyv = Value::encode(&Hits(2), &mut Default::default()).unwrap();
    assert_eq!(stored.to_vec(), rkyv.to_vec());
}

/// Runs typed requests one at a time on a simulated engine: the stubs'
/// [`styx::Invoker`] over the simulator instead of a connection.
struct SimInvoker {
    app: Arc<App>,
    sim: std::cell::RefCell<Sim>,
    token: std::cell::Cell<u64>,
}

impl styx::Invoker for SimInvoker {
    type Error = Abort;

    async fn invoke<R: Decode>(&self, request: &TypedRequest<R>) -> Result<R, Abort> {
        let token = self.token.get() + 1;
        self.token.set(token);
        run(&mut self.sim.borrow_mut(), &self.app, token, request.clone())
    }
}

#[test]
fn client_stubs_run_each_call_as_a_transaction() {
    let app = app();
    let invoker = SimInvoker {
        sim: std::cell::RefCell::new(Sim::new(app.clone(), test_config(100), 2, 3)),
        app,
        token: std::cell::Cell::new(0),
    };
    futures_lite::future::block_on(async {
        let one = AccountClient::new(&invoker, 1u64);
        assert_eq!(one.deposit(10).await, Ok(10));
        let entry = Entry {
            from: 1,
            to: 2,
            amount: 4,
        };
        assert_eq!(one.transfer(entry.clone()).await, Ok(Verdict::Moved { balance: 6 }));
        assert_eq!(AccountClient::new(&invoker, 2u64).balance().await, Ok(4));
        assert_eq!(LedgerClient::new(&invoker, 1u64).entries().await, Ok(vec![entry]));
        let short = Entry {
            from: 1,
            to: 2,
            amount: 100,
        };
        assert_eq!(one.transfer(short).await.unwrap_err().message(), "insufficient credit");
    });
}

/// A node of a chain that calls back into its caller (A → B → A).
#[styx::entity(partitions = 4)]
#[derive(Archive, Serialize, Deserialize, Default)]
struct Node {
    value: i64,
    calls: u32,
}

#[styx::functions]
impl Node {
    async fn add(&mut self, n: i64) -> Result<i64, Abort> {
        self.value += n;
        Ok(self.value)
    }

    async fn value(&self) -> Result<i64, Abort> {
        Ok(self.value)
    }

    /// Asks `via` to add `n` to this node, then counts the call: the
    /// write-back of `calls` would lose the inner `add`.
    async fn bounce(&mut self, ctx: &Ctx, via: u64, n: i64) -> Result<i64, Abort> {
        let me = ctx.key().as_u64().expect("a numeric key");
        let seen = ctx.entity::<Node>(via).forward(me, n).await?;
        self.calls += 1;
        Ok(seen)
    }

    /// The same chain from a `&self` method: nothing is written back, so
    /// the inner write stands.
    async fn bounce_read(&self, ctx: &Ctx, via: u64, n: i64) -> Result<i64, Abort> {
        let me = ctx.key().as_u64().expect("a numeric key");
        ctx.entity::<Node>(via).forward(me, n).await
    }

    /// A `&mut self` method whose calls do not come back: written back.
    async fn push(&mut self, ctx: &Ctx, to: u64, n: i64) -> Result<i64, Abort> {
        let there = ctx.entity::<Node>(to).add(n).await?;
        self.calls += 1;
        Ok(there)
    }

    async fn forward(&mut self, ctx: &Ctx, back: u64, n: i64) -> Result<i64, Abort> {
        self.calls += 1;
        ctx.entity::<Node>(back).add(n).await
    }
}

#[test]
fn a_mut_self_method_refuses_to_write_back_over_a_nested_change() {
    let mut app = App::new("chain");
    app.entity::<Node>();
    let app = Arc::new(app);
    for seed in seeds(0..4) {
        for shards in [1, 3] {
            let mut sim = Sim::new(app.clone(), test_config(100), shards, seed);
            let serial = styx_engine::Serial::new(app.clone(), styx_engine::CallLimits::default());
            let mut token = 0;
            // Runs a request in the engine and in the serial executor, which
            // must agree, and returns the engine's outcome.
            let mut both = |request: TypedRequest<i64>| {
                token += 1;
                let engine = run(&mut sim, &app, token, request.clone());
                let oracle = match serial.execute(token, 0, &request.request(&app).unwrap()) {
                    Outcome::Committed(p) => Ok(request.decode(&p).unwrap()),
                    Outcome::Aborted(a) => Err(a),
                };
                assert_eq!(engine, oracle, "seed {seed}, {shards} shards");
                engine
            };
            assert_eq!(both(NodeRequest::new(1u64).add(10)), Ok(10));
            // A → B → A from &mut self: refused, nothing written anywhere.
            let abort = both(NodeRequest::new(1u64).bounce(2, 5)).unwrap_err();
            assert_eq!(abort.kind(), AbortKind::Reentrant, "{abort}");
            assert!(abort.message().contains("node.bounce on 1"), "{abort}");
            assert!(abort.message().contains("nested call"), "{abort}");
            assert_eq!(both(NodeRequest::new(1u64).value()), Ok(10));
            assert_eq!(both(NodeRequest::new(2u64).value()), Ok(0));
            // The same chain from &self commits, and the inner write stands.
            assert_eq!(both(NodeRequest::new(1u64).bounce_read(2, 5)), Ok(15));
            assert_eq!(both(NodeRequest::new(1u64).value()), Ok(15));
            // A &mut self method whose call does not come back writes back.
            assert_eq!(both(NodeRequest::new(1u64).push(3, 4)), Ok(4));
            assert_eq!(both(NodeRequest::new(3u64).value()), Ok(4));
            assert_eq!(both(NodeRequest::new(1u64).value()), Ok(15));
        }
    }
}
