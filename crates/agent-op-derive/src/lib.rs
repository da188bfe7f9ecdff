//! `#[derive(Merge)]` for [`agent-op`](https://docs.rs/agent-op): makes a state struct
//! merge-able field by field.
//!
//! Use it through `agent-op`, which re-exports it as `agent_op::Merge` (the same name as the
//! trait, like serde's derives) under its default `derive` feature:
//!
//! ```ignore
//! use agent_op::Merge;
//! use agent_op::crdt::{GCounter, GSet};
//!
//! #[derive(Clone, Default, Merge)]
//! struct State {
//!     seen: GSet<String>,
//!     hits: GCounter,
//! }
//! ```
//!
//! The generated code names the trait through the crate the user depends on: `agent-op`
//! (under whatever name `Cargo.toml` gives it), else the `effect-agents` facade, else
//! `::agent_op`. `#[merge(crate = "path")]` names it explicitly, for a crate that re-exports
//! `agent-op` itself:
//!
//! ```ignore
//! #[derive(Clone, Default, my_framework::Merge)]
//! #[merge(crate = "my_framework::agent_op")]
//! struct State { hits: my_framework::agent_op::crdt::GCounter }
//! ```
//!
//! This crate does not depend on `agent-op` itself.

use proc_macro::TokenStream;
use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::{
    Data, DeriveInput, Fields, GenericParam, Ident, Index, Path, parse_macro_input, parse_quote,
};

/// The error for enums and unions, which have no field-by-field join.
const NOT_A_STRUCT: &str =
    "Merge can only be derived for structs: merge each field with its own join";

