//! The smallest useful NRI plugin: it sets one environment variable in every container the
//! runtime creates.
//!
//! ```text
//! cargo run -p nri-plugin --example env -- [--socket /var/run/nri/nri.sock] [KEY=VALUE]
//! ```
//!
//! Or copy the binary into the runtime's NRI plugin directory as `50-env`, and the runtime
//! launches it (handing over its socket in `NRI_PLUGIN_SOCKET`).

use std::sync::Arc;

use nri_plugin::api::{Container, ContainerAdjustment, CreateContainerResponse, PodSandbox};
use nri_plugin::{Options, Plugin, PluginResult};

/// Sets `key=value` in every container created.
pub struct EnvPlugin {
    /// The variable's name.
    pub key: String,
    /// Its value.
    pub value: String,
}

impl Plugin for EnvPlugin {
    fn create_container(
        &self,
        _pod: &PodSandbox,
        _container: &Container,
    ) -> PluginResult<CreateContainerResponse> {
        let mut adjust = ContainerAdjustment::default();
        adjust.add_env(&self.key, &self.value);
        Ok(adjust.into())
    }
}

#[allow(dead_code)] // a test that includes this file runs the plugin in process
fn main() {
    let mut args = std::env::args().skip(1);
    let (mut socket, mut pair) = (None, "HELLO_NRI=from-rust".to_string());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--socket" => socket = args.next().map(Into::into),
            _ => pair = a,
        }
    }
    let Some((key, value)) = pair.split_once('=') else {
        eprintln!("usage: env [--socket PATH] [KEY=VALUE]");
        std::process::exit(2);
    };
    let plugin = Arc::new(EnvPlugin {
        key: key.into(),
        value: value.into(),
    });
    let opts = Options::resolve(socket, None, None, "env", "50", |k| std::env::var(k).ok());
    if let Err(e) = opts.and_then(|opts| nri_plugin::run(&opts, plugin)) {
        eprintln!("env: {}", nri_plugin::error::chain(&e));
        std::process::exit(1);
    }
}
