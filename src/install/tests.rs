//! The install and uninstall steps, on temp directories.

use super::*;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

pub(super) fn layout(t: &Path) -> Layout {
    Layout {
        prefix: t.join("prefix"),
        hooks_dir: t.join("hooks.d"),
        config: t.join("etc/cpuplan/hook.json"),
    }
}

const ANY: InstallFlags = InstallFlags {
    with_precreate: false,
    allow_dynamic: true,
};
const WITH_PRECREATE: InstallFlags = InstallFlags {
    with_precreate: true,
    allow_dynamic: true,
};

/// A 64-bit little-endian ELF header with no program headers: static as far as install checks.
pub(super) fn tiny_static_elf(path: &Path) {
    let mut b = b"\x7fELF\x02\x01\x01".to_vec();
    b.resize(64, 0);
    std::fs::write(path, b).unwrap();
}

#[test]
fn install_is_idempotent_and_uninstall_leaves_nothing() {
    let t = tempfile::tempdir().unwrap();
    let l = layout(t.path());
    let bin = t.path().join("src-bin");
    std::fs::write(&bin, b"#!/bin/sh\n").unwrap();
    install(&l, &bin, WITH_PRECREATE, &NOT_PACKAGED).unwrap();
    install(&l, &bin, WITH_PRECREATE, &NOT_PACKAGED).unwrap();
    assert_eq!(std::fs::read(l.binary()).unwrap(), b"#!/bin/sh\n");
    let mode = std::fs::metadata(l.binary()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    let hook: Value =
        serde_json::from_slice(&std::fs::read(l.hooks_dir.join(HOOK_FILE)).unwrap()).unwrap();
    assert_eq!(hook["hook"]["path"], l.binary().display().to_string());
    assert_eq!(hook["stages"], json!(["createRuntime", "poststop"]));
    assert!(l.hooks_dir.join(PRECREATE_FILE).exists());
    assert!(l.config.exists());
    let said = uninstall(&l, &NOT_PACKAGED).unwrap();
    assert!(
        said.contains(&format!("removed {}", l.binary().display())),
        "{said:?}"
    );
    assert!(!l.hooks_dir.join(HOOK_FILE).exists());
    assert!(!l.binary().exists());
    assert!(!l.config.exists());
    assert!(!t.path().join("prefix/libexec/cpuplan").exists());
    let said = uninstall(&l, &NOT_PACKAGED).unwrap();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].starts_with("nothing to remove: no "), "{said:?}");
}

