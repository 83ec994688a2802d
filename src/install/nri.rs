//! `install --nri`: containerd's NRI turned on by a config drop-in, for the NRI plugin
//! (`cpuplan-nri`). containerd 1.7 ships NRI off (`disable = true`); containerd 2.x has it
//! on, and the drop-in changes nothing there but says so.
//!
//! The drop-in goes through the same `imports` mechanism as `install --containerd`'s
//! ([`super::containerd`]), in its own file `conf.d/cpuplan-nri.toml`: containerd 1.7 (config
//! version 2) replaces a plugin's whole section with an imported file's, so the drop-in carries
//! NRI's section as the node's config has it (socket, plugin and config paths, timeouts) with
//! `disable = false`; a version 3 config (containerd 2.x) gets `disable = false` alone.
//! `uninstall --nri` removes exactly the drop-in and the import.

use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table};

use super::files::read_opt;
use super::import::{self, config_version, fresh, load_order, parse, plugin_section, ConfigError};
use super::{InstallError, Options};

/// containerd's NRI plugin (config versions 2 and 3).
pub(crate) const NRI_PLUGIN: &str = "io.containerd.nri.v1.nri";
/// The drop-in, relative to the main config's directory.
pub(crate) const DROP_IN: &str = "conf.d/cpuplan-nri.toml";
/// The first line of the drop-in (uninstall removes only such a file).
pub(crate) const DROP_IN_MARK: &str = "# Written by `cpuplan install --nri`";

/// Where NRI is turned on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nri {
    /// containerd's main config (`/etc/containerd/config.toml`).
    pub config: PathBuf,
}

impl Nri {
    /// containerd's main config as `install`'s options name it (`--containerd-config`, under
    /// `--root-prefix`).
    pub fn resolve(options: &Options) -> Result<Nri, InstallError> {
        let with_containerd = Options {
            containerd: true,
            ..options.clone()
        };
        let (_, containerd) = with_containerd.resolve()?;
        let config = containerd
            .map(|c| c.config)
            .unwrap_or_else(|| PathBuf::from(super::containerd::DEFAULT_CONFIG));
        Ok(Nri { config })
    }

    /// The drop-in install writes.
    pub fn drop_in(&self) -> PathBuf {
        self.config.parent().unwrap_or(Path::new("/")).join(DROP_IN)
    }
}

/// The drop-in's text for `n`, whose main config holds `main_doc` (`None`: no main config).
pub(crate) fn drop_in_text(n: &Nri, main_doc: Option<&DocumentMut>) -> Result<String, ConfigError> {
    let version = match main_doc {
        Some(d) => config_version(&n.config, d)?,
        None => 2,
    };
    let drop_in = n.drop_in();
    let mut origin = None;
    let mut section = Table::new();
    if version == 2 {
        let empty = DocumentMut::new();
        let files = load_order(&n.config, main_doc.unwrap_or(&empty), &drop_in, true)?;
        let mut after_ours = false;
        for (path, doc) in &files {
            if *path == drop_in {
                after_ours = true;
                continue;
            }
            if let Some(s) = plugin_section(doc, NRI_PLUGIN) {
                if after_ours {
                    return Err(ConfigError {
                        path: path.clone(),
                        message: format!(
                            "imported after {} and sets NRI's section: containerd 1.7 would keep only its section",
                            drop_in.display()
                        ),
                    });
                }
                if let Item::Table(t) = fresh(s) {
                    section = t;
                    origin = Some(path.clone());
                }
            }
        }
    }
    section.insert("disable", toml_edit::value(false));
    let mut doc = DocumentMut::new();
    doc.insert("version", toml_edit::value(version));
    let mut plugins = Table::new();
    plugins.set_implicit(true);
    plugins.insert(NRI_PLUGIN, Item::Table(section));
    doc.insert("plugins", Item::Table(plugins));
    let mut head = format!(
        "{DROP_IN_MARK}; `uninstall --nri` removes it.\n\
         # It turns containerd's NRI on, so that the NRI plugin `cpuplan-nri` can connect.\n"
    );
    if version == 2 {
        head.push_str(&format!(
            "# containerd 1.7 replaces a plugin's whole section with an imported one, so this holds NRI's\n\
             # section as it was at install time (containerd's defaults where there was none), from\n\
             #   {}\n\
             # Run install --nri again after changing that section there.\n",
            origin.unwrap_or_else(|| n.config.clone()).display()
        ));
    }
    Ok(format!("{head}{doc}"))
}

