//! A drop-in that containerd's `config.toml` imports (`imports = ["conf.d/…"]`): written and
//! imported, or removed with its import. `install --containerd` and `install --nri` each own one
//! drop-in; this is how either is added to and taken out of the node's config.

use std::path::Path;

use toml_edit::DocumentMut;

use super::containerd::{
    import_entry, parse, read_opt, string_list, with_import_of, without_import_of,
};
use super::{io, write_atomic, InstallError};

/// The first line of a main config install created (there was none).
pub const CREATED_MARK: &str = "# Created by `cpuplan-hook install";

/// The text of a main config install `--flag` creates where none existed: it only imports `entry`.
pub fn created_config(flag: &str, entry: &str) -> String {
    format!(
        "{CREATED_MARK} --{flag}` (there was no config.toml); uninstall removes it.\n\
         version = 2\nimports = [\"{entry}\"]\n"
    )
}

/// The mode of the file at `path` (0644 where it has none yet).
fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
        .unwrap_or(0o644)
}

/// Writes `text` as containerd's config `config`, keeping its mode.
fn edit_config(config: &Path, text: &str) -> Result<(), InstallError> {
    write_atomic(
        "editing containerd's config",
        config,
        text.as_bytes(),
        mode_of(config),
    )
}

/// Whether `text` is a main config install created that now holds nothing but its version.
fn only_created_leftover(text: &str) -> bool {
    let Ok(doc) = text.parse::<DocumentMut>() else {
        return false;
    };
    text.starts_with(CREATED_MARK)
        && doc
            .iter()
            .all(|(k, v)| k == "version" || (k == "imports" && string_list(Some(v)).is_empty()))
}

/// Writes `text` as the drop-in `drop_in` (`step` names the write: `"writing the NRI drop-in"`) and makes `config`
/// (whose text and parsed document are `main`, `None` where there is none) import it, creating
/// `config` for install `--flag` where it does not exist; returns what it did.
pub fn add(
    config: &Path,
    main: Option<(&str, &DocumentMut)>,
    drop_in: &Path,
    text: &str,
    step: &'static str,
    flag: &str,
) -> Result<Vec<String>, InstallError> {
    let new_main = match main {
        Some((_, doc)) => with_import_of(config, drop_in, doc)?,
        None => Some(created_config(flag, &import_entry(config, drop_in))),
    };
    write_atomic(step, drop_in, text.as_bytes(), 0o644)?;
    let what = step.strip_prefix("writing ").unwrap_or(step);
    let mut said = vec![format!("wrote {what} {}", drop_in.display())];
    match new_main {
        Some(t) => {
            edit_config(config, &t)?;
            said.push(format!(
                "{} {} to import it",
                if main.is_some() { "edited" } else { "created" },
                config.display()
            ));
        }
        None => said.push(format!("{} already imports it", config.display())),
    }
    Ok(said)
}

/// Takes `drop_in` out of `config`'s imports (removing `config` where install `--flag` created
/// it and it now holds nothing else) and removes the drop-in; returns what it did.
pub fn remove(config: &Path, drop_in: &Path, flag: &str) -> Result<Vec<String>, InstallError> {
    let mut said = Vec::new();
    if let Some(text) = read_opt(config)? {
        let entry = import_entry(config, drop_in);
        let created = text == created_config(flag, &entry);
        let rest = if created {
            None
        } else {
            without_import_of(config, drop_in, &parse(config, &text)?)
        };
        match rest {
            Some(t) if !only_created_leftover(&t) => {
                edit_config(config, &t)?;
                said.push(format!(
                    "removed the import of {entry} from {}",
                    config.display()
                ));
            }
            None if !created => {}
            _ => {
                std::fs::remove_file(config).map_err(io("removing containerd's config", config))?;
                said.push(format!("removed {} (install created it)", config.display()));
            }
        }
    }
    if drop_in.exists() {
        std::fs::remove_file(drop_in).map_err(io("removing the drop-in", drop_in))?;
        said.push(format!("removed {}", drop_in.display()));
    }
    if let Some(d) = drop_in.parent() {
        let _ = std::fs::remove_dir(d);
    }
    Ok(said)
}
