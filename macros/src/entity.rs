//! `#[entity]`: a struct as an entity's state.

use crate::names;
use proc_macro2::TokenStream;
use quote::quote;
use syn::{Fields, ItemStruct, LitInt, LitStr, Type};

/// Partitions of an entity's operator unless `partitions = N` says otherwise.
const PARTITIONS_DEFAULT: u32 = 16;

pub fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let item: ItemStruct = syn::parse2(item)?;
    let mut name: Option<LitStr> = None;
    let mut partitions: Option<LitInt> = None;
    let mut required = false;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            name = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("partitions") {
            partitions = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("required") {
            required = true;
            Ok(())
        } else {
            Err(meta.error("expected `name = \"...\"`, `partitions = N` or `required`"))
        }
    });
    syn::parse::Parser::parse2(parser, args)?;
    if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &item.generics,
            "an entity cannot be generic: its functions are registered once, under one operator name",
        ));
    }
    let ident = &item.ident;
    let vis = &item.vis;
    let name = match name {
        Some(n) => {
            let v = n.value();
            if v.is_empty() || v.starts_with("__") || !v.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(syn::Error::new_spanned(
                    n,
                    "an operator name is printable ASCII without spaces and does not start with __",
                ));
            }
            v
        }
        None => names::snake_case(&ident.to_string()),
    };
    let partitions = match partitions {
        Some(p) => {
            let v: u32 = p.base10_parse()?;
            if v == 0 {
                return Err(syn::Error::new_spanned(p, "an operator has at least one partition"));
            }
            v
        }
        None => PARTITIONS_DEFAULT,
    };
    let initial = if required {
        quote!(::core::result::Result::Err(::styx_engine::missing_entity(ctx, #name)))
    } else {
        quote!(::core::result::Result::Ok(<Self as ::core::default::Default>::default()))
    };
    let number = number_field(&item).map(|(field, ty)| {
        quote! {
            #[inline]
            fn load(ctx: &::styx_engine::Ctx) -> ::core::result::Result<::core::option::Option<Self>, ::styx_engine::Abort> {
                ::core::result::Result::Ok(ctx.get::<#ty>()?.map(|v| Self { #field: v }))
            }

            #[inline]
            fn save(&self, ctx: &::styx_engine::Ctx) -> ::core::result::Result<(), ::styx_engine::Abort> {
                ctx.put(&self.#field)
            }
        }
    });
    let proxy = names::proxy(ident);
    let sender = names::sender(ident);
    let request = names::request(ident);
    let client = names::client(ident);
    let client_doc = format!(
        "Calls the functions of one `{name}` entity from a client, each as its own transaction: `{client}::new(&client, key).f(..).await`."
    );
    let proxy_doc = format!(
        "Calls the functions of `{name}` entities from inside a transaction: `ctx.entity::<{ident}>(key).f(..).await`. A call consumes the proxy; clone it (or make another) to call the entity again."
    );
    let sender_doc = format!(
        "Sends calls to the functions of `{name}` entities from inside a transaction, without waiting for their results: `ctx.send_to::<{ident}>(key)`."
    );
    let request_doc = format!(
        "Requests to the functions of `{name}` entities from outside the engine (clients, tests): `{request}::new(key)`."
    );
    Ok(quote! {
        #item

        impl ::styx_engine::Entity for #ident {
            const NAME: &'static str = #name;
            const PARTITIONS: u32 = #partitions;
            type Proxy<'a> = #proxy<'a>;
            type Sender<'a> = #sender<'a>;

            fn proxy(target: ::styx_engine::EntityRef<'_>) -> #proxy<'_> {
                #proxy(target)
            }

            fn sender(target: ::styx_engine::EntityRef<'_>) -> #sender<'_> {
                #sender(target)
            }

            fn initial(ctx: &::styx_engine::Ctx) -> ::core::result::Result<Self, ::styx_engine::Abort> {
                #initial
            }

            #number
        }

        #[doc = #proxy_doc]
        #[derive(Clone)]
        #vis struct #proxy<'a>(#[doc(hidden)] pub ::styx_engine::EntityRef<'a>);

        #[doc = #sender_doc]
        #[derive(Clone)]
        #vis struct #sender<'a>(#[doc(hidden)] pub ::styx_engine::EntityRef<'a>);

        #[doc = #request_doc]
        #[derive(Clone, Debug)]
        #vis struct #request(#[doc(hidden)] pub ::styx_engine::Key);

        impl #request {
            #[allow(dead_code)]
            #vis fn new(key: impl ::core::convert::Into<::styx_engine::Key>) -> #request {
                #request(key.into())
            }
        }

        #[doc = #client_doc]
        #vis struct #client<'c, C: ?Sized> {
            #[doc(hidden)]
            pub client: &'c C,
            #[doc(hidden)]
            pub key: ::styx_engine::Key,
        }

        impl<'c, C: ::styx_engine::Invoker + ?Sized> #client<'c, C> {
            #[allow(dead_code)]
            #vis fn new(client: &'c C, key: impl ::core::convert::Into<::styx_engine::Key>) -> #client<'c, C> {
                #client { client, key: key.into() }
            }
        }
    })
}

/// Fixed-width numbers the engine stores without rkyv's serializer (the
/// engine's `value::primitive`): a struct of one of them archives to the
/// same bytes as the number alone.
const NUMBERS: [&str; 8] = ["i64", "u64", "i32", "u32", "i16", "u16", "f64", "f32"];

/// The only field of `item` (its name, or index for a tuple struct) when it
/// is one fixed-width number written by its plain name, so that the
/// entity loads and saves it on the engine's fast path. A struct with
/// representation attributes keeps rkyv's path.
fn number_field(item: &ItemStruct) -> Option<(syn::Member, &Type)> {
    let mut fields = match &item.fields {
        Fields::Named(f) => f.named.iter(),
        Fields::Unnamed(f) => f.unnamed.iter(),
        Fields::Unit => return None,
    };
    let field = fields.next()?;
    if fields.next().is_some() || !field.attrs.is_empty() {
        return None;
    }
    if item
        .attrs
        .iter()
        .any(|a| a.path().is_ident("rkyv") || a.path().is_ident("repr"))
    {
        return None;
    }
    let Type::Path(p) = &field.ty else { return None };
    let ident = p.path.get_ident()?;
    if p.qself.is_some() || !NUMBERS.iter().any(|n| ident == n) {
        return None;
    }
    let member = match &field.ident {
        Some(name) => syn::Member::Named(name.clone()),
        None => syn::Member::Unnamed(0.into()),
    };
    Some((member, &field.ty))
}
