//! The image archive `scripts/image.sh` writes, as podman and skopeo read it.

use std::path::{Path, PathBuf};

use common::helm;
use common::statics::workspace_root;
use serde_json::{json, Value};

use super::image;

/// The archive itself: `podman load` and `skopeo` read it (no registry), and it holds only the
/// two static binaries, the labels and the entrypoint the manifests run.
#[test]
fn the_image_loads_with_podman_and_skopeo_and_holds_only_the_static_binaries() {
    common::runc::require("image", &[("podman", "podman"), ("skopeo", "skopeo")]);
    let archive = image();
    let t = tempfile::tempdir().unwrap();
    let podman = |args: &[&str]| {
        let out = std::process::Command::new("podman")
            .arg("--root")
            .arg(t.path().join("root"))
            .arg("--runroot")
            .arg(t.path().join("run"))
            .args(["--storage-driver", "vfs"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let loaded = podman(&["load", "-i", archive.to_str().unwrap()]);
    assert!(loaded.contains(&helm::image_reference()), "{loaded}");
    let inspect: Value =
        serde_json::from_str(&podman(&["image", "inspect", &helm::image_reference()])).unwrap();
    let config = &inspect[0]["Config"];
    assert_eq!(config["Entrypoint"], json!(["/opt/cpuplan/cpuplan-nri"]));
    let labels = &config["Labels"];
    assert_eq!(labels["org.opencontainers.image.title"], "cpuplan");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    // No IMAGE_SOURCE: no source label, never the build machine's checkout or its remote.
    assert_eq!(
        labels.get("org.opencontainers.image.source"),
        None,
        "{labels}"
    );
    let root = workspace_root().display().to_string();
    assert!(!inspect.to_string().contains(&root), "{inspect}");
    let _ = std::fs::remove_dir_all(t.path().join("root")); // vfs layers, root-owned
    let out = std::process::Command::new("skopeo")
        .args(["inspect", "--raw"])
        .arg(format!("oci-archive:{}", archive.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: Value = serde_json::from_slice(&out.stdout).unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");

    // The layer: the two binaries, static, and the directories above them.
    let outer = std::fs::File::open(archive).unwrap();
    let digest = layers[0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    let mut blob = None;
    for e in tar::Archive::new(outer).entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap() == Path::new("blobs/sha256").join(digest) {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut b).unwrap();
            blob = Some(b);
        }
    }
    let gz = t.path().join("layer.tar.gz");
    std::fs::write(&gz, blob.expect("the layer blob")).unwrap();
    let layer = t.path().join("layer");
    std::fs::create_dir_all(&layer).unwrap();
    let st = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&gz)
        .arg("-C")
        .arg(&layer)
        .status()
        .unwrap();
    assert!(st.success(), "the layer is a gzip tar");
    let mut files = Vec::new();
    for e in walk(&layer) {
        files.push(e.strip_prefix(&layer).unwrap().display().to_string());
    }
    files.sort();
    assert_eq!(
        files,
        [
            "opt/cpuplan/cpuplan",
            "opt/cpuplan/cpuplan-exec",
            "opt/cpuplan/cpuplan-hook",
            "opt/cpuplan/cpuplan-nri"
        ]
    );
    for f in &files {
        assert_eq!(
            cpuplan_hook::elf::interpreter(&layer.join(f)).unwrap(),
            None,
            "{f} is static"
        );
    }
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}
