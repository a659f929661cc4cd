//! Applications: operators and the functions registered on them.
//!
//! An [`App`] is built once, before the engine starts, and shared read-only by
//! every shard. Functions are plain Rust `async` closures; the registry wraps
//! each one so that the engine sees a uniform body: encoded arguments in, an
//! encoded result or an abort out.
//!
//! ```
//! use styx_engine::{App, Abort};
//!
//! let mut app = App::new("bank");
//! let account = app.operator("account", 16);
//! app.function(account, "deposit", |ctx, amount: i64| async move {
//!     let balance = ctx.get::<i64>()?.unwrap_or(0);
//!     ctx.put(&(balance + amount))?;
//!     Ok(balance + amount)
//! });
//! app.function(account, "withdraw", |ctx, amount: i64| async move {
//!     let balance = ctx.get::<i64>()?.unwrap_or(0);
//!     if balance < amount {
//!         return Err(Abort::new("insufficient credit"));
//!     }
//!     ctx.put(&(balance - amount))?;
//!     Ok(())
//! });
//! assert!(app.resolve("account", "deposit").is_some());
//! ```

use crate::abort::Abort;
use crate::codec::{Decode, Encode, Payload};
use crate::ctx::Ctx;
use crate::ids::{FnId, OpId};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The engine's view of a running function body.
pub type BodyFuture = Pin<Box<dyn Future<Output = Result<Payload, Abort>>>>;

type Body = Arc<dyn Fn(Ctx, Payload) -> BodyFuture + Send + Sync>;

/// Partitions per operator are at most this many.
pub const PARTITIONS_MAX: u32 = 1 << 16;
/// Functions per operator are at most this many.
pub const FUNCTIONS_PER_OPERATOR_MAX: usize = 1 << 12;
/// Operators per application are at most this many.
pub const OPERATORS_MAX: usize = 1 << 10;
/// Operator and function names are at most this long.
pub const NAME_LEN_MAX: usize = 128;
/// The function every operator has: returns an entity's state as archive
/// bytes (`Option<Vec<u8>>`), read like any transaction. Names starting
/// with `__` are reserved for such built-ins.
pub const GET_FUNCTION: &str = "__get";
/// The partition function every operator has: one page of a partition's
/// entities in key order, for tools that read a whole state over the wire
/// (`styx verify`, the remote benchmark's final check). Arguments
/// `(after: Option<Vec<u8>>, limit: u32)`: the entities whose key bytes
/// sort after `after` (all when `None`), at most `limit` of them (at least
/// one, at most [`SCAN_LIMIT_MAX`]). Result `(Vec<(key, value)>, more)`:
/// key bytes and the value's archive bytes, and whether entities remain
/// after the page. It reads like any partition scan, so a page is a
/// serializable read; pages taken one after another are each consistent,
/// not all together.
pub const SCAN_FUNCTION: &str = "__scan";
/// Entities in one [`SCAN_FUNCTION`] page at most.
pub const SCAN_LIMIT_MAX: u32 = 4_096;
/// A [`SCAN_FUNCTION`] page stops before its encoded entities pass this
/// many bytes (it always holds at least one), so it stays well within the
/// wire's payload cap.
pub const SCAN_PAGE_BYTES_MAX: usize = 512 << 10;

/// A page of [`SCAN_FUNCTION`]: key and value bytes, and whether more follow.
type ScanPage = (Vec<(Vec<u8>, Vec<u8>)>, bool);

/// The body of [`SCAN_FUNCTION`].
fn scan_page(ctx: &Ctx, after: Option<&[u8]>, limit: u32) -> Result<ScanPage, Abort> {
    let limit = limit.clamp(1, SCAN_LIMIT_MAX) as usize;
    let mut page = Vec::new();
    let mut bytes = 0usize;
    let mut more = false;
    ctx.scan_raw(|key, value| {
        let key = key.as_bytes();
        if more || after.is_some_and(|a| key <= a) {
            return;
        }
        // Two u32 lengths and the bytes, as the result encodes them.
        let cost = 8 + key.len() + value.len();
        if page.len() == limit || (!page.is_empty() && bytes + cost > SCAN_PAGE_BYTES_MAX) {
            more = true;
            return;
        }
        bytes += cost;
        page.push((key.to_vec(), value.to_vec()));
    })?;
    Ok((page, more))
}

/// What a function runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FnKind {
    /// One entity: may get, put and delete that entity's state.
    Entity,
    /// A whole partition: may scan it (a read of every key in it).
    Partition,
}

/// A registered function.
pub struct Function {
    name: String,
    kind: FnKind,
    body: Body,
}

impl Function {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> FnKind {
        self.kind
    }

    pub(crate) fn start(&self, ctx: Ctx, args: Payload) -> BodyFuture {
        (self.body)(ctx, args)
    }
}

/// An entity type: its name, partition count and functions.
pub struct Operator {
    name: String,
    partitions: u32,
    functions: Vec<Function>,
    by_name: HashMap<String, u16>,
}

impl Operator {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    pub fn functions(&self) -> impl Iterator<Item = &Function> {
        self.functions.iter()
    }
}

/// An application: the operators and functions an engine runs.
pub struct App {
    name: String,
    operators: Vec<Operator>,
    by_name: HashMap<String, OpId>,
}

impl fmt::Debug for App {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("App");
        d.field("name", &self.name);
        for op in &self.operators {
            let names: Vec<&str> = op.functions.iter().map(|f| f.name.as_str()).collect();
            d.field(&op.name, &names);
        }
        d.finish()
    }
}

