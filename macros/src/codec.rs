//! `#[derive(Encode, Decode)]`: structs and enums in the wire encoding of
//! arguments and results (`docs/protocol.md`). A struct encodes as the
//! tuple of its fields in declaration order; an enum as a `u8` variant
//! index (declaration order, from 0) followed by that variant's fields.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, parse_quote};

/// Variants of an enum at most: the index is one byte.
const VARIANTS_MAX: usize = 256;

fn with_bounds(input: &mut DeriveInput, bound: TokenStream) {
    let params: Vec<_> = input.generics.type_params().map(|p| p.ident.clone()).collect();
    let where_clause = input.generics.make_where_clause();
    for p in params {
        where_clause.predicates.push(parse_quote!(#p: #bound));
    }
}

/// Bindings of a variant's or struct's fields (`f0, f1, …`) and the
/// pattern that binds them.
fn bindings(fields: &Fields) -> (Vec<proc_macro2::Ident>, TokenStream) {
    let names: Vec<_> = (0..fields.len()).map(|i| format_ident!("__f{}", i)).collect();
    let pattern = match fields {
        Fields::Named(named) => {
            let idents = named.named.iter().map(|f| f.ident.as_ref().expect("named"));
            quote!({ #(#idents: #names),* })
        }
        Fields::Unnamed(_) => quote!(( #(#names),* )),
        Fields::Unit => quote!(),
    };
    (names, pattern)
}

fn check_enum(input: &DeriveInput) -> syn::Result<()> {
    match &input.data {
        Data::Enum(e) if e.variants.len() > VARIANTS_MAX => Err(syn::Error::new_spanned(
            &input.ident,
            format!("an enum argument has at most {VARIANTS_MAX} variants (its index is one byte)"),
        )),
        Data::Union(u) => Err(syn::Error::new_spanned(
            u.union_token,
            "unions cannot be arguments or results: derive Encode on a struct or enum",
        )),
        _ => Ok(()),
    }
}

/// `wire_type` of the derived trait (`Encode` or `Decode`): the type's
/// definition, entered once in the schema's types.
fn wire_type(input: &DeriveInput, which: TokenStream) -> TokenStream {
    let fields = |fields: &Fields| {
        let items = fields.iter().map(|f| {
            let ty = &f.ty;
            let name = match &f.ident {
                Some(n) => {
                    let n = n.to_string();
                    quote!(::core::option::Option::Some(::std::string::String::from(#n)))
                }
                None => quote!(::core::option::Option::None),
            };
            quote! {
                ::styx_engine::Field { name: #name, ty: <#ty as #which>::wire_type(types) }
            }
        });
        quote!(::std::vec![#(#items),*])
    };
    let def = match &input.data {
        Data::Struct(s) => {
            let fields = fields(&s.fields);
            quote!(::styx_engine::TypeDef::Struct(#fields))
        }
        Data::Enum(e) => {
            let variants = e.variants.iter().map(|v| {
                let name = v.ident.to_string();
                let fields = fields(&v.fields);
                quote! {
                    ::styx_engine::Variant { name: ::std::string::String::from(#name), fields: #fields }
                }
            });
            quote!(::styx_engine::TypeDef::Enum(::std::vec![#(#variants),*]))
        }
        Data::Union(_) => unreachable!("checked"),
    };
    quote! {
        fn wire_type(types: &mut ::styx_engine::Types) -> ::styx_engine::WireType {
            ::styx_engine::WireType::named::<Self>(types, |types| #def)
        }
    }
}

pub fn encode(item: TokenStream) -> syn::Result<TokenStream> {
    let mut input: DeriveInput = syn::parse2(item)?;
    check_enum(&input)?;
    with_bounds(&mut input, quote!(::styx_engine::Encode));
    let ident = &input.ident;
    let body = match &input.data {
        Data::Struct(s) => {
            let (names, pattern) = bindings(&s.fields);
            quote! {
                let #ident #pattern = self;
                #(::styx_engine::Encode::encode(#names, w);)*
            }
        }
        Data::Enum(e) => {
            let arms = e.variants.iter().enumerate().map(|(i, v)| {
                let index = i as u8;
                let variant = &v.ident;
                let (names, pattern) = bindings(&v.fields);
                quote! {
                    #ident::#variant #pattern => {
                        w.put(&[#index]);
                        #(::styx_engine::Encode::encode(#names, w);)*
                    }
                }
            });
            quote! {
                match self {
                    #(#arms)*
                }
            }
        }
        Data::Union(_) => unreachable!("checked"),
    };
    let wire_type = wire_type(&input, quote!(::styx_engine::Encode));
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics ::styx_engine::Encode for #ident #ty_generics #where_clause {
            fn encode(&self, w: &mut ::styx_engine::Writer) {
                #body
            }

            #wire_type
        }
    })
}

pub fn decode(item: TokenStream) -> syn::Result<TokenStream> {
    let mut input: DeriveInput = syn::parse2(item)?;
    check_enum(&input)?;
    with_bounds(&mut input, quote!(::styx_engine::Decode));
    let ident = &input.ident;
    let build = |path: TokenStream, fields: &Fields| {
        let (names, pattern) = bindings(fields);
        quote! {{
            #(let #names = ::styx_engine::Decode::decode(input)?;)*
            #path #pattern
        }}
    };
    let body = match &input.data {
        Data::Struct(s) => {
            let value = build(quote!(#ident), &s.fields);
            quote!(::core::result::Result::Ok(#value))
        }
        Data::Enum(e) => {
            let arms = e.variants.iter().enumerate().map(|(i, v)| {
                let index = i as u8;
                let variant = &v.ident;
                let value = build(quote!(#ident::#variant), &v.fields);
                quote!(#index => ::core::result::Result::Ok(#value),)
            });
            quote! {
                match <u8 as ::styx_engine::Decode>::decode(input)? {
                    #(#arms)*
                    tag => ::core::result::Result::Err(::styx_engine::DecodeError::Tag(tag)),
                }
            }
        }
        Data::Union(_) => unreachable!("checked"),
    };
    let wire_type = wire_type(&input, quote!(::styx_engine::Decode));
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics ::styx_engine::Decode for #ident #ty_generics #where_clause {
            fn decode(input: &mut &[u8]) -> ::core::result::Result<Self, ::styx_engine::DecodeError> {
                #body
            }

            #wire_type
        }
    })
}
