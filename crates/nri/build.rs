//! Compiles `proto/nri.proto` (NRI's API) to Rust with prost, parsing it with protox (no
//! `protoc`), and lists the methods of its `Plugin` service for the ttrpc server.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/nri.proto");
    let fds = protox::compile(["nri.proto"], ["proto"])?;
    let mut methods = String::from(
        "/// The methods of NRI's `Plugin` service, in the order `proto/nri.proto` declares them.\n\
         pub const PLUGIN_METHODS: &[&str] = &[\n",
    );
    for file in &fds.file {
        for service in file.service.iter().filter(|s| s.name() == "Plugin") {
            for m in &service.method {
                writeln!(methods, "    {:?},", m.name())?;
            }
        }
    }
    methods.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("plugin_methods.rs"), methods)?;
    prost_build::Config::new()
        .btree_map(["."])
        .compile_fds(fds)?;
    Ok(())
}