fn check_name(what: &str, name: &str) {
    assert!(
        !name.is_empty() && name.len() <= NAME_LEN_MAX && name.bytes().all(|b| b.is_ascii_graphic()),
        "{what} name {name:?} must be 1..={NAME_LEN_MAX} printable ASCII characters without spaces"
    );
}

impl App {
    pub fn new(name: &str) -> App {
        App {
            name: name.to_string(),
            operators: Vec::new(),
            by_name: HashMap::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Declares an operator whose entities are spread over `partitions`.
    ///
    /// The partition count fixes where keys live: partition `p` lives on
    /// shard `p % shards`, so choose it at least the number of shards.
    ///
    /// # Panics
    /// On a duplicate or malformed name, or a partition count outside
    /// `1..=PARTITIONS_MAX`: these are mistakes in the program, found at start.
    pub fn operator(&mut self, name: &str, partitions: u32) -> OpId {
        check_name("operator", name);
        assert!(
            (1..=PARTITIONS_MAX).contains(&partitions),
            "operator {name}: {partitions} partitions, expected 1..={PARTITIONS_MAX}"
        );
        assert!(!self.by_name.contains_key(name), "operator {name} declared twice");
        assert!(
            self.operators.len() < OPERATORS_MAX,
            "more than {OPERATORS_MAX} operators"
        );
        let id = OpId(self.operators.len() as u16);
        self.operators.push(Operator {
            name: name.to_string(),
            partitions,
            functions: Vec::new(),
            by_name: HashMap::new(),
        });
        self.by_name.insert(name.to_string(), id);
        self.register(id, GET_FUNCTION, FnKind::Entity, |ctx: Ctx, (): ()| async move {
            ctx.get_raw()
        });
        self.register(
            id,
            SCAN_FUNCTION,
            FnKind::Partition,
            |ctx: Ctx, args: (Option<Vec<u8>>, u32)| async move { scan_page(&ctx, args.0.as_deref(), args.1) },
        );
        id
    }

    /// Registers an entity function. Its arguments decode as `A` and its
    /// result encodes from `R`.
    pub fn function<A, R, F, Fut>(&mut self, op: OpId, name: &str, f: F) -> FnId
    where
        A: Decode + 'static,
        R: Encode + 'static,
        F: Fn(Ctx, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, Abort>> + 'static,
    {
        assert!(
            !name.starts_with("__"),
            "function names starting with __ are reserved: {name}"
        );
        self.register(op, name, FnKind::Entity, f)
    }

    /// Registers a partition function: it runs once on a whole partition and
    /// may scan it with [`Ctx::scan`].
    pub fn partition_function<A, R, F, Fut>(&mut self, op: OpId, name: &str, f: F) -> FnId
    where
        A: Decode + 'static,
        R: Encode + 'static,
        F: Fn(Ctx, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, Abort>> + 'static,
    {
        assert!(
            !name.starts_with("__"),
            "function names starting with __ are reserved: {name}"
        );
        self.register(op, name, FnKind::Partition, f)
    }

    fn register<A, R, F, Fut>(&mut self, op: OpId, name: &str, kind: FnKind, f: F) -> FnId
    where
        A: Decode + 'static,
        R: Encode + 'static,
        F: Fn(Ctx, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, Abort>> + 'static,
    {
        check_name("function", name);
        let operator = &mut self.operators[op.0 as usize];
        assert!(
            !operator.by_name.contains_key(name),
            "function {}.{name} registered twice",
            operator.name
        );
        assert!(
            operator.functions.len() < FUNCTIONS_PER_OPERATOR_MAX,
            "operator {} has more than {FUNCTIONS_PER_OPERATOR_MAX} functions",
            operator.name
        );
        let full_name = format!("{}.{name}", operator.name);
        let body: Body = Arc::new(move |ctx: Ctx, args: Payload| -> BodyFuture {
            match args.decode::<A>() {
                Ok(a) => {
                    let fut = f(ctx, a);
                    Box::pin(async move { fut.await.map(|r| Payload::encode(&r)) })
                }
                Err(e) => {
                    let abort = Abort::bad_arguments(format!("arguments of {full_name}: {e}"));
                    Box::pin(std::future::ready(Err(abort)))
                }
            }
        });
        let index = operator.functions.len() as u16;
        operator.functions.push(Function {
            name: name.to_string(),
            kind,
            body,
        });
        operator.by_name.insert(name.to_string(), index);
        FnId { op, index }
    }

    /// The function `op.function`, if registered.
    pub fn resolve(&self, op: &str, function: &str) -> Option<FnId> {
        let op = *self.by_name.get(op)?;
        let index = *self.operators[op.0 as usize].by_name.get(function)?;
        Some(FnId { op, index })
    }

    pub fn op_id(&self, name: &str) -> Option<OpId> {
        self.by_name.get(name).copied()
    }

    pub fn operator_info(&self, op: OpId) -> &Operator {
        &self.operators[op.0 as usize]
    }

    pub fn function_info(&self, f: FnId) -> &Function {
        &self.operators[f.op.0 as usize].functions[f.index as usize]
    }

    pub fn operators(&self) -> impl Iterator<Item = (OpId, &Operator)> {
        self.operators.iter().enumerate().map(|(i, op)| (OpId(i as u16), op))
    }

    pub fn operator_count(&self) -> usize {
        self.operators.len()
    }

    /// `op.function`, for messages.
    pub fn describe(&self, f: FnId) -> String {
        format!("{}.{}", self.operator_info(f.op).name, self.function_info(f).name)
    }
}
