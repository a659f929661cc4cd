//! `#[functions]`: an entity's `async fn`s as registered functions and
//! typed proxy methods.
//!
//! For each method the expansion registers a closure on the `App` that
//! loads the entity's state (`Entity::initial` when it has none), runs the
//! method on it, and writes it back if the method takes `&mut self` —
//! unless a nested call changed the entity meanwhile, which aborts with
//! `Reentrant` rather than lose that change (a
//! method without self gets only the `&Ctx` and manages the state itself);
//! and adds a
//! method of the same name and argument types to the entity's `{Name}Proxy`
//! (returning `Call<R>`), `{Name}Sender` (returning `Result<(), Abort>`: the
//! call is sent, its result never awaited) and `{Name}Request` (returning
//! `TypedRequest<R>`).
//! Arguments travel as the tuple of the method's arguments, so a one-argument
//! function's payload is that argument's encoding, as with closures.

use crate::names;
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, ImplItem, ImplItemFn, ItemImpl, Pat, PathArguments, ReturnType, Type};

/// Arguments of one function at most: the codec's tuples go up to eight.
const ARGS_MAX: usize = 8;

/// How a method sees its entity's state.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Receiver {
    /// `&self`: loaded, not written back.
    Shared,
    /// `&mut self`: loaded, written back after `Ok`.
    Mutable,
    /// No self: the method reads and writes the state through its `&Ctx`
    /// (`ctx.read` for a zero-copy look at a large row, a missing row as
    /// `None`), and is still called through the typed proxy.
    Ctx,
}

/// One method, checked.
struct Method<'a> {
    item: &'a ImplItemFn,
    receiver: Receiver,
    ctx: bool,
    /// Argument names (the pattern's identifier, else `argN`) and types.
    args: Vec<(Ident, &'a Type)>,
    result: &'a Type,
}

/// What every generated method repeats of `m`: its name, visibility, doc
/// comments, and argument names and types.
struct Parts<'a> {
    method: &'a Ident,
    vis: &'a syn::Visibility,
    docs: Vec<&'a syn::Attribute>,
    names: Vec<&'a Ident>,
    tys: Vec<&'a Type>,
}

impl Method<'_> {
    fn parts(&self) -> Parts<'_> {
        Parts {
            method: &self.item.sig.ident,
            vis: &self.item.vis,
            docs: self.item.attrs.iter().filter(|a| a.path().is_ident("doc")).collect(),
            names: self.args.iter().map(|(n, _)| n).collect(),
            tys: self.args.iter().map(|(_, t)| *t).collect(),
        }
    }
}

pub fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    if !args.is_empty() {
        return Err(syn::Error::new_spanned(args, "#[functions] takes no arguments"));
    }
    let block: ItemImpl = syn::parse2(item)?;
    if let Some((_, path, _)) = &block.trait_ {
        return Err(syn::Error::new_spanned(
            path,
            "#[functions] goes on the entity's own impl block, not a trait impl",
        ));
    }
    if !block.generics.params.is_empty() || block.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &block.generics,
            "an entity's impl cannot be generic",
        ));
    }
    let ident = entity_ident(&block.self_ty)?;
    let mut methods = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for item in &block.items {
        let checked = match item {
            ImplItem::Fn(f) => method(f),
            other => Err(syn::Error::new_spanned(
                other,
                "#[functions] holds only the entity's async fns; put other items in another impl block",
            )),
        };
        match checked {
            Ok(m) => methods.push(m),
            Err(e) => match &mut errors {
                Some(all) => all.combine(e),
                None => errors = Some(e),
            },
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }
    let proxy = names::proxy(&ident);
    let sender = names::sender(&ident);
    let request = names::request(&ident);
    let client = names::client(&ident);
    let client_methods = methods.iter().map(|m| client_method(&request, m));
    let registrations = methods.iter().map(registration);
    let checks = methods.iter().map(type_checks);
    let proxy_methods = methods
        .iter()
        .enumerate()
        .map(|(i, m)| proxy_method(&ident, i, m, false));
    let request_methods = methods
        .iter()
        .enumerate()
        .map(|(i, m)| proxy_method(&ident, i, m, true));
    let send_methods = methods.iter().enumerate().map(|(i, m)| send_method(i, m));
    Ok(quote! {
        #block

        impl ::styx_engine::Functions for #ident {
            fn register(app: &mut ::styx_engine::App, op: ::styx_engine::OpId) {
                #(#registrations)*
            }
        }

        #(#checks)*

        #[allow(dead_code)]
        impl<'a> #proxy<'a> {
            #(#proxy_methods)*
        }

        #[allow(dead_code)]
        impl<'a> #sender<'a> {
            #(#send_methods)*
        }

        #[allow(dead_code)]
        impl #request {
            #(#request_methods)*
        }

        #[allow(dead_code)]
        impl<'c, C: ::styx_engine::Invoker + ?Sized> #client<'c, C> {
            #(#client_methods)*
        }
    })
}

