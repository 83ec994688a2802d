//! containerd's `config.toml` and the drop-ins it imports (`imports = ["conf.d/…"]`): reading
//! the files containerd loads in its order, and a drop-in written and imported, or removed
//! with its import. `install --containerd` and `install --nri` each own one drop-in; this is
//! how either is added to and taken out of the node's config. It names neither of them.

use std::path::{Component, Path, PathBuf};

use toml_edit::{Array, DocumentMut, Item, Table};

use super::files::{self, read_opt, write_atomic};
use super::InstallError;

/// The comment on an `imports` key that install added to the main config (then ` --FLAG`).
const ADDED_MARK: &str = "# added by cpuplan install";

/// How the marks read when the command was still called `cpuplan-hook install` (files an older
/// install wrote are still recognized as install's, to be replaced or removed).
const LEGACY_COMMAND: &str = "cpuplan-hook install";

/// `mark` as an older install wrote it ([`LEGACY_COMMAND`]).
fn legacy(mark: &str) -> String {
    mark.replacen("cpuplan install", LEGACY_COMMAND, 1)
}

/// Whether `text` starts with `mark`, as this install or an older one wrote it.
pub(crate) fn starts_with_mark(text: &str, mark: &str) -> bool {
    text.starts_with(mark) || text.starts_with(&legacy(mark))
}

/// A containerd config that cannot be read as TOML, or is of an unsupported version or shape.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub message: String,
}

pub(super) fn parse(path: &Path, text: &str) -> Result<DocumentMut, ConfigError> {
    text.parse::<DocumentMut>().map_err(|e| ConfigError {
        path: path.to_path_buf(),
        message: format!("not TOML: {e}"),
    })
}

/// The config's `version`: 2 or 3 (containerd 1.7 cannot import into a version 1 config).
pub(super) fn config_version(path: &Path, doc: &DocumentMut) -> Result<i64, ConfigError> {
    match doc.get("version").and_then(Item::as_integer) {
        Some(v @ (2 | 3)) => Ok(v),
        other => {
            Err(ConfigError {
                path: path.to_path_buf(),
                message: format!(
                "config version {} is not 2 or 3: migrate it first (`containerd config migrate`)",
                other.map(|v| v.to_string()).unwrap_or_else(|| "1 (none given)".into())
            ),
            })
        }
    }
}

/// The import entry that names `drop_in` from `config`: relative when it is below the config's directory.
pub(super) fn import_entry(config: &Path, drop_in: &Path) -> String {
    let dir = config.parent().unwrap_or(Path::new("/"));
    match drop_in.strip_prefix(dir) {
        Ok(rel) => rel.display().to_string(),
        Err(_) => drop_in.display().to_string(),
    }
}

/// The files `entries` (imported by `parent`) name, as containerd resolves them: relative to the
/// parent's directory; `*` and `?` in the last component matched against the directory's files.
/// `extra` (a file about to be written) counts as present.
fn resolve_imports(parent: &Path, entries: &[String], extra: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in entries {
        let p = clean(&parent.parent().unwrap_or(Path::new("/")).join(e));
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        match name {
            Some(n) if n.contains(['*', '?']) => {
                let dir = p.parent().unwrap_or(Path::new("/"));
                let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .chain(
                        extra
                            .filter(|x| x.parent() == Some(dir))
                            .and_then(Path::file_name)
                            .map(|f| f.to_string_lossy().into_owned()),
                    )
                    .filter(|f| glob_match(&n, f))
                    .map(|f| dir.join(f))
                    .collect();
                found.sort();
                found.dedup();
                out.extend(found);
            }
            _ => out.push(p),
        }
    }
    out
}

/// `path` without `.` and `..` components (as Go's `filepath.Clean`).
fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// Shell-style matching of one file name: `*` any run, `?` one character.
fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

