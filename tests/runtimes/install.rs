//! `cpuplan install` / `uninstall` into a temp prefix and hooks dir, and a real podman
//! run that uses what install wrote. install is given the static build (scripts/build-static.sh
//! --debug): it refuses the dynamic one unless --allow-dynamic.

use std::path::{Path, PathBuf};
use std::process::Command;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::podman::Podman;
use common::runc::{cpuplan_bin, fixtures, hook_bin, line_value};
use common::statics::{static_cpuplan, static_hook};
use common::{hookbin, hostlock};
use serde_json::{json, Value};

struct Installed {
    tmp: tempfile::TempDir,
}

impl Installed {
    fn new() -> Installed {
        Installed {
            tmp: tempfile::Builder::new()
                .prefix("cpuplan-install-")
                .tempdir()
                .unwrap(),
        }
    }
    fn prefix(&self) -> PathBuf {
        self.tmp.path().join("prefix")
    }
    fn hooks_dir(&self) -> PathBuf {
        self.tmp.path().join("hooks.d")
    }
    fn config(&self) -> PathBuf {
        self.tmp.path().join("etc/cpuplan/hook.json")
    }
    fn binary(&self) -> PathBuf {
        self.prefix().join("libexec/cpuplan/cpuplan-hook")
    }
    /// `STATIC-CPUPLAN --config CONFIG SUB --prefix P --hooks-dir H [extra]`: (status, stdout, stderr).
    fn run(&self, sub: &str, extra: &[&str]) -> (i32, String, String) {
        self.run_bin(&static_cpuplan(), sub, extra)
    }
    /// [`Installed::run`] with the binary `bin`.
    fn run_bin(&self, bin: &Path, sub: &str, extra: &[&str]) -> (i32, String, String) {
        hookbin::run(
            Command::new(bin)
                .arg("--config")
                .arg(self.config())
                .arg(sub)
                .arg("--prefix")
                .arg(self.prefix())
                .arg("--hooks-dir")
                .arg(self.hooks_dir())
                .args(extra),
        )
    }
    /// Every file (not directory) under the temp dir, relative.
    fn files(&self) -> Vec<String> {
        fn walk(d: &Path, base: &Path, acc: &mut Vec<String>) {
            for e in std::fs::read_dir(d).unwrap().flatten() {
                let p = e.path();
                if e.file_type().unwrap().is_dir() {
                    walk(&p, base, acc);
                } else {
                    acc.push(p.strip_prefix(base).unwrap().display().to_string());
                }
            }
        }
        let mut acc = Vec::new();
        walk(self.tmp.path(), self.tmp.path(), &mut acc);
        acc.sort();
        acc
    }
    fn json(&self, name: &str) -> Value {
        serde_json::from_slice(&std::fs::read(self.hooks_dir().join(name)).unwrap()).unwrap()
    }
}

