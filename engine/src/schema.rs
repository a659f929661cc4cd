//! An application's schema: its operators, their functions, and the
//! argument and result types of each, printable.
//!
//! Typed entities record their signatures as written in the source
//! (`transfer(to: u64, amount: i64) -> ()`); closures registered with
//! [`App::function`] get their Rust types (`transfer(u64, i64) -> ()`),
//! without module paths. Types name the encoding of `docs/protocol.md`:
//! integers at their width, `String`, `Vec<T>`, `Option<T>`, tuples, and
//! structs and enums that derive `Encode`/`Decode`.
//!
//! [`App::function`]: crate::App::function

use crate::app::{App, FnKind};
use crate::codec::{Decode, Encode};
use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;

/// How a value is encoded on the wire (`docs/protocol.md`, section 10):
/// what a client in any language needs to build arguments and read results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireType {
    /// `u8` … `u64`, `i8` … `i64`, `f32`, `f64`: little-endian at their width.
    Number(&'static str),
    Bool,
    /// A `u32` length, then UTF-8.
    String,
    /// A `u32` length, then raw bytes.
    Bytes,
    /// A `u32` count, then each element.
    Vec(Box<WireType>),
    /// One byte 0, or 1 then the value.
    Option(Box<WireType>),
    /// The elements one after the other; `()` is the empty tuple.
    Tuple(Vec<WireType>),
    /// A struct or enum of the schema's `types`, by name.
    Named(String),
    /// A type whose encoding is hand-written: the schema cannot describe it.
    Opaque(String),
}

/// The definition of a named type: a struct (its fields in order, encoded
/// like a tuple) or an enum (a `u8` variant index, then its fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TypeDef {
    Struct(Vec<Field>),
    Enum(Vec<Variant>),
}

/// A field; tuple structs and variants have no field names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: Option<String>,
    pub ty: WireType,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variant {
    pub name: String,
    pub fields: Vec<Field>,
}

/// The named types an application's functions use, by name.
pub type Types = BTreeMap<String, TypeDef>;

impl WireType {
    pub fn opaque<T: ?Sized>() -> WireType {
        WireType::Opaque(short_type_name(std::any::type_name::<T>()))
    }

    /// The named type `T` (what `#[derive(Encode)]` returns), defined in
    /// `types` by `define` the first time it is met. Recursive types are
    /// fine: the name is entered before the fields are described.
    pub fn named<T: ?Sized>(types: &mut Types, define: impl FnOnce(&mut Types) -> TypeDef) -> WireType {
        let name = short_type_name(std::any::type_name::<T>());
        if !types.contains_key(&name) {
            types.insert(name.clone(), TypeDef::Struct(Vec::new()));
            let def = define(types);
            types.insert(name.clone(), def);
        }
        WireType::Named(name)
    }

    /// The arguments a payload of this type lists: a tuple's elements, or
    /// the one value (a function with one argument takes it bare).
    pub fn into_args(self) -> Vec<WireType> {
        match self {
            WireType::Tuple(items) => items,
            one => vec![one],
        }
    }
}

impl fmt::Display for WireType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireType::Number(n) => f.write_str(n),
            WireType::Bool => f.write_str("bool"),
            WireType::String => f.write_str("String"),
            WireType::Bytes => f.write_str("Bytes"),
            WireType::Vec(t) => write!(f, "Vec<{t}>"),
            WireType::Option(t) => write!(f, "Option<{t}>"),
            WireType::Tuple(items) => {
                f.write_str("(")?;
                for (i, t) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                if items.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
            WireType::Named(n) | WireType::Opaque(n) => f.write_str(n),
        }
    }
}

/// Arguments and result of one function, as the schema prints them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The parameter list: `to: u64, amount: i64`, or `u64, i64` for a closure.
    pub args: String,
    pub result: String,
    /// The arguments' names, when the function has them (typed entities).
    pub arg_names: Vec<String>,
    /// The arguments' encodings: the payload is these one after the other.
    pub arg_types: Vec<WireType>,
    pub result_type: WireType,
}

impl Signature {
    /// A signature as text only; [`App::set_signature`] keeps the types
    /// the function was registered with.
    ///
    /// [`App::set_signature`]: crate::App::set_signature
    pub fn new(args: &str, result: &str) -> Signature {
        Signature {
            args: args.to_string(),
            result: result.to_string(),
            arg_names: Vec::new(),
            arg_types: Vec::new(),
            result_type: WireType::Tuple(Vec::new()),
        }
    }

