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
use crate::schema::{Schema, Signature, Types};
use crate::typed::Functions;
use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A function body the engine runs, reused from one invocation to the next.
///
/// A body's future lives in a pinned box that outlives it: `start` writes a
/// new future into the box in place, and the box goes back to a pool
/// ([`Runners`]) when the invocation is over. So an invocation allocates
/// nothing for its future, which was a third of a short transaction's
/// allocations and a tenth of its instructions when every call boxed a
/// fresh one.
pub(crate) trait Runner {
    /// Decodes `args` and starts the body on them.
    fn start(&mut self, ctx: Ctx, args: &Payload) -> Result<(), Abort>;
    /// Polls the started body; once it is ready the future is dropped
    /// (releasing its `Ctx`) and the runner can start again.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Payload, Abort>>;
    /// Drops a started body that will not finish.
    fn clear(&mut self);
}

type MakeRunner = Arc<dyn Fn() -> Box<dyn Runner> + Send + Sync>;

/// The runner of one registered function: its closure, and the slot its
/// futures are written into.
struct Body<A, R, F, Fut> {
    f: Arc<F>,
    /// `op.function`, for the bad-arguments abort.
    name: Arc<str>,
    future: Pin<Box<Option<Fut>>>,
    _types: PhantomData<fn(A) -> R>,
}