fn repo_file(rel: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    serde_json::from_slice(&std::fs::read(&p).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn install_then_podman_uses_it_and_uninstall_removes_it() {
    let i = Installed::new();
    std::fs::create_dir_all(i.config().parent().unwrap()).unwrap();
    std::fs::create_dir_all(i.tmp.path().join("var")).unwrap();
    let op = common::operator_dir::tempdir();
    let cfg = json!({
        "step_thread_core": "auto",
        "topology_root": fixtures().join("e2e-host"),
        "claims_dir": op.path().join("claims"),
        "log": i.tmp.path().join("var/hook.log"),
    });
    std::fs::write(i.config(), serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();

    let (rc, out, err) = i.run("install", &["--with-precreate"]);
    assert_eq!(rc, 0, "install: {err}");
    assert!(
        out.contains(&format!("installed {}", i.binary().display())),
        "{out}"
    );
    assert!(out.contains("kept the existing config"), "{out}");
    assert_eq!(
        std::fs::read(i.binary()).unwrap(),
        std::fs::read(static_hook()).unwrap(),
        "the installed binary is this (static) build"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(i.binary()).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o755);
    // The hooks.d files are the repo's with the absolute path and the --config.
    for (name, stage) in [
        ("cpuplan.json", "hook"),
        ("cpuplan-precreate.json", "precreate"),
    ] {
        let written = i.json(name);
        let mut repo = repo_file(&format!("hooks/oci/{name}"));
        repo["hook"]["path"] = json!(i.binary());
        repo["hook"]["args"] = json!(["cpuplan-hook", "--config", i.config(), stage]);
        assert_eq!(written, repo, "{name}");
    }
    // Idempotent: a second install changes nothing.
    let before: Vec<_> = i
        .files()
        .iter()
        .map(|f| (f.clone(), std::fs::read(i.tmp.path().join(f)).unwrap()))
        .collect();
    let (rc, _, err) = i.run("install", &["--with-precreate"]);
    assert_eq!(rc, 0, "second install: {err}");
    let after: Vec<_> = i
        .files()
        .iter()
        .map(|f| (f.clone(), std::fs::read(i.tmp.path().join(f)).unwrap()))
        .collect();
    assert!(before == after, "a second install changed files");

    // A real podman whose hooks dir is the one install wrote.
    {
        let p = Podman::with_hooks_dir("inst", Some(&i.hooks_dir()));
        let script = r#"echo "cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
echo "env_omp=$OMP_NUM_THREADS"; cat /run/cpuplan/plan.env"#;
        let init = p.init(
            "inst",
            &["--cpus", "1", "--env", "NVIDIA_VISIBLE_DEVICES=0"],
            script,
        );
        assert_eq!(init.rc, 0, "podman create/init: {}", init.err);
        let run = p.start("inst");
        assert_eq!(run.rc, 0, "podman start: {}", run.err);
        assert!(run.out.contains("cpus=1\n"), "{}", run.out);
        assert!(run.out.contains("env_omp=1\n"), "precreate: {}", run.out);
        assert_eq!(
            line_value(&run.out, "CPUPLAN_MASK"),
            Some("'1'"),
            "{}",
            run.out
        );
        assert_eq!(
            line_value(&run.out, "CPUPLAN_DEVICES"),
            Some("'0000:3b:00.0'")
        );
        let log = std::fs::read_to_string(i.tmp.path().join("var/hook.log")).unwrap();
        assert!(log.contains("precreate:"), "{log}");
        assert!(log.contains("gpus [0000:3b:00.0] mask 1"), "{log}");
    } // the container is removed (its poststop hook runs) before uninstall

    let (rc, out, err) = i.run("uninstall", &[]);
    assert_eq!(rc, 0, "uninstall: {err}");
    assert!(
        out.contains(&format!(
            "kept the config {}: install did not write it",
            i.config().display()
        )),
        "{out}"
    );
    let left: Vec<String> = i
        .files()
        .into_iter()
        .filter(|f| !f.starts_with("var/"))
        .collect();
    assert_eq!(
        left,
        ["etc/cpuplan/hook.json"],
        "only the edited config stays"
    );
    assert!(!i.prefix().join("libexec/cpuplan").exists());
}

#[test]
fn a_default_install_writes_the_default_config_and_uninstall_leaves_no_file() {
    let i = Installed::new();
    let (rc, out, err) = i.run("install", &[]);
    assert_eq!(rc, 0, "install: {err}");
    assert!(out.contains("wrote the default config"), "{out}");
    assert!(!i.hooks_dir().join("cpuplan-precreate.json").exists());
    let cfg: Value = serde_json::from_slice(&std::fs::read(i.config()).unwrap()).unwrap();
    assert_eq!(cfg["step_thread_core"], "auto");
    assert_eq!(cfg["on_error"], "allow");
    // The written config is one the hook accepts.
    let check = Command::new(cpuplan_bin())
        .arg("--config")
        .arg(i.config())
        .args([
            "explain",
            "--bundle",
            "examples/bundle",
            "--root",
            "examples/host",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let (rc, out, err) = i.run("uninstall", &[]);
    assert_eq!(rc, 0, "uninstall: {err}");
    assert!(out.contains("removed the default config"), "{out}");
    assert_eq!(i.files(), Vec::<String>::new(), "uninstall leaves no file");
    let (rc, _, err) = i.run("uninstall", &[]);
    assert_eq!(rc, 0, "a second uninstall is a no-op: {err}");
}

#[test]
fn install_refuses_a_hooks_file_it_did_not_write() {
    let i = Installed::new();
    std::fs::create_dir_all(i.hooks_dir()).unwrap();
    let foreign = r#"{"version":"1.0.0","hook":{"path":"/opt/other/hook"},"when":{"always":true},"stages":["prestart"]}"#;
    std::fs::write(i.hooks_dir().join("cpuplan.json"), foreign).unwrap();
    let (rc, _, err) = i.run("install", &[]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("refusing")
            && err.contains(&i.hooks_dir().join("cpuplan.json").display().to_string()),
        "{err}"
    );
    assert!(!i.binary().exists(), "nothing installed when refused");
    assert!(!i.config().exists(), "nothing written when refused");
    let (rc, _, err) = i.run("uninstall", &[]);
    assert_eq!(rc, 2, "uninstall refuses it too: {err}");
    assert_eq!(
        std::fs::read_to_string(i.hooks_dir().join("cpuplan.json")).unwrap(),
        foreign
    );
}

/// `cpuplan SUB --containerd --root-prefix ROOT`: (status, stdout, stderr).
fn containerd_run(root: &Path, sub: &str) -> (i32, String, String) {
    hookbin::run(
        Command::new(static_cpuplan())
            .args([sub, "--containerd", "--root-prefix"])
            .arg(root),
    )
}

#[test]
fn install_containerd_on_a_node_without_config_toml_and_uninstall_leaves_nothing() {
    common::runc::require("containerd install", &[("ctr", "containerd/trixie")]);
    let i = Installed::new();
    let root = i.tmp.path();
    let (rc, out, err) = containerd_run(root, "install");
    assert_eq!(rc, 0, "install: {err}");
    assert!(out.contains("restart containerd"), "{out}");
    let etc = root.join("etc/containerd");
    let config = std::fs::read_to_string(etc.join("config.toml")).unwrap();
    assert!(
        config.contains("version = 2") && config.contains("imports = [\"conf.d/cpuplan.toml\"]"),
        "{config}"
    );
    let drop_in = std::fs::read_to_string(etc.join("conf.d/cpuplan.toml")).unwrap();
    let spec_path = etc.join("cpuplan-base-spec.json");
    assert!(
        drop_in.contains(&format!("base_runtime_spec = \"{}\"", spec_path.display()))
            && drop_in.contains("pod_annotations = [\"cpuplan.*\"]")
            && drop_in.contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]"),
        "{drop_in}"
    );
    let spec: Value = serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    assert_eq!(
        spec["hooks"]["createRuntime"][0]["path"],
        json!(root.join("usr/local/libexec/cpuplan/cpuplan-hook")),
        "the default prefix under the root prefix"
    );
    assert_eq!(
        spec["hooks"]["poststop"][0]["args"],
        json!(["cpuplan-hook", "--config", i.config(), "hook", "poststop"])
    );
    assert!(
        spec["process"].get("rlimits").is_none(),
        "CRI's default keeps no rlimits"
    );
    let (rc, out, err) = containerd_run(root, "uninstall");
    assert_eq!(rc, 0, "uninstall: {err}");
    assert!(out.contains("install created it"), "{out}");
    assert_eq!(i.files(), Vec::<String>::new(), "uninstall leaves no file");
    assert!(!etc.join("conf.d").exists());
}

#[test]
fn install_containerd_refuses_what_it_did_not_write_and_a_version_1_config() {
    let i = Installed::new();
    let etc = i.tmp.path().join("etc/containerd");
    std::fs::create_dir_all(etc.join("conf.d")).unwrap();
    std::fs::write(etc.join("conf.d/cpuplan.toml"), "version = 2\n").unwrap();
    let (rc, _, err) = containerd_run(i.tmp.path(), "install");
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("refusing") && err.contains("conf.d/cpuplan.toml"),
        "{err}"
    );
    let (rc, _, err) = containerd_run(i.tmp.path(), "uninstall");
    assert_eq!(rc, 2, "uninstall refuses it too: {err}");
    assert_eq!(
        std::fs::read_to_string(etc.join("conf.d/cpuplan.toml")).unwrap(),
        "version = 2\n"
    );
    std::fs::remove_file(etc.join("conf.d/cpuplan.toml")).unwrap();
    std::fs::write(etc.join("config.toml"), "[plugins.cri]\n").unwrap();
    let (rc, _, err) = containerd_run(i.tmp.path(), "install");
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("version") && err.contains("migrate"), "{err}");
    assert_eq!(
        std::fs::read_to_string(etc.join("config.toml")).unwrap(),
        "[plugins.cri]\n",
        "the config is left alone"
    );
}

#[test]
fn relative_paths_are_registered_absolute() {
    let i = Installed::new();
    let out = Command::new(static_cpuplan())
        .args(["--config", "etc/hook.json", "install"])
        .args(["--prefix", "prefix", "--hooks-dir", "hooks.d"])
        .current_dir(i.tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hook = i.json("cpuplan.json");
    assert_eq!(hook["hook"]["path"], json!(i.binary()), "{hook}");
    assert_eq!(
        hook["hook"]["args"][2],
        json!(i.tmp.path().join("etc/hook.json")),
        "{hook}"
    );
    assert!(i.tmp.path().join("etc/hook.json").exists());
}

#[test]
fn install_refuses_the_dynamic_build_unless_allow_dynamic() {
    let i = Installed::new();
    let (rc, out, err) = i.run_bin(&cpuplan_bin(), "install", &[]);
    assert_eq!(rc, 2, "{out}{err}");
    assert!(
        err.starts_with(&format!(
            "cpuplan: install: checking the binary {}: it is dynamically linked (its ELF PT_INTERP asks for /",
            hook_bin().display()
        )) && err.contains("scripts/build-static.sh")
            && err.contains("--allow-dynamic"),
        "{err}"
    );
    assert_eq!(
        i.files(),
        Vec::<String>::new(),
        "nothing written when refused"
    );
    let (rc, out, err) = i.run_bin(&cpuplan_bin(), "install", &["--allow-dynamic"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        err.starts_with(
            "cpuplan: warning: --allow-dynamic: installing it anyway (checking the binary "
        ),
        "the warning goes to stderr: {err}"
    );
    assert!(
        out.contains(&format!("installed {}", i.binary().display())),
        "{out}"
    );
    assert!(!out.contains("warning"), "{out}");
    let (rc, _, err) = i.run("uninstall", &[]);
    assert_eq!(rc, 0, "{err}");
    // The static build installs without a word about it.
    let (rc, _, err) = i.run("install", &[]);
    assert_eq!((rc, err.as_str()), (0, ""));
}

#[test]
fn install_is_declarative_and_uninstall_says_what_it_removed() {
    let i = Installed::new();
    let precreate = i.hooks_dir().join("cpuplan-precreate.json");
    let (rc, _, err) = i.run("install", &["--with-precreate"]);
    assert_eq!(rc, 0, "{err}");
    assert!(precreate.exists());
    let (rc, out, err) = i.run("install", &[]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        !precreate.exists(),
        "no --with-precreate: its earlier file is gone"
    );
    assert!(
        out.contains(&format!(
            "removed {} (an earlier install's",
            precreate.display()
        )),
        "{out}"
    );
    let (rc, out, err) = i.run("uninstall", &[]);
    assert_eq!(rc, 0, "{err}");
    for path in [i.hooks_dir().join("cpuplan.json"), i.binary()] {
        assert!(
            out.contains(&format!("removed {}\n", path.display())),
            "{out}"
        );
    }
    assert!(
        out.contains(&format!(
            "removed the default config {}",
            i.config().display()
        )),
        "{out}"
    );
    assert_eq!(i.files(), Vec::<String>::new());
    let (rc, out, err) = i.run("uninstall", &[]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.starts_with(&format!(
            "nothing to remove: no {} and no cpuplan.json or cpuplan-precreate.json in {}",
            i.binary().display(),
            i.hooks_dir().display()
        )),
        "{out}"
    );
}

#[test]
fn a_failed_install_step_is_named() {
    let i = Installed::new();
    // The prefix is a file: the binary cannot be written under it.
    std::fs::write(i.prefix(), "").unwrap();
    let (rc, _, err) = i.run("install", &[]);
    assert_eq!(rc, 1, "a failed file operation: {err}");
    assert!(
        err.starts_with(&format!(
            "cpuplan: install: writing the binary {}: Not a directory",
            i.binary().display()
        )),
        "{err}"
    );
    std::fs::remove_file(i.prefix()).unwrap();
    // A directory where the binary is: uninstall cannot remove it.
    std::fs::create_dir_all(i.binary()).unwrap();
    let (rc, _, err) = i.run("uninstall", &[]);
    assert_eq!(rc, 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "cpuplan: uninstall: removing the binary {}: Is a directory",
            i.binary().display()
        )),
        "{err}"
    );
}

/// `STATIC-CPUPLAN ARGS` with `envs`: (status, stdout, stderr).
fn hook(args: &[&str], envs: &[(&str, &Path)]) -> (i32, String, String) {
    let mut c = Command::new(static_cpuplan());
    c.args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    hookbin::run(&mut c)
}

/// Every file under `dir`, relative, with its bytes, owner, group and mode.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32, u32, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
                out.push((
                    rel,
                    std::fs::read(e.path()).unwrap(),
                    m.uid(),
                    m.gid(),
                    m.mode() & 0o7777,
                ));
            }
        }
    }
    out.sort();
    out
}