#[test]
fn refuses_a_foreign_hooks_file_and_keeps_an_edited_config() {
    let t = tempfile::tempdir().unwrap();
    let l = layout(t.path());
    std::fs::create_dir_all(&l.hooks_dir).unwrap();
    std::fs::write(
        l.hooks_dir.join(HOOK_FILE),
        r#"{"hook":{"path":"/opt/other"}}"#,
    )
    .unwrap();
    let e = install(&l, Path::new("/bin/sh"), ANY, &NOT_PACKAGED)
        .unwrap_err()
        .to_string();
    assert!(e.contains("refusing") && e.contains(HOOK_FILE), "{e}");
    assert!(!l.binary().exists(), "nothing installed when refused");
    std::fs::remove_file(l.hooks_dir.join(HOOK_FILE)).unwrap();
    std::fs::create_dir_all(l.config.parent().unwrap()).unwrap();
    std::fs::write(&l.config, r#"{"on_error":"deny"}"#).unwrap();
    install(&l, Path::new("/bin/sh"), ANY, &NOT_PACKAGED).unwrap();
    let said = uninstall(&l, &NOT_PACKAGED).unwrap();
    assert!(
        said.iter()
            .any(|s| s.starts_with("kept the config") && s.ends_with("install did not write it")),
        "{said:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&l.config).unwrap(),
        r#"{"on_error":"deny"}"#
    );
    let said = uninstall(&l, &NOT_PACKAGED).unwrap();
    assert!(said[0].starts_with("nothing to remove"), "{said:?}");
}

#[test]
fn install_without_precreate_removes_its_earlier_precreate_file_only() {
    let t = tempfile::tempdir().unwrap();
    let l = layout(t.path());
    let bin = t.path().join("hook");
    tiny_static_elf(&bin);
    let precreate = l.hooks_dir.join(PRECREATE_FILE);
    let flags = InstallFlags {
        with_precreate: true,
        allow_dynamic: false,
    };
    install(&l, &bin, flags, &NOT_PACKAGED).unwrap();
    assert!(precreate.exists());
    let said = install(&l, &bin, InstallFlags::default(), &NOT_PACKAGED).unwrap();
    assert!(
        !precreate.exists(),
        "declarative: no --with-precreate, no precreate file"
    );
    assert!(
        said.iter()
            .any(|s| s.starts_with(&format!("removed {}", precreate.display()))),
        "{said:?}"
    );
    assert!(l.hooks_dir.join(HOOK_FILE).exists());
    // A precreate file install did not write is left alone, and said so.
    std::fs::write(&precreate, r#"{"hook":{"path":"/opt/other"}}"#).unwrap();
    let said = install(&l, &bin, InstallFlags::default(), &NOT_PACKAGED).unwrap();
    assert!(precreate.exists());
    assert!(
        said.iter()
            .any(|s| s.starts_with(&format!("left {}", precreate.display()))),
        "{said:?}"
    );
}

#[test]
fn a_dynamic_or_non_elf_binary_is_refused_unless_allowed() {
    let t = tempfile::tempdir().unwrap();
    let l = layout(t.path());
    // The test binary itself is dynamically linked.
    let me = std::env::current_exe().unwrap();
    let e = install(&l, &me, InstallFlags::default(), &NOT_PACKAGED)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("checking the binary")
            && e.contains("dynamically linked")
            && e.contains("PT_INTERP asks for /")
            && e.contains("--allow-dynamic"),
        "{e}"
    );
    assert!(!t.path().join("prefix").exists() && !l.hooks_dir.exists() && !l.config.exists());
    let script = t.path().join("script");
    std::fs::write(&script, "#!/bin/sh\n".repeat(10)).unwrap();
    let e = install(&l, &script, InstallFlags::default(), &NOT_PACKAGED)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not an ELF file"), "{e}");
    let said = install(&l, &me, ANY, &NOT_PACKAGED).unwrap();
    assert!(
        said[0].starts_with(WARNING) && said[0].contains("dynamically linked"),
        "{said:?}"
    );
    assert!(!said[0].contains("pass --allow-dynamic"), "{said:?}");
}

#[test]
fn a_failed_write_names_the_step_and_the_path() {
    let t = tempfile::tempdir().unwrap();
    let mut l = layout(t.path());
    let bin = t.path().join("hook");
    tiny_static_elf(&bin);
    // A hooks dir in /proc: reading finds no file, writing fails (root included).
    l.hooks_dir = PathBuf::from("/proc/cpuplan-no-such-dir");
    let e = install(&l, &bin, InstallFlags::default(), &NOT_PACKAGED)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!(
            "writing the hooks.d file {}: ",
            l.hooks_dir.join(HOOK_FILE).display()
        )),
        "{e}"
    );
    let e = install(
        &Layout {
            prefix: bin.clone(),
            ..l.clone()
        },
        &bin,
        InstallFlags::default(),
        &NOT_PACKAGED,
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("writing the binary "), "{e}");
}

/// Every file and directory under `root` with its bytes (none for a directory).
fn tree(root: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut all = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p.clone());
                all.push((p, None));
            } else {
                all.push((p.clone(), Some(std::fs::read(&p).unwrap())));
            }
        }
    }
    all.sort();
    all
}