impl<A, R, F, Fut> Runner for Body<A, R, F, Fut>
where
    A: Decode,
    R: Encode,
    F: Fn(Ctx, A) -> Fut,
    Fut: Future<Output = Result<R, Abort>>,
{
    #[inline]
    fn start(&mut self, ctx: Ctx, args: &Payload) -> Result<(), Abort> {
        match args.decode::<A>() {
            Ok(a) => {
                self.future.set(Some((self.f)(ctx, a)));
                Ok(())
            }
            Err(e) => Err(Abort::bad_arguments(format!("arguments of {}: {e}", self.name))),
        }
    }

    #[inline]
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Payload, Abort>> {
        let future = self.future.as_mut().as_pin_mut().expect("poll of a body not started");
        match future.poll(cx) {
            Poll::Ready(result) => {
                self.future.set(None);
                Poll::Ready(result.map(|r| Payload::encode(&r)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn clear(&mut self) {
        self.future.set(None);
    }
}

/// Idle runners kept per function by one host.
const RUNNERS_PER_FUNCTION_MAX: usize = 1024;

/// A host's idle runners, by function. A runner is taken for an invocation
/// and given back when its body finished; one whose body panicked is
/// dropped instead (its future's state is unknown).
pub(crate) struct Runners {
    free: Vec<Vec<Box<dyn Runner>>>,
}

impl Runners {
    pub fn new(app: &App) -> Runners {
        Runners {
            free: (0..app.function_count()).map(|_| Vec::new()).collect(),
        }
    }

    #[inline]
    pub fn take(&mut self, app: &App, f: FnId) -> Box<dyn Runner> {
        let function = app.function_info(f);
        match self.free[function.ordinal as usize].pop() {
            Some(r) => r,
            None => (function.make)(),
        }
    }

    /// Gives back the runner of `f`, whose body finished or was cleared.
    #[inline]
    pub fn give(&mut self, app: &App, f: FnId, runner: Box<dyn Runner>) {
        let free = &mut self.free[app.function_info(f).ordinal as usize];
        if free.len() < RUNNERS_PER_FUNCTION_MAX {
            free.push(runner);
        }
    }
}

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
    // One more than the page holds tells whether more follow.
    ctx.scan_raw_after(after, limit + 1, |key, value| {
        let key = key.as_bytes();
        if more {
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
    /// The function's number among all of the application's (runner pools).
    ordinal: u32,
    make: MakeRunner,
    signature: Signature,
}

impl Function {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its arguments and result, for the [`Schema`].
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    pub fn kind(&self) -> FnKind {
        self.kind
    }
}

/// An entity type: its name, partition count and functions.
pub struct Operator {
    name: String,
    partitions: u32,
    functions: Vec<Function>,
    by_name: HashMap<String, u16>,
    /// The state's type, when declared as a typed entity.
    state: Option<String>,
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

    /// The state's type, for an operator declared with [`App::entity`].
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }
}

/// An application: the operators and functions an engine runs.
pub struct App {
    name: String,
    operators: Vec<Operator>,
    by_name: HashMap<String, OpId>,
    /// Functions registered on all operators.
    functions: u32,
    /// The structs and enums their arguments and results use (the schema's).
    types: Types,
    /// Typed entities: their operator and the index of their first
    /// function, so that a proxy call is a function id, not a name lookup.
    typed: Vec<(TypeId, OpId, u16)>,
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
            functions: 0,
            types: Types::new(),
            typed: Vec::new(),
        }
    }

    /// The operator of typed entity `E` and the index of its first
    /// function (its methods follow in declaration order), if declared.
    #[inline]
    pub fn typed_entity<E: 'static>(&self) -> Option<(OpId, u16)> {
        let id = TypeId::of::<E>();
        self.typed.iter().find(|t| t.0 == id).map(|t| (t.1, t.2))
    }

    /// The named types of every function's arguments and results.
    pub fn types(&self) -> &Types {
        &self.types
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Declares an operator whose entities are spread over `partitions`.
    ///
    /// The partition count fixes which keys live together: partition `p`
    /// starts on shard `p % shards` (a [`crate::Move`] sends it elsewhere),
    /// so choose it at least the number of shards.
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
            state: None,
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

    /// Declares the operator of typed entity `E` (its name and partitions
    /// from `#[entity]`) and registers its functions (from `#[functions]`);
    /// see [`crate::typed`]. More closures may be registered on the operator
    /// it returns.
    pub fn entity<E: Functions>(&mut self) -> OpId {
        self.entity_with::<E>(E::PARTITIONS)
    }

    /// [`App::entity`] over `partitions` partitions instead of the count
    /// `#[entity]` names: an application whose partition count is a setting.
    pub fn entity_with<E: Functions>(&mut self, partitions: u32) -> OpId {
        let op = self.operator(E::NAME, partitions);
        self.operators[op.0 as usize].state = Some(crate::schema::short_type_name(std::any::type_name::<E>()));
        let first = self.operators[op.0 as usize].functions.len() as u16;
        E::register(self, op);
        self.typed.push((TypeId::of::<E>(), op, first));
        op
    }

    /// Replaces the text and argument names the schema shows for `f`
    /// (typed entities record their source this way); the wire types stay
    /// those it was registered with.
    pub fn set_signature(&mut self, f: FnId, signature: Signature) {
        let old = &mut self.operators[f.op.0 as usize].functions[f.index as usize].signature;
        old.args = signature.args;
        old.result = signature.result;
        old.arg_names = signature.arg_names;
    }

    /// The operators, functions and their types, printable.
    pub fn schema(&self) -> Schema {
        Schema::of(self)
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
        let signature = Signature::of::<A, R>(&mut self.types);
        let ordinal = self.functions;
        self.functions += 1;
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
        let full_name: Arc<str> = format!("{}.{name}", operator.name).into();
        let f = Arc::new(f);
        let make: MakeRunner = Arc::new(move || -> Box<dyn Runner> {
            Box::new(Body::<A, R, F, Fut> {
                f: f.clone(),
                name: full_name.clone(),
                future: Box::pin(None),
                _types: PhantomData,
            })
        });
        let index = operator.functions.len() as u16;
        operator.functions.push(Function {
            name: name.to_string(),
            kind,
            ordinal,
            make,
            signature,
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

    /// Functions registered on all operators (built-ins included).
    pub fn function_count(&self) -> usize {
        self.functions as usize
    }

    /// `op.function`, for messages.
    pub fn describe(&self, f: FnId) -> String {
        format!("{}.{}", self.operator_info(f.op).name, self.function_info(f).name)
    }
}