/// `install --nri` writes only containerd's drop-in and
/// the import, keeps config.toml's owner, group and mode (root:daemon 0640 here, as a config
/// holding registry passwords may be), and the import's comment names `--nri`; uninstall --nri
/// puts the file back to the byte, owner and mode included.
#[test]
fn install_nri_writes_only_the_drop_in_and_keeps_config_toml_s_owner_and_mode() {
    let i = Installed::new();
    let root = i.tmp.path();
    let etc = root.join("etc/containerd");
    std::fs::create_dir_all(&etc).unwrap();
    let config = etc.join("config.toml");
    let before_text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"r\".auth]\n  password = \"secret\"\n";
    std::fs::write(&config, before_text).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::chown(&config, Some(0), Some(1)).unwrap();
    let before = snapshot(root);
    let (rc, out, err) = hook(
        &["install", "--nri", "--root-prefix", root.to_str().unwrap()],
        &[],
    );
    assert_eq!(rc, 0, "install --nri: {err}");
    assert!(out.contains("restart containerd"), "{out}");
    let m = std::fs::metadata(&config).unwrap();
    assert_eq!(
        (m.uid(), m.gid(), m.mode() & 0o7777),
        (0, 1, 0o640),
        "config.toml keeps root:daemon 0640"
    );
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.contains("imports = [\"conf.d/cpuplan-nri.toml\"] # added by cpuplan install --nri\n"),
        "{text}"
    );
    let files: Vec<String> = snapshot(root).into_iter().map(|f| f.0).collect();
    assert_eq!(
        files,
        [
            "etc/containerd/conf.d/cpuplan-nri.toml",
            "etc/containerd/config.toml"
        ],
        "no binary, no hooks.d file, no hook config"
    );
    // The hook's options do not go with --nri.
    let (rc, _, err) = hook(
        &[
            "install",
            "--nri",
            "--with-precreate",
            "--root-prefix",
            root.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("--nri writes only containerd's NRI drop-in"),
        "{err}"
    );
    let (rc, out, err) = hook(
        &[
            "uninstall",
            "--nri",
            "--root-prefix",
            root.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(rc, 0, "uninstall --nri: {err}");
    assert!(out.contains("removed the import"), "{out}");
    assert!(
        snapshot(root) == before,
        "config.toml as it was, owner and mode included"
    );
}

/// The same for `install --containerd`: the edited config.toml keeps its owner, group and mode.
#[test]
fn install_containerd_keeps_config_toml_s_owner_and_mode() {
    common::runc::require("containerd install", &[("ctr", "containerd/trixie")]);
    let i = Installed::new();
    let root = i.tmp.path();
    let etc = root.join("etc/containerd");
    std::fs::create_dir_all(&etc).unwrap();
    let config = etc.join("config.toml");
    std::fs::write(&config, "version = 2\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&config, Some(0), Some(1)).unwrap();
    let (rc, _, err) = containerd_run(root, "install");
    assert_eq!(rc, 0, "install --containerd: {err}");
    let m = std::fs::metadata(&config).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 1, 0o600));
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.contains("# added by cpuplan install --containerd"),
        "{text}"
    );
    let (rc, _, err) = containerd_run(root, "uninstall");
    assert_eq!(rc, 0, "uninstall --containerd: {err}");
    let m = std::fs::metadata(&config).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (0, 1, 0o600));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "version = 2\n");
}