pub(super) fn string_list(item: Option<&Item>) -> Vec<String> {
    item.and_then(Item::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The config files containerd loads from `main`, in its order (breadth first), each parsed.
pub(super) fn load_order(
    main: &Path,
    main_doc: &DocumentMut,
    drop_in: &Path,
    with_drop_in: bool,
) -> Result<Vec<(PathBuf, DocumentMut)>, ConfigError> {
    let mut out = vec![(main.to_path_buf(), main_doc.clone())];
    let extra = with_drop_in.then_some(drop_in);
    let mut pending = resolve_imports(main, &string_list(main_doc.get("imports")), extra);
    if with_drop_in && !pending.iter().any(|p| p == drop_in) {
        pending.push(drop_in.to_path_buf());
    }
    let mut i = 0;
    while i < pending.len() {
        let path = pending[i].clone();
        i += 1;
        if out.iter().any(|(p, _)| *p == path) {
            continue;
        }
        if path == drop_in {
            out.push((path, DocumentMut::new()));
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let doc = parse(&path, &text)?;
        pending.extend(resolve_imports(
            &path,
            &string_list(doc.get("imports")),
            extra,
        ));
        out.push((path, doc));
    }
    Ok(out)
}

pub(super) fn plugin_section<'a>(doc: &'a DocumentMut, plugin: &str) -> Option<&'a Item> {
    doc.get("plugins")?.get(plugin)
}

/// `item` rebuilt without the source file's comments, layout and positions.
pub(super) fn fresh(item: &Item) -> Item {
    match item {
        Item::Value(toml_edit::Value::InlineTable(t)) => Item::Table(fresh_table(t)),
        Item::Value(v) => {
            let mut v = v.clone();
            v.decor_mut().clear();
            Item::Value(v)
        }
        Item::Table(t) => Item::Table(fresh_table(t)),
        Item::ArrayOfTables(a) => {
            let mut out = toml_edit::ArrayOfTables::new();
            for t in a.iter() {
                out.push(fresh_table(t));
            }
            Item::ArrayOfTables(out)
        }
        Item::None => Item::None,
    }
}

pub(super) fn fresh_table(t: &dyn toml_edit::TableLike) -> Table {
    let mut out = Table::new();
    for (k, v) in t.iter() {
        out.insert(k, fresh(v));
    }
    out
}

/// The main config `config` (holding `doc`) with `drop_in` imported; `None` when an existing
/// import already covers it.
pub(super) fn with_import_of(
    config: &Path,
    drop_in: &Path,
    doc: &DocumentMut,
    flag: &str,
) -> Result<Option<String>, ConfigError> {
    let entries = string_list(doc.get("imports"));
    if resolve_imports(config, &entries, Some(drop_in))
        .iter()
        .any(|p| p == drop_in)
    {
        return Ok(None);
    }
    let entry = import_entry(config, drop_in);
    let mut doc = doc.clone();
    match doc.get_mut("imports") {
        Some(item) => {
            let a = item.as_array_mut().ok_or_else(|| ConfigError {
                path: config.to_path_buf(),
                message: "imports is not an array".into(),
            })?;
            a.push(entry);
        }
        None => {
            let mut v = toml_edit::Value::from(Array::from_iter([entry]));
            v.decor_mut().set_suffix(format!(" {ADDED_MARK} --{flag}"));
            doc.insert("imports", Item::Value(v));
        }
    }
    Ok(Some(doc.to_string()))
}

/// The main config `config` (holding `doc`) without the import of `drop_in`; `None` when it
/// holds none. An `imports` key install added goes once it is empty.
pub(super) fn without_import_of(
    config: &Path,
    drop_in: &Path,
    doc: &DocumentMut,
) -> Option<String> {
    let entry = import_entry(config, drop_in);
    let mut doc = doc.clone();
    let item = doc.get_mut("imports")?;
    let a = item.as_array_mut()?;
    let before = a.len();
    a.retain(|v| v.as_str() != Some(&entry));
    if a.len() == before {
        return None;
    }
    let ours = a.is_empty()
        && a.decor()
            .suffix()
            .and_then(|s| s.as_str())
            .is_some_and(|s| s.contains(ADDED_MARK) || s.contains(&legacy(ADDED_MARK)));
    if ours {
        doc.remove("imports");
    }
    Some(doc.to_string())
}

/// The first line of a main config install created (there was none).
pub const CREATED_MARK: &str = "# Created by `cpuplan install";

/// The text of a main config install `--flag` creates where none existed: it only imports `entry`.
pub fn created_config(flag: &str, entry: &str) -> String {
    format!(
        "{CREATED_MARK} --{flag}` (there was no config.toml); uninstall removes it.\n\
         version = 2\nimports = [\"{entry}\"]\n"
    )
}

/// Writes `text` as containerd's config `config`, keeping its owner, group and mode.
fn edit_config(config: &Path, text: &str) -> Result<(), InstallError> {
    write_atomic(
        "editing containerd's config",
        config,
        text.as_bytes(),
        0o644,
    )
}

/// Whether `text` is a main config install created that now holds nothing but its version.
fn only_created_leftover(text: &str) -> bool {
    let Ok(doc) = text.parse::<DocumentMut>() else {
        return false;
    };
    starts_with_mark(text, CREATED_MARK)
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
        Some((_, doc)) => with_import_of(config, drop_in, doc, flag)?,
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
        let created = text == created_config(flag, &entry)
            || text
                == created_config(flag, &entry).replacen(CREATED_MARK, &legacy(CREATED_MARK), 1);
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
                files::remove("removing containerd's config", config)?;
                said.push(format!("removed {} (install created it)", config.display()));
            }
        }
    }
    if drop_in.exists() {
        files::remove("removing the drop-in", drop_in)?;
        said.push(format!("removed {}", drop_in.display()));
    }
    if let Some(d) = drop_in.parent() {
        files::remove_dir_if_empty(d);
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*.toml", "cpuplan.toml"));
        assert!(glob_match("c?uplan.*", "cpuplan.toml"));
        assert!(!glob_match("*.conf", "cpuplan.toml"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a*b", "ac"));
    }

    #[test]
    fn the_added_imports_key_names_the_flag_that_added_it() {
        let doc: DocumentMut = "version = 2\n".parse().unwrap();
        let c = Path::new("/etc/containerd/config.toml");
        let d = Path::new("/etc/containerd/conf.d/cpuplan-nri.toml");
        let text = with_import_of(c, d, &doc, "nri").unwrap().unwrap();
        assert!(
            text.contains(
                "imports = [\"conf.d/cpuplan-nri.toml\"] # added by cpuplan install --nri\n"
            ),
            "{text}"
        );
        let back = without_import_of(c, d, &text.parse().unwrap()).unwrap();
        assert_eq!(back, "version = 2\n");
        // The key an older install added, when the command was `cpuplan-hook`, goes as well.
        let older = text.replace("cpuplan install", "cpuplan-hook install");
        let back = without_import_of(c, d, &older.parse().unwrap()).unwrap();
        assert_eq!(back, "version = 2\n");
    }

    #[test]
    fn a_config_an_older_install_created_is_still_install_s() {
        let t = tempfile::tempdir().unwrap();
        let config = t.path().join("config.toml");
        let drop_in = t.path().join("conf.d/cpuplan-nri.toml");
        std::fs::create_dir_all(drop_in.parent().unwrap()).unwrap();
        std::fs::write(&drop_in, "version = 2\n").unwrap();
        let older = created_config("nri", "conf.d/cpuplan-nri.toml")
            .replace("`cpuplan install", "`cpuplan-hook install");
        assert!(
            older.starts_with("# Created by `cpuplan-hook install --nri`"),
            "{older}"
        );
        assert!(starts_with_mark(&older, CREATED_MARK));
        std::fs::write(&config, older).unwrap();
        let said = remove(&config, &drop_in, "nri").unwrap();
        assert!(!config.exists() && !drop_in.exists(), "{said:?}");
    }
}
