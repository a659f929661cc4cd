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
use std::fmt;

/// Arguments and result of one function, as the schema prints them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The parameter list: `to: u64, amount: i64`, or `u64, i64` for a closure.
    pub args: String,
    pub result: String,
}

impl Signature {
    pub fn new(args: &str, result: &str) -> Signature {
        Signature {
            args: args.to_string(),
            result: result.to_string(),
        }
    }

    /// The signature of a closure taking `A` and returning `R`.
    pub(crate) fn of<A, R>() -> Signature {
        let args = short_type_name(std::any::type_name::<A>());
        // A closure's arguments are one value; a tuple lists them.
        let args = match args.strip_prefix('(').and_then(|a| a.strip_suffix(')')) {
            Some(inner) => inner.trim_end_matches(',').to_string(),
            None => args,
        };
        Signature {
            args,
            result: short_type_name(std::any::type_name::<R>()),
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
}

impl Schema {
    pub(crate) fn of(app: &App) -> Schema {
        Schema {
            app: app.name().to_string(),
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
        assert_eq!(Signature::of::<(u64, i64), ()>(), Signature::new("u64, i64", "()"));
        assert_eq!(Signature::of::<(i64,), String>(), Signature::new("i64", "String"));
        assert_eq!(Signature::of::<(), i64>(), Signature::new("", "i64"));
        assert_eq!(Signature::of::<i64, i64>(), Signature::new("i64", "i64"));
    }
}