/// The entity's name from the impl's self type (`Account`).
fn entity_ident(ty: &Type) -> syn::Result<Ident> {
    if let Type::Path(p) = ty
        && p.qself.is_none()
        && let Some(last) = p.path.segments.last()
        && last.arguments.is_empty()
    {
        return Ok(last.ident.clone());
    }
    Err(syn::Error::new_spanned(
        ty,
        "#[functions] goes on `impl Entity`, where Entity is a struct marked #[entity]",
    ))
}

fn method(f: &ImplItemFn) -> syn::Result<Method<'_>> {
    let sig = &f.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "an entity function must be `async fn`; put helper functions in another impl block",
        ));
    }
    if let Some(t) = &sig.constness {
        return Err(syn::Error::new_spanned(t, "an entity function cannot be const"));
    }
    if let Some(t) = &sig.unsafety {
        return Err(syn::Error::new_spanned(t, "an entity function cannot be unsafe"));
    }
    if let Some(t) = &sig.abi {
        return Err(syn::Error::new_spanned(t, "an entity function cannot have an ABI"));
    }
    if let Some(t) = &sig.variadic {
        return Err(syn::Error::new_spanned(t, "an entity function cannot be variadic"));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "an entity function cannot be generic: its argument and result types are fixed when it is registered",
        ));
    }
    let name = sig.ident.to_string();
    if name.starts_with("__") {
        return Err(syn::Error::new_spanned(
            &sig.ident,
            "function names starting with __ are reserved for built-ins",
        ));
    }
    let mut inputs = sig.inputs.iter().peekable();
    let receiver = match inputs.peek() {
        Some(FnArg::Receiver(r)) if r.colon_token.is_none() && r.reference.is_some() => {
            let receiver = if r.mutability.is_some() {
                Receiver::Mutable
            } else {
                Receiver::Shared
            };
            inputs.next();
            receiver
        }
        Some(FnArg::Receiver(r)) => {
            return Err(syn::Error::new_spanned(
                r,
                "an entity function takes `&self` (reads the state) or `&mut self` (may change it)",
            ));
        }
        Some(FnArg::Typed(pt)) if is_ctx(&pt.ty) => Receiver::Ctx,
        _ => {
            return Err(syn::Error::new(
                sig.paren_token.span.join(),
                "an entity function takes `&self` or `&mut self` first (it runs on one entity's state), or `ctx: &Ctx` first (it reads and writes the state itself)",
            ));
        }
    };
    let mut ctx = false;
    let mut args = Vec::new();
    for (i, input) in inputs.enumerate() {
        let FnArg::Typed(pt) = input else {
            unreachable!("self is only first")
        };
        if is_ctx(&pt.ty) {
            if i != 0 {
                return Err(syn::Error::new_spanned(
                    &pt.ty,
                    "the `&Ctx` argument comes right after self",
                ));
            }
            ctx = true;
            continue;
        }
        match &*pt.ty {
            Type::Reference(_) => {
                return Err(syn::Error::new_spanned(
                    &pt.ty,
                    "arguments are decoded from the request, so they are owned types (String, not &str); only `&Ctx` is borrowed",
                ));
            }
            Type::ImplTrait(_) | Type::Infer(_) | Type::TraitObject(_) => {
                return Err(syn::Error::new_spanned(
                    &pt.ty,
                    "an argument type must be a concrete type that implements Encode and Decode",
                ));
            }
            _ => {}
        }
        let name = match &*pt.pat {
            Pat::Ident(p) if p.subpat.is_none() => p.ident.clone(),
            _ => format_ident!("arg{}", args.len()),
        };
        args.push((name, &*pt.ty));
    }
    if args.len() > ARGS_MAX {
        return Err(syn::Error::new_spanned(
            &sig.inputs,
            format!(
                "an entity function takes at most {ARGS_MAX} arguments besides self and ctx; group them in a struct that derives Encode and Decode"
            ),
        ));
    }
    let result = match &sig.output {
        ReturnType::Type(_, ty) => result_type(ty),
        ReturnType::Default => None,
    }
    .ok_or_else(|| {
        syn::Error::new(
            match &sig.output {
                ReturnType::Type(_, ty) => ty.span(),
                ReturnType::Default => sig.paren_token.span.join(),
            },
            "an entity function returns `Result<T, Abort>`: an Err aborts the whole transaction",
        )
    })?;
    Ok(Method {
        item: f,
        receiver,
        ctx,
        args,
        result,
    })
}

/// Whether `ty` is `&Ctx` (by the path's last segment: `&Ctx`, `&styx::Ctx`).
fn is_ctx(ty: &Type) -> bool {
    if let Type::Reference(r) = ty
        && let Type::Path(p) = &*r.elem
        && let Some(last) = p.path.segments.last()
    {
        return last.ident == "Ctx" && r.mutability.is_none();
    }
    false
}

/// `T` of `Result<T, E>` (or of an alias `Result<T>`).
fn result_type(ty: &Type) -> Option<&Type> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(a) = &last.arguments else {
        return None;
    };
    match a.args.first()? {
        GenericArgument::Type(t) => Some(t),
        _ => None,
    }
}