/// Refuses a drop-in install did not write.
fn check_ours(n: &Nri) -> Result<(), InstallError> {
    let drop_in = n.drop_in();
    match read_opt(&drop_in)? {
        Some(t) if !import::starts_with_mark(&t, DROP_IN_MARK) => Err(ConfigError {
            path: drop_in,
            message: format!("not written by cpuplan install --nri (no {DROP_IN_MARK:?} first line); refusing to touch it"),
        }
        .into()),
        _ => Ok(()),
    }
}

/// Turns NRI on: writes the drop-in and imports it; returns what it did.
pub fn install(n: &Nri) -> Result<Vec<String>, InstallError> {
    check_ours(n)?;
    let drop_in = n.drop_in();
    let main_text = read_opt(&n.config)?;
    let main_doc = match &main_text {
        Some(t) => Some(parse(&n.config, t)?),
        None => None,
    };
    let text = drop_in_text(n, main_doc.as_ref())?;
    let main = main_text.as_deref().zip(main_doc.as_ref());
    let mut said = import::add(
        &n.config,
        main,
        &drop_in,
        &text,
        "writing the NRI drop-in",
        "nri",
    )?;
    said.push(
        "restart containerd to load it (e.g. systemctl restart containerd); then run the plugin: `systemctl enable --now cpuplan-nri` (the Debian package's unit), `cpuplan-nri`, or on Kubernetes the chart deploy/helm/cpuplan (its nri.enableInContainerd does this for containerd 1.7)"
            .into(),
    );
    Ok(said)
}