#[test]
fn a_dry_run_changes_nothing_and_records_what_the_real_run_then_does() {
    let t = tempfile::tempdir().unwrap();
    let l = layout(t.path());
    let bin = t.path().join("hook");
    tiny_static_elf(&bin);
    let before = tree(t.path());
    let (said, changes) = dry_run(|| install(&l, &bin, WITH_PRECREATE, &NOT_PACKAGED));
    said.unwrap();
    assert_eq!(tree(t.path()), before, "the dry run changed the tree");
    let text: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        text,
        [
            format!(
                "would create the directory {}",
                t.path().join("prefix").display()
            ),
            format!(
                "would create the directory {}",
                t.path().join("prefix/libexec").display()
            ),
            format!(
                "would create the directory {}",
                t.path().join("prefix/libexec/cpuplan").display()
            ),
            format!("would write {} (new, mode 0755)", l.binary().display()),
            format!("would create the directory {}", l.hooks_dir.display()),
            format!(
                "would write {} (new, mode 0644)",
                l.hooks_dir.join(HOOK_FILE).display()
            ),
            format!(
                "would write {} (new, mode 0644)",
                l.hooks_dir.join(PRECREATE_FILE).display()
            ),
            format!(
                "would create the directory {}",
                t.path().join("etc").display()
            ),
            format!(
                "would create the directory {}",
                t.path().join("etc/cpuplan").display()
            ),
            format!("would write {} (new, mode 0644)", l.config.display()),
            format!(
                "would write {} (new, mode 0644)",
                l.config_record().display()
            ),
        ]
    );
    install(&l, &bin, WITH_PRECREATE, &NOT_PACKAGED).unwrap();
    let after = tree(t.path());
    let made: Vec<&PathBuf> = after
        .iter()
        .filter(|e| !before.contains(e))
        .map(|e| &e.0)
        .collect();
    let listed: Vec<&Path> = changes.iter().map(Change::path).collect();
    let mut listed_sorted = listed.clone();
    listed_sorted.sort();
    assert_eq!(
        made, listed_sorted,
        "the real install made what the dry run listed"
    );
    // Again: every file is there, so each is replaced, and no directory is made.
    let (_, again) = dry_run(|| install(&l, &bin, InstallFlags::default(), &NOT_PACKAGED));
    assert!(
        again.iter().all(|c| !matches!(c, Change::CreateDir(_))),
        "{again:?}"
    );
    assert!(
        again.contains(&Change::Remove(l.hooks_dir.join(PRECREATE_FILE))),
        "declarative: the precreate file would go: {again:?}"
    );
    // uninstall's dry run: every file and the directories they leave empty, nothing changed.
    let (_, gone) = dry_run(|| uninstall(&l, &NOT_PACKAGED));
    assert_eq!(tree(t.path()), after);
    assert!(
        gone.contains(&Change::RemoveDir(t.path().join("prefix/libexec/cpuplan")))
            && gone.contains(&Change::RemoveDir(t.path().join("etc/cpuplan"))),
        "{gone:?}"
    );
    uninstall(&l, &NOT_PACKAGED).unwrap();
    let left = tree(t.path());
    let removed: Vec<&PathBuf> = after
        .iter()
        .filter(|e| !left.contains(e))
        .map(|e| &e.0)
        .collect();
    let mut listed: Vec<&Path> = gone.iter().map(Change::path).collect();
    listed.sort();
    assert_eq!(
        removed, listed,
        "the real uninstall removed what the dry run listed"
    );
}

#[test]
fn the_package_s_files_are_never_written_or_removed() {
    let t = tempfile::tempdir().unwrap();
    let l = layout(t.path());
    let bin = t.path().join("hook");
    tiny_static_elf(&bin);
    install(&l, &bin, WITH_PRECREATE, &NOT_PACKAGED).unwrap();
    let info = t.path().join("var/lib/dpkg/info");
    std::fs::create_dir_all(&info).unwrap();
    // dpkg lists the node's paths; the node's root is the temp dir here.
    std::fs::write(
        info.join("cpuplan.list"),
        format!("/.\n/hooks.d\n/hooks.d/{HOOK_FILE}\n"),
    )
    .unwrap();
    let packaged = Packaged::read(t.path());
    assert!(packaged.owns(&l.hooks_dir.join(HOOK_FILE)));
    let e = install(&l, &bin, ANY, &packaged).unwrap_err().to_string();
    assert!(
        e.contains("installed by the Debian package cpuplan") && e.contains(HOOK_FILE),
        "{e}"
    );
    let said = uninstall(&l, &packaged).unwrap();
    assert!(
        said.iter().any(|s| s
            == &format!(
                "kept {}: {}",
                l.hooks_dir.join(HOOK_FILE).display(),
                packaged::HINT
            )),
        "{said:?}"
    );
    assert!(
        l.hooks_dir.join(HOOK_FILE).exists(),
        "the package's file is kept"
    );
    assert!(!l.hooks_dir.join(PRECREATE_FILE).exists() && !l.binary().exists());
    // Only the package's left: nothing removed, and the first line says what to do.
    let said = uninstall(&l, &packaged).unwrap();
    assert_eq!(
        said[0],
        format!("nothing removed: cpuplan is {}", packaged::HINT),
        "{said:?}"
    );
}
