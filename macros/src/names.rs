//! Names shared by the macros: the handles an entity's two macros agree
//! on, operator names, and types as the schema prints them.

use proc_macro2::Ident;
use quote::{ToTokens, format_ident};

/// The in-transaction proxy of entity `ty`: `AccountProxy`.
pub fn proxy(ty: &Ident) -> Ident {
    format_ident!("{}Proxy", ty)
}

/// The in-transaction sender of entity `ty` (calls without waiting for
/// the result): `AccountSender`.
pub fn sender(ty: &Ident) -> Ident {
    format_ident!("{}Sender", ty)
}

/// The out-of-transaction request builder of entity `ty`: `AccountRequest`.
pub fn request(ty: &Ident) -> Ident {
    format_ident!("{}Request", ty)
}

/// The client stub of entity `ty`: `AccountClient`.
pub fn client(ty: &Ident) -> Ident {
    format_ident!("{}Client", ty)
}

/// `GuestBook` -> `guest_book`.
pub fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A type as written, with the spacing of Rust source (`Vec<String>`, not
/// `Vec < String >`), for the schema.
pub fn type_text(ty: &impl ToTokens) -> String {
    let raw = ty.to_token_stream().to_string();
    let mut out = String::with_capacity(raw.len());
    let chars: Vec<char> = raw.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let before = i.checked_sub(1).map(|j| chars[j]);
            let after = chars.get(i + 1).copied();
            let tight = |c: Option<char>| matches!(c, Some('<' | '>' | ':' | '&' | '(' | ')' | '[' | ']'));
            if tight(after) && !matches!(before, Some(',' | ';')) || matches!(after, Some(',' | ';')) {
                continue;
            }
            if matches!(before, Some('<' | ':' | '&' | '(' | '[')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_splits_words() {
        assert_eq!(snake_case("GuestBook"), "guest_book");
        assert_eq!(snake_case("Account"), "account");
    }

    #[test]
    fn types_print_like_source() {
        let ty: syn::Type = syn::parse_str("Vec<(u64, Option<String>)>").unwrap();
        assert_eq!(type_text(&ty), "Vec<(u64, Option<String>)>");
        let ty: syn::Type = syn::parse_str("std::collections::BTreeMap<u8, [u8; 4]>").unwrap();
        assert_eq!(type_text(&ty), "std::collections::BTreeMap<u8, [u8; 4]>");
        let ty: syn::Type = syn::parse_str("&'static str").unwrap();
        assert_eq!(type_text(&ty), "&'static str");
    }
}