/// A config install did not write (the package's conffile: the default,
/// byte for byte) is kept by uninstall and said so; so is one install wrote and that was
/// edited since; one install wrote and nobody changed goes.
#[test]
fn uninstall_never_removes_a_config_it_did_not_write_or_that_changed() {
    let i = Installed::new();
    std::fs::create_dir_all(i.config().parent().unwrap()).unwrap();
    std::fs::write(i.config(), cpuplan_hook::install::DEFAULT_CONFIG_TEXT).unwrap();
    let (rc, out, err) = i.run("install", &[]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains("not written by install; uninstall keeps it"),
        "{out}"
    );
    let (rc, out, err) = i.run("uninstall", &[]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains(&format!(
            "kept the config {}: install did not write it",
            i.config().display()
        )),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(i.config()).unwrap(),
        cpuplan_hook::install::DEFAULT_CONFIG_TEXT
    );
    assert_eq!(
        i.files(),
        ["etc/cpuplan/hook.json"],
        "only the config is left"
    );

    std::fs::remove_file(i.config()).unwrap();
    let (rc, out, _) = i.run("install", &[]);
    assert_eq!(rc, 0);
    assert!(out.contains("wrote the default config"), "{out}");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(i.config()).unwrap()).unwrap();
    cfg["on_error"] = json!("deny");
    std::fs::write(i.config(), serde_json::to_vec(&cfg).unwrap()).unwrap();
    let (rc, out, _) = i.run("uninstall", &[]);
    assert_eq!(rc, 0);
    assert!(out.contains("changed since install wrote it"), "{out}");
    assert_eq!(i.files(), ["etc/cpuplan/hook.json"]);
}

