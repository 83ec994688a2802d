//! Where podman (and CRI-O) read oci-hooks files on the host at hand: the `hooks_dir` of
//! podman's containers.conf when one sets it, else podman's built-in default
//! `/usr/share/containers/oci/hooks.d` (Debian 12's podman 4.3 reads only that one; CRI-O's
//! default `hooks_dir` is the same directory).
//!
//! containers.conf is read as podman reads it: `$CONTAINERS_CONF` alone when set, else
//! `/usr/share/containers/containers.conf`, `/etc/containers/containers.conf` and
//! `/etc/containers/containers.conf.d/*.conf` in that order, the last `[engine] hooks_dir`
//! winning. Of its directories, the first is the one install writes to.

use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item};

use super::import::ConfigError;

/// podman's (and CRI-O's) built-in hooks directory.
pub const DEFAULT_HOOKS_DIR: &str = "/usr/share/containers/oci/hooks.d";

/// The containers.conf files podman reads, under `root`, in its order (existing ones only).
fn containers_confs(root: &Path, env: Option<&Path>) -> Vec<PathBuf> {
    let under = |p: &str| root.join(p.trim_start_matches('/'));
    if let Some(e) = env {
        return vec![e.to_path_buf()];
    }
    let mut files = vec![
        under("/usr/share/containers/containers.conf"),
        under("/etc/containers/containers.conf"),
    ];
    let mut dropins: Vec<PathBuf> = std::fs::read_dir(under("/etc/containers/containers.conf.d"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "conf"))
        .collect();
    dropins.sort();
    files.extend(dropins);
    files.into_iter().filter(|p| p.is_file()).collect()
}

/// The hooks directory, as the node sees it, and where it was found: `root` is the node's root
/// (its paths are read below it), `env` the `CONTAINERS_CONF` in force.
pub fn podman_hooks_dir(root: &Path, env: Option<&Path>) -> Result<(PathBuf, String), ConfigError> {
    let mut found = None;
    for file in containers_confs(root, env) {
        let text = std::fs::read_to_string(&file).map_err(|e| ConfigError {
            path: file.clone(),
            message: format!("cannot read it: {e}"),
        })?;
        let doc: DocumentMut = text.parse().map_err(|e| ConfigError {
            path: file.clone(),
            message: format!("not TOML: {e}"),
        })?;
        let Some(item) = doc.get("engine").and_then(|e| e.get("hooks_dir")) else {
            continue;
        };
        let first = match item {
            Item::Value(toml_edit::Value::Array(a)) => a.iter().next().map(|v| v.as_str()),
            _ => Some(None),
        };
        match first {
            Some(Some(dir)) if dir.starts_with('/') => {
                found = Some((PathBuf::from(dir), file));
            }
            None => found = None,
            _ => {
                return Err(ConfigError {
                    path: file,
                    message: "[engine] hooks_dir is not a list of absolute paths".into(),
                })
            }
        }
    }
    Ok(match found {
        Some((dir, file)) => {
            let from = format!("hooks_dir of {}", file.display());
            (dir, from)
        }
        None => (
            PathBuf::from(DEFAULT_HOOKS_DIR),
            "podman's and CRI-O's default".into(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn the_default_unless_containers_conf_sets_it_the_last_file_winning() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let (d, from) = podman_hooks_dir(r, None).unwrap();
        assert_eq!(d, Path::new(DEFAULT_HOOKS_DIR));
        assert!(from.contains("default"), "{from}");
        // Debian's own file has it commented out.
        conf(
            r,
            "usr/share/containers/containers.conf",
            "[engine]\n#hooks_dir = [\"/x\"]\n",
        );
        assert_eq!(
            podman_hooks_dir(r, None).unwrap().0,
            Path::new(DEFAULT_HOOKS_DIR)
        );
        conf(
            r,
            "etc/containers/containers.conf",
            "[engine]\nhooks_dir = [\"/etc/h\", \"/more\"]\n",
        );
        let (d, from) = podman_hooks_dir(r, None).unwrap();
        assert_eq!(d, Path::new("/etc/h"));
        assert!(from.ends_with("etc/containers/containers.conf"), "{from}");
        conf(
            r,
            "etc/containers/containers.conf.d/10-a.conf",
            "[engine]\nhooks_dir = [\"/d/h\"]\n",
        );
        assert_eq!(podman_hooks_dir(r, None).unwrap().0, Path::new("/d/h"));
        // CONTAINERS_CONF alone, as podman reads it.
        let only = r.join("private.conf");
        std::fs::write(&only, "[containers]\n").unwrap();
        assert_eq!(
            podman_hooks_dir(r, Some(&only)).unwrap().0,
            Path::new(DEFAULT_HOOKS_DIR)
        );
        conf(
            r,
            "etc/containers/containers.conf.d/20-b.conf",
            "[engine]\nhooks_dir = \"/x\"\n",
        );
        let e = podman_hooks_dir(r, None).unwrap_err().to_string();
        assert!(e.contains("20-b.conf") && e.contains("hooks_dir"), "{e}");
    }
}