/// Removes what [`install`] wrote (refusing a drop-in it did not write); returns what it did.
pub(crate) fn uninstall(n: &Nri) -> Result<Vec<String>, InstallError> {
    check_ours(n)?;
    let mut said = import::remove(&n.config, &n.drop_in(), "nri")?;
    if !said.is_empty() {
        said.push("restart containerd to unload it".into());
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::import::string_list;

    fn node(t: &Path) -> Nri {
        Nri {
            config: t.join("etc/containerd/config.toml"),
        }
    }

    fn doc(s: &str) -> DocumentMut {
        s.parse().unwrap()
    }

    #[test]
    fn a_v2_drop_in_copies_nri_s_section_and_turns_it_on() {
        let t = tempfile::tempdir().unwrap();
        let n = node(t.path());
        let main = doc("version = 2\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n  socket_path = \"/s/nri.sock\"\n  plugin_request_timeout = \"5s\"\n\
             [plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"p:1\"\n");
        let text = drop_in_text(&n, Some(&main)).unwrap();
        assert!(text.starts_with(DROP_IN_MARK), "{text}");
        let d = doc(&text);
        assert_eq!(d["version"].as_integer(), Some(2));
        let nri = &d["plugins"][NRI_PLUGIN];
        assert_eq!(nri["disable"].as_bool(), Some(false));
        assert_eq!(nri["socket_path"].as_str(), Some("/s/nri.sock"));
        assert_eq!(nri["plugin_request_timeout"].as_str(), Some("5s"));
        assert!(d["plugins"].get("io.containerd.grpc.v1.cri").is_none());
        // No section anywhere: containerd's defaults, turned on.
        let d = doc(&drop_in_text(&n, None).unwrap());
        let nri = d["plugins"][NRI_PLUGIN].as_table().unwrap();
        assert_eq!(nri.len(), 1);
        assert_eq!(nri["disable"].as_bool(), Some(false));
        // Version 3: only the key; version 1 refused.
        let d = doc(&drop_in_text(&n, Some(&doc("version = 3\n"))).unwrap());
        assert_eq!(d["version"].as_integer(), Some(3));
        assert_eq!(d["plugins"][NRI_PLUGIN]["disable"].as_bool(), Some(false));
        assert!(drop_in_text(&n, Some(&doc("[plugins.cri]\n"))).is_err());
    }

    #[test]
    fn a_later_import_that_sets_nri_s_section_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let n = node(t.path());
        let conf_d = t.path().join("etc/containerd/conf.d");
        std::fs::create_dir_all(&conf_d).unwrap();
        std::fs::write(
            conf_d.join("zz.toml"),
            "version = 2\n[plugins.\"io.containerd.nri.v1.nri\"]\ndisable = true\n",
        )
        .unwrap();
        let main = doc("version = 2\nimports = [\"conf.d/*.toml\"]\n");
        let e = drop_in_text(&n, Some(&main)).unwrap_err().to_string();
        assert!(e.contains("zz.toml") && e.contains("NRI"), "{e}");
    }

    #[test]
    fn install_and_uninstall_leave_the_config_as_they_found_it() {
        let t = tempfile::tempdir().unwrap();
        let n = node(t.path());
        // No main config: created, then removed.
        let said = install(&n).unwrap();
        assert!(said.iter().any(|l| l.starts_with("created")), "{said:?}");
        let main = std::fs::read_to_string(&n.config).unwrap();
        assert_eq!(string_list(doc(&main).get("imports")), [DROP_IN]);
        assert_eq!(
            install(&n).unwrap()[1],
            format!("{} already imports it", n.config.display())
        );
        uninstall(&n).unwrap();
        assert!(!n.config.exists() && !n.drop_in().exists());
        assert!(!t.path().join("etc/containerd/conf.d").exists());
        // An existing config: the import added, then removed to the byte.
        let before =
            "version = 2\n# mine\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n";
        std::fs::write(&n.config, before).unwrap();
        install(&n).unwrap();
        let d = doc(&std::fs::read_to_string(n.drop_in()).unwrap());
        assert_eq!(d["plugins"][NRI_PLUGIN]["disable"].as_bool(), Some(false));
        uninstall(&n).unwrap();
        assert_eq!(std::fs::read_to_string(&n.config).unwrap(), before);
        assert!(uninstall(&n).unwrap().is_empty(), "nothing left to remove");
        // A drop-in someone else wrote is refused, both ways.
        std::fs::create_dir_all(n.drop_in().parent().unwrap()).unwrap();
        std::fs::write(n.drop_in(), "version = 2\n").unwrap();
        assert!(install(&n).is_err());
        assert!(uninstall(&n).is_err());
        assert_eq!(
            std::fs::read_to_string(n.drop_in()).unwrap(),
            "version = 2\n"
        );
    }

    #[test]
    fn with_the_hook_s_drop_in_each_uninstall_removes_its_own() {
        let t = tempfile::tempdir().unwrap();
        let n = node(t.path());
        let c = super::super::containerd::Containerd {
            config: n.config.clone(),
            runtimes: Vec::new(),
            ctr_root: PathBuf::from("/"),
        };
        // install --containerd created the config (no ctr here: its text, as it writes it).
        std::fs::create_dir_all(n.config.parent().unwrap()).unwrap();
        std::fs::write(
            &n.config,
            crate::install::import::created_config("containerd", super::super::containerd::DROP_IN),
        )
        .unwrap();
        install(&n).unwrap();
        let main = std::fs::read_to_string(&n.config).unwrap();
        assert_eq!(
            string_list(doc(&main).get("imports")),
            [super::super::containerd::DROP_IN, DROP_IN]
        );
        // --nri first, then --containerd's own uninstall finds the file it created.
        uninstall(&n).unwrap();
        assert_eq!(
            std::fs::read_to_string(&n.config).unwrap(),
            crate::install::import::created_config("containerd", super::super::containerd::DROP_IN)
        );
        assert_eq!(
            super::super::containerd::without_import(&c, &doc(&main))
                .map(|t| { string_list(doc(&t).get("imports")) }),
            Some(vec![DROP_IN.to_string()]),
            "and the other way round the hook's uninstall keeps NRI's import"
        );
        // What --containerd's uninstall leaves when it runs first: --nri removes the file.
        let left = super::super::containerd::without_import(&c, &doc(&main)).unwrap();
        std::fs::write(&n.config, left).unwrap();
        uninstall(&n).unwrap();
        assert!(!n.config.exists());
    }
}