/// `app.function(op, "name", closure)` and its signature for the schema.
fn registration(m: &Method<'_>) -> TokenStream {
    let method = &m.item.sig.ident;
    let name = method.to_string();
    let binds: Vec<Ident> = (0..m.args.len()).map(|i| format_ident!("__arg{}", i)).collect();
    let tys: Vec<&Type> = m.args.iter().map(|(_, t)| *t).collect();
    let ctx_arg = m.ctx.then(|| quote!(&__ctx,));
    let load = quote! {
        match <Self as ::styx_engine::Entity>::load(&__ctx)? {
            ::core::option::Option::Some(state) => state,
            ::core::option::Option::None => <Self as ::styx_engine::Entity>::initial(&__ctx)?,
        }
    };
    let (state, call, write) = match m.receiver {
        Receiver::Mutable => (
            quote! {
                let mut __state: Self = #load;
                let __mark = __ctx.__read_mark();
            },
            quote!(Self::#method(&mut __state, #ctx_arg #(#binds),*)),
            quote! {
                __ctx.__write_back_check(__mark)?;
                <Self as ::styx_engine::Entity>::save(&__state, &__ctx)?;
            },
        ),
        Receiver::Shared => (
            quote!(let __state: Self = #load;),
            quote!(Self::#method(&__state, #ctx_arg #(#binds),*)),
            quote!(),
        ),
        Receiver::Ctx => (quote!(), quote!(Self::#method(#ctx_arg #(#binds),*)), quote!()),
    };
    let args_text = m
        .args
        .iter()
        .map(|(n, t)| format!("{n}: {}", names::type_text(t)))
        .collect::<Vec<_>>()
        .join(", ");
    let result_text = names::type_text(m.result);
    let arg_names: Vec<String> = m.args.iter().map(|(n, _)| n.to_string()).collect();
    quote! {
        {
            let id = app.function(
                op,
                #name,
                |__ctx: ::styx_engine::Ctx, (#(#binds,)*): (#(#tys,)*)| async move {
                    #state
                    let __result = #call.await?;
                    #write
                    ::core::result::Result::Ok::<_, ::styx_engine::Abort>(__result)
                },
            );
            app.set_signature(id, ::styx_engine::Signature::named(#args_text, #result_text, &[#(#arg_names),*]));
        }
    }
}

/// Compile-time checks whose errors point at the offending argument or
/// result type rather than at the generated closure.
fn type_checks(m: &Method<'_>) -> TokenStream {
    let types = m.args.iter().map(|(_, t)| *t).chain(std::iter::once(m.result));
    let checks = types.map(|t| {
        quote_spanned! {t.span()=>
            __styx_codec::<#t>();
        }
    });
    let span = Span::call_site();
    quote_spanned! {span=>
        const _: () = {
            fn __styx_codec<T: ::styx_engine::Encode + ::styx_engine::Decode>() {}
            #[allow(dead_code)]
            fn __styx_check() {
                #(#checks)*
            }
        };
    }
}

/// The method of `{Name}Proxy` (a `Call<R>`) or `{Name}Request` (a
/// `TypedRequest<R>`) that calls `m`.
fn proxy_method(entity: &Ident, nth: usize, m: &Method<'_>, request: bool) -> TokenStream {
    let nth = nth as u16;
    let Parts {
        method,
        vis,
        docs,
        names,
        tys,
    } = m.parts();
    let name = method.to_string();
    let result = m.result;
    if request {
        quote! {
            #(#docs)*
            #vis fn #method(&self, #(#names: #tys),*) -> ::styx_engine::TypedRequest<#result> {
                ::styx_engine::TypedRequest::new(<#entity as ::styx_engine::Entity>::NAME, #name, self.0.clone(), &(#(#names,)*))
            }
        }
    } else {
        quote! {
            #(#docs)*
            #[inline]
            #vis fn #method(self, #(#names: #tys),*) -> ::styx_engine::Call<#result> {
                self.0.call_method(#nth, #name, &(#(#names,)*))
            }
        }
    }
}

/// The method of `{Name}Sender` that sends `m` without waiting for its
/// result ([`Ctx::send`]: the call is still part of the transaction).
fn send_method(nth: usize, m: &Method<'_>) -> TokenStream {
    let nth = nth as u16;
    let Parts {
        method,
        vis,
        docs,
        names,
        tys,
    } = m.parts();
    let name = method.to_string();
    quote! {
        #(#docs)*
        #[inline]
        #vis fn #method(self, #(#names: #tys),*) -> ::core::result::Result<(), ::styx_engine::Abort> {
            self.0.send_method(#nth, #name, &(#(#names,)*))
        }
    }
}

/// The method of `{Name}Client` that runs `m` as its own transaction
/// through the client's `styx_engine::Invoker`.
fn client_method(request: &Ident, m: &Method<'_>) -> TokenStream {
    let Parts {
        method,
        vis,
        docs,
        names,
        tys,
    } = m.parts();
    let result = m.result;
    quote! {
        #(#docs)*
        #vis async fn #method(&self, #(#names: #tys),*) -> ::core::result::Result<#result, C::Error> {
            let request = #request(self.key.clone()).#method(#(#names),*);
            ::styx_engine::Invoker::invoke(self.client, &request).await
        }
    }
}
