//! `install` and `uninstall`: the binary, the registrations and a default hook config.

use std::io::Write;
use std::path::PathBuf;

use super::{Args, CliError, Command, Context, Exit};
use crate::install::nri::{self, Nri};
use crate::install::{containerd, InstallError, InstallFlags, Options, WARNING};

const USAGE: &str = "\
usage: cpuplan install [--prefix DIR] [--hooks-dir DIR] [--with-precreate] [--config PATH]
                       [--allow-dynamic] [--root-prefix DIR] [--containerd
                       [--containerd-config PATH] [--containerd-runtimes A,B] [--ctr-root DIR]]
                       [--dry-run]
       cpuplan install --nri [--containerd-config PATH] [--root-prefix DIR] [--dry-run]
       cpuplan uninstall [the same options, without --with-precreate and --allow-dynamic]

install copies cpuplan-hook (the one beside this binary) to <prefix>/libexec/cpuplan/cpuplan-hook
(prefix /usr/local), writes cpuplan.json (and with --with-precreate cpuplan-precreate.json) into
the hooks dir, and writes a default hook config at --config (/etc/cpuplan/hook.json) if none exists. The hooks dir is where
podman and CRI-O read on this host: the first of [engine] hooks_dir in podman's containers.conf
($CONTAINERS_CONF, else /usr/share/containers/containers.conf, /etc/containers/containers.conf,
/etc/containers/containers.conf.d/*.conf) when one sets it, else their built-in default
/usr/share/containers/oci/hooks.d. Idempotent; refuses to overwrite a file it did not write.
Declarative: without --with-precreate, a cpuplan-precreate.json an earlier install wrote is
removed. uninstall removes them and says what it removed, or that there was nothing; it removes
the config only when install wrote it and it is unchanged since, and says why it kept it
otherwise.

The hook must be static (no ELF PT_INTERP: no dynamic loader runs as root with the hook's
environment; scripts/build-static.sh builds it): install refuses a dynamically linked one unless
--allow-dynamic, which installs it with a warning.

--containerd also registers the hook with containerd's CRI plugin: the base runtime spec
cpuplan-base-spec.json (`ctr oci spec` plus the hooks) and the drop-in conf.d/cpuplan.toml
beside --containerd-config (/etc/containerd/config.toml), which gets an `imports` entry for it
unless one covers it. The drop-in sets base_runtime_spec and pod_annotations = [\"cpuplan.*\"]
for --containerd-runtimes (default: the default runtime). Restart containerd afterwards.
--ctr-root runs ctr chrooted into the node's root as mounted here (default /).
--root-prefix puts every default path under DIR (a relocated node seen the same way by
install and the runtime).

--nri turns containerd's NRI on for the NRI plugin (`cpuplan-nri`) and writes nothing
else (no binary, no hooks.d file, no hook config): the drop-in conf.d/cpuplan-nri.toml beside
--containerd-config, NRI's section with disable = false, and its `imports` entry. containerd 1.7
needs it (NRI is off by default there); 2.x has NRI on. Restart containerd afterwards, then run
the plugin (the Debian package's unit: systemctl enable --now cpuplan-nri).
uninstall --nri removes exactly the drop-in and the import.
Edits of containerd's config.toml keep its owner, group and mode.

--dry-run changes nothing: it prints each file the command would write (new), replace, or
remove, each directory it would create or remove, then what it would keep and the restart to
do, and `nothing was changed`.

On a node with the Debian package cpuplan (dpkg's list under --root-prefix), install writes none
of the package's files (it refuses) and uninstall removes none of them: it keeps each and says to
remove the package with the package manager (apt remove cpuplan).
";

/// The options `install` and `uninstall` share.
const OPTIONS: &[&str] = &[
    "prefix",
    "hooks-dir",
    "root-prefix",
    "containerd-config",
    "containerd-runtimes",
    "ctr-root",
];

/// `install`.
pub const INSTALL: Command = Command {
    name: "install",
    summary:
        "install the binary, the hooks.d files, containerd's registration and a default config",
    usage: USAGE,
    valued: OPTIONS,
    switches: &[
        "with-precreate",
        "allow-dynamic",
        "containerd",
        "nri",
        "dry-run",
    ],
    run: install,
};

/// `uninstall`.
pub const UNINSTALL: Command = Command {
    name: "uninstall",
    summary: "undo install",
    usage: USAGE,
    valued: OPTIONS,
    switches: &["containerd", "nri", "dry-run"],
    run: uninstall,
};

/// The install options of the command line.
fn options(ctx: &Context, a: &Args) -> Options {
    let p = |k: &str| a.value(k).map(PathBuf::from);
    Options {
        root_prefix: p("root-prefix"),
        prefix: p("prefix"),
        hooks_dir: p("hooks-dir"),
        config: ctx.config_given.then(|| ctx.config.to_path_buf()),
        containerd: a.switch("containerd"),
        containerd_config: p("containerd-config"),
        containerd_runtimes: a
            .value("containerd-runtimes")
            .map(|v| {
                v.split(',')
                    .filter(|r| !r.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
        ctr_root: p("ctr-root"),
    }
}

/// Prints `lines` to `out`, warnings to stderr.
fn say(out: &mut dyn Write, lines: Vec<String>) -> Result<Exit, CliError> {
    for line in lines {
        if line.starts_with(WARNING) {
            eprintln!("cpuplan: {line}");
        } else {
            writeln!(out, "{line}")?;
        }
    }
    Ok(Exit::Ok)
}

/// An install error of `command`, named in its message: a failed file operation exits 1, a
/// refusal (a file install did not write, a dynamic binary, containerd's config) 2.
#[derive(Debug, thiserror::Error)]
#[error("{command}: {source}")]
struct StepError {
    command: &'static str,
    source: InstallError,
}

/// An existing hook config that fails to load: `install` changes nothing (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("install: {0}; nothing was changed (fix it; cpuplan check-config checks it)")]
struct BadConfig(crate::config::ConfigError);

fn failed(command: &'static str) -> impl Fn(InstallError) -> CliError {
    move |source| {
        let io = matches!(source, InstallError::Io { .. });
        let e = StepError { command, source };
        if io {
            CliError::Failed(e.to_string())
        } else {
            CliError::input(e)
        }
    }
}

/// Refuses `--nri` with an option that belongs to the hook's install: `--nri` touches only
/// containerd's NRI drop-in and its import.
fn only_nri(command: &str, a: &Args, switches: &[&str]) -> Result<(), CliError> {
    let valued = ["prefix", "hooks-dir", "containerd-runtimes", "ctr-root"];
    let clash = switches
        .iter()
        .find(|s| a.switch(s))
        .or_else(|| valued.iter().find(|v| a.value(v).is_some()));
    match clash {
        Some(o) => Err(CliError::Usage(format!(
            "{command}: --nri writes only containerd's NRI drop-in and its import; run {command} --{o} separately"
        ))),
        None => Ok(()),
    }
}

fn install(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    if a.switch("nri") {
        only_nri(
            "install",
            a,
            &["containerd", "with-precreate", "allow-dynamic"],
        )?;
        let n = Nri::resolve(&options(ctx, a)).map_err(failed("install --nri"))?;
        return report(out, "install --nri", a, || {
            nri::install(&n).map_err(failed("install --nri"))
        });
    }
    let me = hook_binary()?;
    let opts = options(ctx, a);
    let (layout, registration) = opts.resolve().map_err(failed("install"))?;
    // An existing config that fails to load is refused before anything changes: with it, every
    // container would get the off plan (`check-config` says the same).
    if layout.config.exists() {
        super::check::check(&layout.config, true).map_err(|e| CliError::input(BadConfig(e)))?;
    }
    let flags = InstallFlags {
        with_precreate: a.switch("with-precreate"),
        allow_dynamic: a.switch("allow-dynamic"),
    };
    let packaged = opts.packaged().map_err(failed("install"))?;
    report(out, "install", a, || {
        let mut said =
            crate::install::install(&layout, &me, flags, &packaged).map_err(failed("install"))?;
        if let Some(legacy) = opts.legacy_hooks_dir().map_err(failed("install"))? {
            said.extend(
                crate::install::remove_legacy(&layout, &legacy).map_err(failed("install"))?,
            );
        }
        if let Some(c) = &registration {
            said.extend(containerd::install(&layout, c).map_err(failed("install --containerd"))?);
        }
        Ok(said)
    })
}

/// The lines of an install or uninstall that report a change made (a dry run lists its
/// changes instead); the others (what was kept, a restart to do) it prints as they are.
const CHANGE_WORDS: [&str; 6] = [
    "installed ",
    "registered ",
    "removed ",
    "wrote ",
    "edited ",
    "created ",
];

/// Runs `run` (the steps of `command`) and prints what it reports; with `--dry-run`, runs it
/// with every change to the host recorded instead of made, and prints those changes (`would
/// write …`, `would replace …`, `would remove …`), then the lines that are not changes (what
/// it keeps, the restart to do), then that nothing changed.
fn report(
    out: &mut dyn Write,
    command: &str,
    a: &Args,
    run: impl FnOnce() -> Result<Vec<String>, CliError>,
) -> Result<Exit, CliError> {
    if !a.switch("dry-run") {
        return say(out, run()?);
    }
    let (said, changes) = crate::install::dry_run(run);
    let said = said?;
    if changes.is_empty() {
        writeln!(out, "would change nothing")?;
    }
    for change in &changes {
        writeln!(out, "{change}")?;
    }
    let notes = said
        .into_iter()
        .filter(|l| !CHANGE_WORDS.iter().any(|w| l.starts_with(w)))
        .collect();
    say(out, notes)?;
    writeln!(out, "{command} --dry-run: nothing was changed")?;
    Ok(Exit::Ok)
}

/// The `cpuplan-hook` binary install copies: the one beside this program (both are built, and
/// packaged, into one directory).
fn hook_binary() -> Result<PathBuf, CliError> {
    let me = std::env::current_exe()
        .map_err(|e| CliError::Failed(format!("install: cannot find this binary: {e}")))?;
    let hook = me.with_file_name("cpuplan-hook");
    if !hook.is_file() {
        return Err(CliError::Failed(format!(
            "install: no cpuplan-hook beside this binary ({} is not a file)",
            hook.display()
        )));
    }
    Ok(hook)
}

fn uninstall(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    if a.switch("nri") {
        only_nri("uninstall", a, &["containerd"])?;
        let n = Nri::resolve(&options(ctx, a)).map_err(failed("uninstall --nri"))?;
        return report(out, "uninstall --nri", a, || {
            nri::uninstall(&n).map_err(failed("uninstall --nri"))
        });
    }
    let opts = options(ctx, a);
    let (layout, registration) = opts.resolve().map_err(failed("uninstall"))?;
    let packaged = opts.packaged().map_err(failed("uninstall"))?;
    report(out, "uninstall", a, || {
        let mut said = Vec::new();
        if let Some(c) = &registration {
            said.extend(
                containerd::uninstall(&layout, c).map_err(failed("uninstall --containerd"))?,
            );
        }
        said.extend(crate::install::uninstall(&layout, &packaged).map_err(failed("uninstall"))?);
        if let Some(legacy) = opts.legacy_hooks_dir().map_err(failed("uninstall"))? {
            said.extend(
                crate::install::remove_legacy(&layout, &legacy).map_err(failed("uninstall"))?,
            );
        }
        Ok(said)
    })
}
