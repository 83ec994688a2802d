//! The hook config install writes where there is none (the default), and the record that lets
//! uninstall remove it only while it is exactly what install wrote: never the package's
//! conffile, an operator's file, or one changed since.

use std::path::PathBuf;

use serde_json::Value;

use super::files::{io, remove, write_with_mode};
use super::{InstallError, Layout};

/// The default hook config `install` writes where none exists, as written (`hooks/hook.json`,
/// which the Debian package installs as its conffile): every key at its default value.
pub const DEFAULT_CONFIG_TEXT: &str = include_str!("../../hooks/hook.json");

/// [`DEFAULT_CONFIG_TEXT`] as JSON.
pub fn default_config() -> Value {
    serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap_or(Value::Null)
}

impl Layout {
    /// Install's record of the config it wrote: a copy of the bytes, beside the binary. uninstall
    /// removes the config only while it still holds exactly those bytes.
    pub fn config_record(&self) -> PathBuf {
        self.prefix.join("libexec/cpuplan/config.installed")
    }
}

/// Whose the existing config is, by install's record of what it wrote.
enum ConfigState {
    /// install wrote it and it still holds those bytes.
    Ours,
    /// install wrote it, and it was changed since.
    Changed,
    /// install did not write it (the package's conffile, an operator's, or an install older
    /// than the record).
    NotOurs,
}

fn config_state(layout: &Layout) -> Result<ConfigState, InstallError> {
    let record = layout.config_record();
    let written = match std::fs::read(&record) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ConfigState::NotOurs),
        Err(source) => {
            return Err(InstallError::Io {
                step: "reading the record of the config",
                path: record,
                source,
            })
        }
    };
    let now = std::fs::read(&layout.config).map_err(io("reading the config", &layout.config))?;
    Ok(if now == written {
        ConfigState::Ours
    } else {
        ConfigState::Changed
    })
}

/// Writes the default config where there is none (with its record); returns what it did.
pub(super) fn write_default_or_keep(layout: &Layout) -> Result<String, InstallError> {
    if !layout.config.exists() {
        write_with_mode(
            "writing the default config",
            &layout.config,
            DEFAULT_CONFIG_TEXT.as_bytes(),
            0o644,
        )?;
        write_with_mode(
            "writing the record of the config",
            &layout.config_record(),
            DEFAULT_CONFIG_TEXT.as_bytes(),
            0o644,
        )?;
        return Ok(format!(
            "wrote the default config {}",
            layout.config.display()
        ));
    }
    let how = match config_state(layout)? {
        ConfigState::Ours => "written by an earlier install, unchanged",
        ConfigState::Changed => "changed since install wrote it; uninstall keeps it",
        ConfigState::NotOurs => "not written by install; uninstall keeps it",
    };
    Ok(format!(
        "kept the existing config {} ({how})",
        layout.config.display()
    ))
}

/// Removes the config when install wrote it and it is unchanged, and the record; returns what
/// it did or kept.
pub(super) fn remove_if_ours(layout: &Layout) -> Result<Vec<String>, InstallError> {
    let mut said = Vec::new();
    if layout.config.exists() {
        said.push(match config_state(layout)? {
            ConfigState::Ours => {
                remove("removing the default config", &layout.config)?;
                format!(
                    "removed the default config {} (install wrote it; unchanged)",
                    layout.config.display()
                )
            }
            ConfigState::Changed => format!(
                "kept the edited config {}: changed since install wrote it",
                layout.config.display()
            ),
            ConfigState::NotOurs => format!(
                "kept the config {}: install did not write it",
                layout.config.display()
            ),
        });
    }
    let record = layout.config_record();
    if record.exists() {
        remove("removing the record of the config", &record)?;
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{layout, tiny_static_elf};
    use super::super::{install, uninstall, InstallFlags, NOT_PACKAGED};
    use super::*;
    use std::path::Path;

    #[test]
    fn the_default_config_is_every_default() {
        let c = crate::config::HookConfig::parse(
            Path::new("hooks/hook.json"),
            DEFAULT_CONFIG_TEXT.as_bytes(),
        )
        .unwrap();
        assert_eq!(c, crate::config::HookConfig::default());
        assert_eq!(default_config()["log"], crate::config::DEFAULT_LOG);
    }

    #[test]
    fn uninstall_removes_only_a_config_install_wrote_and_nobody_changed() {
        let t = tempfile::tempdir().unwrap();
        let l = layout(t.path());
        let bin = t.path().join("hook");
        tiny_static_elf(&bin);
        // A config install did not write, byte for byte the default (the package's conffile).
        std::fs::create_dir_all(l.config.parent().unwrap()).unwrap();
        std::fs::write(&l.config, DEFAULT_CONFIG_TEXT).unwrap();
        let said = install(&l, &bin, InstallFlags::default(), &NOT_PACKAGED).unwrap();
        assert!(
            said.iter()
                .any(|s| s.contains("not written by install; uninstall keeps it")),
            "{said:?}"
        );
        let said = uninstall(&l, &NOT_PACKAGED).unwrap();
        assert!(
            said.iter()
                .any(|s| s.contains("kept the config") && s.contains("install did not write it")),
            "{said:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&l.config).unwrap(),
            DEFAULT_CONFIG_TEXT
        );
        // Written by install, then changed: kept.
        std::fs::remove_file(&l.config).unwrap();
        install(&l, &bin, InstallFlags::default(), &NOT_PACKAGED).unwrap();
        let said = install(&l, &bin, InstallFlags::default(), &NOT_PACKAGED).unwrap();
        assert!(
            said.iter()
                .any(|s| s.contains("written by an earlier install, unchanged")),
            "{said:?}"
        );
        std::fs::write(
            &l.config,
            DEFAULT_CONFIG_TEXT.replace("\"allow\"", "\"deny\""),
        )
        .unwrap();
        let said = uninstall(&l, &NOT_PACKAGED).unwrap();
        assert!(
            said.iter()
                .any(|s| s.contains("changed since install wrote it")),
            "{said:?}"
        );
        assert!(l.config.exists());
        assert!(!l.config_record().exists() && !t.path().join("prefix/libexec/cpuplan").exists());
        // Written by install and unchanged: removed, its directory with it.
        std::fs::remove_file(&l.config).unwrap();
        install(&l, &bin, InstallFlags::default(), &NOT_PACKAGED).unwrap();
        uninstall(&l, &NOT_PACKAGED).unwrap();
        assert!(!l.config.exists() && !l.config.parent().unwrap().exists());
    }
}