/// Implements `agent_op::Merge` for a struct by merging each field of `other` into the same
/// field of `self`.
///
/// Works for structs with named fields, tuple structs and unit structs. Every field's type must
/// implement `Merge`; every type parameter of the struct gets a `Merge` bound. The result is a
/// true join (commutative, associative, idempotent) when every field's merge is.
///
/// Enums and unions are rejected: there is no field-by-field join of two different variants.
///
/// `#[merge(crate = "path")]` names the crate that exports the trait (see the
/// [crate docs](crate)).
#[proc_macro_derive(Merge, attributes(merge))]
pub fn derive_merge(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    trait_path(&input)
        .and_then(|merge| expand(input, &merge))
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The path of the `Merge` trait for the crate being compiled.
fn trait_path(input: &DeriveInput) -> syn::Result<Path> {
    if let Some(krate) = crate_attribute(input)? {
        return Ok(parse_quote!(#krate::Merge));
    }
    // `Itself` is also what integration tests and examples of these crates see, where
    // `crate::` would be wrong; both crates declare `extern crate self as <name>` so the
    // absolute path works inside them too.
    let found = [("agent-op", "agent_op"), ("effect-agents", "effect_agents")]
        .into_iter()
        .find_map(|(package, itself)| match crate_name(package) {
            Ok(FoundCrate::Itself) => Some(itself.to_owned()),
            Ok(FoundCrate::Name(name)) => Some(name),
            Err(_) => None,
        });
    let name = Ident::new(found.as_deref().unwrap_or("agent_op"), Span::call_site());
    Ok(parse_quote!(::#name::Merge))
}

/// The path given by `#[merge(crate = "path")]`, if any.
fn crate_attribute(input: &DeriveInput) -> syn::Result<Option<Path>> {
    let mut found = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("merge")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let value: syn::LitStr = meta.value()?.parse()?;
                found = Some(value.parse::<Path>()?);
                Ok(())
            } else {
                Err(meta.error("unknown `merge` option; expected `crate = \"path\"`"))
            }
        })?;
    }
    Ok(found)
}

/// The `impl Merge` for `input`, naming the trait by `merge`, or the error to report.
fn expand(mut input: DeriveInput, merge: &Path) -> syn::Result<TokenStream2> {
    let fields = match &input.data {
        Data::Struct(data) => &data.fields,
        Data::Enum(data) => return Err(syn::Error::new(data.enum_token.span, NOT_A_STRUCT)),
        Data::Union(data) => return Err(syn::Error::new(data.union_token.span, NOT_A_STRUCT)),
    };

    // Mixed-site names cannot clash with anything the user's code names.
    let other = Ident::new("other", Span::mixed_site());
    let bindings: Vec<Ident> = (0..fields.len())
        .map(|i| format_ident!("field{}", i, span = Span::mixed_site()))
        .collect();
    let body = match fields {
        Fields::Named(named) => {
            let names: Vec<&Ident> = named
                .named
                .iter()
                .filter_map(|f| f.ident.as_ref())
                .collect();
            quote! {
                let Self { #(#names: #bindings),* } = #other;
                #(#merge::merge(&mut self.#names, #bindings);)*
            }
        }
        Fields::Unnamed(_) => {
            let indices = (0..fields.len()).map(Index::from);
            quote! {
                let Self(#(#bindings),*) = #other;
                #(#merge::merge(&mut self.#indices, #bindings);)*
            }
        }
        Fields::Unit => quote! {
            let _ = #other;
        },
    };

    for param in &mut input.generics.params {
        if let GenericParam::Type(ty) = param {
            ty.bounds.push(parse_quote!(#merge));
        }
    }
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #merge for #name #ty_generics #where_clause {
            fn merge(&mut self, #other: Self) {
                #body
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(input: &str) -> Result<String, String> {
        let input: DeriveInput = syn::parse_str(input).map_err(|e| e.to_string())?;
        let merge: Path = parse_quote!(::agent_op::Merge);
        expand(input, &merge)
            .map(|tokens| tokens.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn named_fields_merge_one_by_one() {
        let out = expand_str("struct S { a: A, b: B }").unwrap();
        assert!(out.contains("impl :: agent_op :: Merge for S"), "{out}");
        assert!(
            out.contains("let Self { a : field0 , b : field1 } = other"),
            "{out}"
        );
        assert!(out.contains(":: agent_op :: Merge :: merge (& mut self . a , field0)"));
        assert!(out.contains(":: agent_op :: Merge :: merge (& mut self . b , field1)"));
    }

    #[test]
    fn tuple_fields_merge_by_index() {
        let out = expand_str("struct S(A, B);").unwrap();
        assert!(out.contains("let Self (field0 , field1) = other"), "{out}");
        assert!(out.contains(":: agent_op :: Merge :: merge (& mut self . 1 , field1)"));
    }

    #[test]
    fn unit_structs_merge_to_themselves() {
        let out = expand_str("struct S;").unwrap();
        assert!(out.contains("let _ = other"), "{out}");
    }

    #[test]
    fn type_parameters_get_merge_bounds() {
        let out = expand_str("struct S<'a, T: Clone, const N: usize> where T: Send { a: &'a T }")
            .unwrap();
        assert!(
            out.contains("impl < 'a , T : Clone + :: agent_op :: Merge , const N : usize >"),
            "{out}"
        );
        assert!(out.contains("for S < 'a , T , N > where T : Send"), "{out}");
    }

    #[test]
    fn the_crate_attribute_names_the_trait() {
        let input: DeriveInput =
            syn::parse_str(r#"#[merge(crate = "my::reexport")] struct S { a: A }"#).unwrap();
        let merge = trait_path(&input).unwrap();
        let out = expand(input, &merge).unwrap().to_string();
        assert!(out.contains("impl my :: reexport :: Merge for S"), "{out}");
        let bad: DeriveInput = syn::parse_str(r#"#[merge(krate = "x")] struct S;"#).unwrap();
        let Err(err) = trait_path(&bad) else {
            panic!("an unknown option was accepted");
        };
        let err = err.to_string();
        assert!(err.contains("unknown `merge` option"), "{err}");
    }

    #[test]
    fn enums_and_unions_are_rejected() {
        for input in ["enum E { A, B }", "union U { a: u8, b: u16 }"] {
            assert_eq!(expand_str(input).unwrap_err(), NOT_A_STRUCT);
        }
    }
}
