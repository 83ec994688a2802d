//! NRI's messages (`nri.pkg.api.v1alpha1`, NRI v0.12), generated at build time from
//! `proto/nri.proto` by prost: names are NRI's in Rust case (`NRI_version` is `nri_version`),
//! maps are `BTreeMap`s, enums are `i32` fields with a Rust `enum` beside them.
#![allow(
    missing_docs,
    clippy::doc_lazy_continuation,
    clippy::large_enum_variant
)]

include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
include!(concat!(env!("OUT_DIR"), "/plugin_methods.rs"));

/// The ttrpc service the runtime serves to the plugin.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// The ttrpc service the plugin serves to the runtime.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
