//! Write [NRI](https://github.com/containerd/nri) plugins for containerd and CRI-O in Rust.
//!
//! A plugin is a type implementing [`Plugin`]: `create_container` is the one required method,
//! every other event has a default, and [`Plugin::events`] says which events the runtime sends.
//! [`run`] connects it to the runtime (its NRI socket, or the socket a runtime that launched the
//! plugin hands over in `NRI_PLUGIN_SOCKET`), registers, serves NRI's `Plugin` service, and
//! reconnects with backoff until SIGTERM or SIGINT.
//!
//! ```no_run
//! use nri_plugin::{api, Options, Plugin, PluginResult};
//!
//! struct Hello;
//!
//! impl Plugin for Hello {
//!     fn create_container(
//!         &self,
//!         _pod: &api::PodSandbox,
//!         _container: &api::Container,
//!     ) -> PluginResult<api::CreateContainerResponse> {
//!         let mut adjust = api::ContainerAdjustment::default();
//!         adjust.add_env("HELLO", "from-rust");
//!         Ok(adjust.into())
//!     }
//! }
//!
//! fn main() -> Result<(), nri_plugin::Error> {
//!     let opts = Options::from_env("hello", "50", |k| std::env::var(k).ok())?;
//!     nri_plugin::run(&opts, std::sync::Arc::new(Hello))
//! }
//! ```
//!
//! Files: [`api`] (NRI's messages, generated from `proto/nri.proto`), [`adjust`] (builders for
//! the answers), [`events`] (the subscription), [`version`] (what each runtime's NRI knows),
//! [`plugin`] (the trait), [`service`] (the ttrpc `Plugin` service), [`mux`] (NRI's connection
//! multiplexer), [`transport`] (ttrpc over the mux, registration), [`stub`] (connect, reconnect,
//! signals), [`options`] (where the runtime is and who the plugin is), [`runtime`] (the
//! runtime's end, for testing a plugin over the real protocol), [`stopwatch`] (a request's time
//! on its thread: wall clock, CPU, preemptions), [`error`].
#![warn(missing_docs)]

pub mod adjust;
pub mod api;
pub mod error;
pub mod events;
pub mod mux;
pub mod options;
pub mod plugin;
pub mod runtime;
pub mod service;
pub mod stopwatch;
pub mod stub;
pub mod transport;
pub mod version;

pub use error::Error;
pub use events::EventMask;
pub use options::{Endpoint, Options};
pub use plugin::{Lifecycle, Plugin, PluginError, PluginResult};
/// The protobuf crate the messages are built with (for encoding and decoding them).
pub use prost;
pub use service::Service;
pub use stub::{run, spawn, without_stop_signals, Running};
pub use version::NRI_VERSION;