    /// [`Signature::new`] with the arguments' names.
    pub fn named(args: &str, result: &str, names: &[&str]) -> Signature {
        Signature {
            arg_names: names.iter().map(|n| n.to_string()).collect(),
            ..Signature::new(args, result)
        }
    }

    /// The signature of a function taking `A` and returning `R`; their
    /// named types go into `types`.
    pub(crate) fn of<A: Decode, R: Encode>(types: &mut Types) -> Signature {
        let args = short_type_name(std::any::type_name::<A>());
        // A closure's arguments are one value; a tuple lists them.
        let args = match args.strip_prefix('(').and_then(|a| a.strip_suffix(')')) {
            Some(inner) => inner.trim_end_matches(',').to_string(),
            None => args,
        };
        Signature {
            args,
            result: short_type_name(std::any::type_name::<R>()),
            arg_names: Vec::new(),
            arg_types: <A as Decode>::wire_type(types).into_args(),
            result_type: <R as Encode>::wire_type(types),
        }
    }
}

/// `alloc::vec::Vec<alloc::string::String>` -> `Vec<String>`.
pub(crate) fn short_type_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut segment = String::new();
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            segment.push(c);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            segment.clear();
        } else {
            out.push_str(&segment);
            segment.clear();
            out.push(c);
        }
    }
    out.push_str(&segment);
    out
}

/// One function of an operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSchema {
    pub name: String,
    pub kind: FnKind,
    pub signature: Signature,
}

/// One operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorSchema {
    pub name: String,
    pub partitions: u32,
    /// The state's type, for typed entities.
    pub state: Option<String>,
    pub functions: Vec<FunctionSchema>,
}

/// What an application serves: [`App::schema`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    pub app: String,
    pub operators: Vec<OperatorSchema>,
    /// The structs and enums the functions take and return.
    pub types: Types,
}

impl Schema {
    pub(crate) fn of(app: &App) -> Schema {
        Schema {
            app: app.name().to_string(),
            types: app.types().clone(),
            operators: app
                .operators()
                .map(|(_, op)| OperatorSchema {
                    name: op.name().to_string(),
                    partitions: op.partitions(),
                    state: op.state().map(str::to_string),
                    functions: op
                        .functions()
                        .map(|f| FunctionSchema {
                            name: f.name().to_string(),
                            kind: f.kind(),
                            signature: f.signature().clone(),
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    pub fn operator(&self, name: &str) -> Option<&OperatorSchema> {
        self.operators.iter().find(|o| o.name == name)
    }

    /// The schema as JSON, for clients that encode arguments and decode
    /// results by name (`styx call`; `GET /schema` on a daemon's metrics
    /// address serves it). The format is in `docs/protocol.md`, section 10.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        out.push_str("{\"app\":");
        json_string(&mut out, &self.app);
        out.push_str(",\"operators\":[");
        for (i, op) in self.operators.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"name\":");
            json_string(&mut out, &op.name);
            let _ = write!(out, ",\"partitions\":{},\"state\":", op.partitions);
            match &op.state {
                Some(state) => json_string(&mut out, state),
                None => out.push_str("null"),
            }
            out.push_str(",\"functions\":[");
            for (j, f) in op.functions.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                out.push_str("{\"name\":");
                json_string(&mut out, &f.name);
                out.push_str(",\"kind\":");
                json_string(
                    &mut out,
                    match f.kind {
                        FnKind::Entity => "entity",
                        FnKind::Partition => "partition",
                    },
                );
                out.push_str(",\"args\":[");
                let sig = &f.signature;
                for (k, ty) in sig.arg_types.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    out.push_str("{\"name\":");
                    match sig.arg_names.get(k) {
                        Some(n) => json_string(&mut out, n),
                        None => out.push_str("null"),
                    }
                    out.push_str(",\"type\":");
                    json_type(&mut out, ty);
                    out.push('}');
                }
                out.push_str("],\"result\":");
                json_type(&mut out, &sig.result_type);
                out.push_str(",\"signature\":");
                json_string(&mut out, &f.to_string());
                out.push('}');
            }
            out.push_str("]}");
        }
        out.push_str("],\"types\":{");
        for (i, (name, def)) in self.types.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            json_string(&mut out, name);
            out.push(':');
            match def {
                TypeDef::Struct(fields) => {
                    out.push_str("{\"struct\":");
                    json_fields(&mut out, fields);
                    out.push('}');
                }
                TypeDef::Enum(variants) => {
                    out.push_str("{\"enum\":[");
                    for (j, v) in variants.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        out.push_str("{\"name\":");
                        json_string(&mut out, &v.name);
                        out.push_str(",\"fields\":");
                        json_fields(&mut out, &v.fields);
                        out.push('}');
                    }
                    out.push_str("]}");
                }
            }
        }
        out.push_str("}}");
        out
    }
}

fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn json_fields(out: &mut String, fields: &[Field]) {
    out.push('[');
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        match &field.name {
            Some(n) => json_string(out, n),
            None => out.push_str("null"),
        }
        out.push_str(",\"type\":");
        json_type(out, &field.ty);
        out.push('}');
    }
    out.push(']');
}

/// A wire type as JSON: a string for a number, `bool`, `String` or
/// `Bytes`; `{"vec": T}`, `{"option": T}`, `{"tuple": [T, ...]}`,
/// `{"named": "Entry"}` (see `types`), `{"opaque": "Name"}`.
fn json_type(out: &mut String, ty: &WireType) {
    match ty {
        WireType::Number(n) => json_string(out, n),
        WireType::Bool => json_string(out, "bool"),
        WireType::String => json_string(out, "String"),
        WireType::Bytes => json_string(out, "Bytes"),
        WireType::Vec(t) => {
            out.push_str("{\"vec\":");
            json_type(out, t);
            out.push('}');
        }
        WireType::Option(t) => {
            out.push_str("{\"option\":");
            json_type(out, t);
            out.push('}');
        }
        WireType::Tuple(items) => {
            out.push_str("{\"tuple\":[");
            for (i, t) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_type(out, t);
            }
            out.push_str("]}");
        }
        WireType::Named(n) => {
            out.push_str("{\"named\":");
            json_string(out, n);
            out.push('}');
        }
        WireType::Opaque(n) => {
            out.push_str("{\"opaque\":");
            json_string(out, n);
            out.push('}');
        }
    }
}

impl OperatorSchema {
    pub fn function(&self, name: &str) -> Option<&FunctionSchema> {
        self.functions.iter().find(|f| f.name == name)
    }
}

impl fmt::Display for FunctionSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind == FnKind::Partition {
            f.write_str("partition ")?;
        }
        write!(f, "{}({}) -> {}", self.name, self.signature.args, self.signature.result)
    }
}

/// One line per operator, then one indented line per function:
///
/// ```text
/// app bank
/// operator account: 16 partitions, state Account
///   deposit(amount: i64) -> i64
/// ```
impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "app {}", self.app)?;
        for op in &self.operators {
            write!(f, "operator {}: {} partitions", op.name, op.partitions)?;
            if let Some(state) = &op.state {
                write!(f, ", state {state}")?;
            }
            writeln!(f)?;
            for function in &op.functions {
                writeln!(f, "  {function}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_lose_their_paths() {
        assert_eq!(
            short_type_name("alloc::vec::Vec<(u64, alloc::string::String)>"),
            "Vec<(u64, String)>"
        );
        assert_eq!(
            short_type_name("core::option::Option<alloc::vec::Vec<u8>>"),
            "Option<Vec<u8>>"
        );
        let text = |s: Signature| (s.args, s.result);
        let t = &mut Types::new();
        assert_eq!(
            text(Signature::of::<(u64, i64), ()>(t)),
            ("u64, i64".into(), "()".into())
        );
        assert_eq!(
            text(Signature::of::<(i64,), String>(t)),
            ("i64".into(), "String".into())
        );
        assert_eq!(text(Signature::of::<(), i64>(t)), ("".into(), "i64".into()));
        assert_eq!(text(Signature::of::<i64, i64>(t)), ("i64".into(), "i64".into()));
    }

    #[test]
    fn signatures_describe_the_wire_types() {
        let mut types = Types::new();
        let s = Signature::of::<(u64, Vec<Option<String>>), (bool, crate::Payload)>(&mut types);
        assert_eq!(
            s.arg_types,
            vec![
                WireType::Number("u64"),
                WireType::Vec(Box::new(WireType::Option(Box::new(WireType::String))))
            ]
        );
        assert_eq!(s.result_type, WireType::Tuple(vec![WireType::Bool, WireType::Bytes]));
        assert_eq!(s.result_type.to_string(), "(bool, Bytes)");
        assert_eq!(
            Signature::of::<i64, ()>(&mut types).arg_types,
            vec![WireType::Number("i64")]
        );
        assert_eq!(Signature::of::<(), ()>(&mut types).arg_types, vec![]);
        assert!(types.is_empty());
    }
}