/// Removes the hooks.d files a test registered in a host directory, if they are still there.
struct Registered(Vec<PathBuf>);

impl Drop for Registered {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// With no `--hooks-dir`, install registers where podman reads: its
/// containers.conf's `hooks_dir` when set, else podman's built-in default, which Debian 12's
/// podman 4.3 reads (`/usr/share/containers/oci/hooks.d`, not `/etc/containers/oci/hooks.d`).
/// A real `podman run` with no `--hooks-dir` and no `hooks_dir` then gets the plan's variables
/// in its environment from the precreate stage.
#[test]
fn install_registers_where_podman_reads_and_podman_runs_precreate_from_there() {
    let i = Installed::new();
    let lock = hostlock::exclusive();
    let p = Podman::with_default_hooks_dirs("hooksdir", &lock);
    let conf = p.dir.path().join("containers.conf");
    let default_dir = Path::new(cpuplan_hook::install::DEFAULT_HOOKS_DIR);
    assert_eq!(default_dir, Path::new("/usr/share/containers/oci/hooks.d"));
    for f in ["cpuplan.json", "cpuplan-precreate.json"] {
        assert!(
            !default_dir.join(f).exists(),
            "{} exists (the Debian package, or an install left behind): remove it first",
            default_dir.join(f).display()
        );
    }
    let _cleanup = Registered(vec![
        default_dir.join("cpuplan.json"),
        default_dir.join("cpuplan-precreate.json"),
    ]);
    std::fs::create_dir_all(i.config().parent().unwrap()).unwrap();
    let op = common::operator_dir::tempdir();
    let cfg = json!({
        "topology_root": fixtures().join("e2e-host"),
        "claims_dir": op.path().join("claims"),
        "log": i.tmp.path().join("var/hook.log"),
    });
    std::fs::write(i.config(), serde_json::to_vec(&cfg).unwrap()).unwrap();
    let base = [
        "--config",
        i.config().to_str().unwrap(),
        "install",
        "--with-precreate",
        "--prefix",
        i.prefix().to_str().unwrap(),
    ]
    .map(String::from);
    let args: Vec<&str> = base.iter().map(String::as_str).collect();
    let (rc, out, err) = hook(&args, &[("CONTAINERS_CONF", &conf)]);
    assert_eq!(rc, 0, "install: {err}");
    assert!(
        out.contains(&format!(
            "registered {}",
            default_dir.join("cpuplan-precreate.json").display()
        )),
        "{out}"
    );
    let init = p.init(
        "hd",
        &["--cpus", "1"],
        "env | sort; cat /run/cpuplan/plan.env",
    );
    assert_eq!(init.rc, 0, "podman create/init: {}", init.err);
    let run = p.start("hd");
    assert_eq!(run.rc, 0, "podman start: {}", run.err);
    assert_eq!(
        line_value(&run.out, "OMP_NUM_THREADS"),
        Some("1"),
        "the precreate stage set it in the environment: {}",
        run.out
    );
    assert!(
        run.out.contains("\nCPUPLAN_USABLE='1'\n"),
        "and the createRuntime stage wrote plan.env: {}",
        run.out
    );
    let rm = p.cmd(&["rm", "hd"]);
    assert_eq!(rm.rc, 0, "{}", rm.err);
    let mut un = args.clone();
    un[2] = "uninstall";
    un.remove(3);
    let (rc, out, err) = hook(&un, &[("CONTAINERS_CONF", &conf)]);
    assert_eq!(rc, 0, "uninstall: {err}");
    assert!(
        out.contains(&format!(
            "removed {}",
            default_dir.join("cpuplan.json").display()
        )),
        "{out}"
    );
    drop(p);
    drop(lock);

    // A containers.conf that sets hooks_dir: install registers in its first directory.
    let set = i.tmp.path().join("set.conf");
    let dir = i.tmp.path().join("my-hooks");
    std::fs::write(
        &set,
        format!(
            "[engine]\nhooks_dir = [\"{}\", \"/elsewhere\"]\n",
            dir.display()
        ),
    )
    .unwrap();
    let (rc, out, err) = hook(&args, &[("CONTAINERS_CONF", &set)]);
    assert_eq!(rc, 0, "install: {err}");
    assert!(dir.join("cpuplan.json").exists(), "{out}");
    let (rc, _, err) = hook(&un, &[("CONTAINERS_CONF", &set)]);
    assert_eq!(rc, 0, "{err}");
    assert!(!dir.join("cpuplan.json").exists());
}

/// With no `--hooks-dir`, install moves an earlier install's registration out of
/// `/etc/containers/oci/hooks.d` (where it wrote before, and podman 4.3 does not read) into
/// the hooks dir podman reads, and leaves a file there that is not its own.
#[test]
fn install_moves_an_earlier_install_s_registration_out_of_etc_containers() {
    let i = Installed::new();
    let root = i.tmp.path();
    let r = root.to_str().unwrap();
    let legacy = root.join("etc/containers/oci/hooks.d");
    std::fs::create_dir_all(&legacy).unwrap();
    let binary = root.join("usr/local/libexec/cpuplan/cpuplan-hook");
    let ours = json!({"version": "1.0.0", "hook": {"path": binary}, "when": {"always": true}, "stages": ["prestart"]});
    std::fs::write(legacy.join("cpuplan.json"), ours.to_string()).unwrap();
    let foreign = r#"{"hook":{"path":"/opt/other"}}"#;
    std::fs::write(legacy.join("cpuplan-precreate.json"), foreign).unwrap();
    let out = Command::new(static_cpuplan())
        .args(["install", "--root-prefix", r])
        .env_remove("CONTAINERS_CONF")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!(
            "removed {} (an earlier install's",
            legacy.join("cpuplan.json").display()
        )),
        "{text}"
    );
    assert!(!legacy.join("cpuplan.json").exists());
    assert!(root
        .join("usr/share/containers/oci/hooks.d/cpuplan.json")
        .exists());
    assert_eq!(
        std::fs::read_to_string(legacy.join("cpuplan-precreate.json")).unwrap(),
        foreign
    );
}

mod preview;
