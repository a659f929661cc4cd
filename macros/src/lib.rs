//! Typed entities for Styx: an entity is a Rust struct (its state, stored
//! with rkyv) and its functions are the `async fn`s of one impl block.
//!
//! These macros only generate code against `styx_engine`'s closure API
//! (`App::function`, `Ctx::call`): a typed application is an ordinary
//! [`App`] underneath, and both styles mix in one application. Use them
//! through the engine's re-exports (`styx_engine::entity`, …); the
//! generated code names the engine as `::styx_engine`.
//!
//! - `#[entity]` on a struct: implements `styx_engine::Entity` (operator
//!   name, partitions) and declares the struct's call handles,
//!   `{Name}Proxy` (calls from inside a transaction, `ctx.entity::<Name>(key)`),
//!   `{Name}Sender` (the same calls sent without awaiting their results,
//!   `ctx.send_to::<Name>(key)`) and `{Name}Request` (requests from
//!   outside, for clients and tests).
//! - `#[functions]` on the struct's impl: every method becomes a registered
//!   function and a method of both handles, with the same argument and
//!   result types, so a call to a missing function or with the wrong
//!   arguments does not compile.
//! - `#[derive(Encode, Decode)]`: a struct or enum as function arguments or
//!   results, in the wire encoding of `docs/protocol.md`.
//!
//! Unsupported signatures are compile errors pointing at the offending
//! tokens, not runtime aborts.
//!
//! [`App`]: ../styx_engine/struct.App.html

mod codec;
mod entity;
mod functions;
mod names;

use proc_macro::TokenStream;

/// Declares a struct as an entity's state. Arguments (all optional):
/// `name = "account"` (the operator's name; default: the struct's name in
/// snake case), `partitions = 16` (default 16) and `required` (a method
/// on an entity never written aborts the transaction, "no account with
/// key 7", instead of seeing `Default`).
///
/// The struct must implement rkyv's `Archive`, `Serialize` and
/// `Deserialize`, and `Default` unless it is `required`. A struct of one
/// field that is a fixed-width number (`struct Account { balance: i64 }`)
/// is stored as that number, on the engine's fast path: the bytes are the
/// ones rkyv would write.
#[proc_macro_attribute]
pub fn entity(args: TokenStream, item: TokenStream) -> TokenStream {
    entity::expand(args.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Turns the `async fn`s of an entity's impl block into registered
/// functions and typed proxy methods. See `styx_engine::Functions`.
#[proc_macro_attribute]
pub fn functions(args: TokenStream, item: TokenStream) -> TokenStream {
    functions::expand(args.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Implements `styx_engine::Encode` for a struct (its fields in order,
/// like a tuple) or an enum (a `u8` variant index, then its fields).
#[proc_macro_derive(Encode)]
pub fn derive_encode(item: TokenStream) -> TokenStream {
    codec::encode(item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Implements `styx_engine::Decode`, the inverse of `#[derive(Encode)]`.
#[proc_macro_derive(Decode)]
pub fn derive_decode(item: TokenStream) -> TokenStream {
    codec::decode(item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
