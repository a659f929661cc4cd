//! `#[entity]`: a struct as an entity's state.

use crate::names;
use proc_macro2::TokenStream;
use quote::quote;
use syn::{ItemStruct, LitInt, LitStr};

/// Partitions of an entity's operator unless `partitions = N` says otherwise.
const PARTITIONS_DEFAULT: u32 = 16;

pub fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let item: ItemStruct = syn::parse2(item)?;
    let mut name: Option<LitStr> = None;
    let mut partitions: Option<LitInt> = None;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            name = Some(meta.value()?.parse()?);
            Ok(())
        } else if meta.path.is_ident("partitions") {
            partitions = Some(meta.value()?.parse()?);
            Ok(())
        } else {
            Err(meta.error("expected `name = \"...\"` or `partitions = N`"))
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
    let proxy = names::proxy(ident);
    let request = names::request(ident);
    let proxy_doc =
        format!("Calls the functions of `{name}` entities from inside a transaction: `ctx.entity::<{ident}>(key)`.");
    let request_doc = format!(
        "Requests to the functions of `{name}` entities from outside the engine (clients, tests): `{request}::new(key)`."
    );
    Ok(quote! {
        #item

        impl ::styx_engine::Entity for #ident {
            const NAME: &'static str = #name;
            const PARTITIONS: u32 = #partitions;
            type Proxy<'a> = #proxy<'a>;

            fn proxy(target: ::styx_engine::EntityRef<'_>) -> #proxy<'_> {
                #proxy(target)
            }
        }

        #[doc = #proxy_doc]
        #vis struct #proxy<'a>(#[doc(hidden)] pub ::styx_engine::EntityRef<'a>);

        #[doc = #request_doc]
        #[derive(Clone, Debug)]
        #vis struct #request(#[doc(hidden)] pub ::styx_engine::Key);

        impl #request {
            #[allow(dead_code)]
            #vis fn new(key: impl ::core::convert::Into<::styx_engine::Key>) -> #request {
                #request(key.into())
            }
        }
    })
}
