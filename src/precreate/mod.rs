//! podman's `precreate` stage: the runtime config on stdin, the config to use on stdout.
//!
//! The config is read and decided on as the hook does (no pid yet: the quota and mask come from
//! the config and the host), and the decision's [`SpecEdit`] is written into it: the plan's
//! variables added to `process.env` where the image or user has not set them,
//! `linux.resources.cpu.cpus` narrowed where the `numa` rule applies, and the plan in the
//! annotation `cpuplan.plan`. GPU claims and the plan files stay with the createRuntime hook.
//! Every member of the config that is not edited passes through byte for byte.

pub mod rawjson;

use std::path::Path;

use crate::config::HookConfig;
use crate::decide::{verdict, Ask, Course, Problem};
use crate::edit::SpecEdit;
use crate::read::bundle::parse_spec;
use crate::read::host::Host;
use crate::read::{read, Container, Live};
use rawjson::{MemberError, RawObject};

/// Why precreate refuses a config (only under `on_error: deny`).
#[derive(Debug, thiserror::Error)]
pub enum PrecreateError {
    /// The config cannot be planned for or edited.
    #[error("precreate: {0}")]
    Denied(Problem),
}

/// The config on stdin is not one precreate can edit.
#[derive(Debug, thiserror::Error)]
enum StdinError {
    /// Not UTF-8.
    #[error("<stdin>: {0}")]
    Utf8(#[source] std::str::Utf8Error),
    /// Not a JSON object.
    #[error("<stdin>: {0}")]
    Json(#[source] serde_json::Error),
    /// A member precreate writes is not what a config holds there.
    #[error("<stdin>: {0}")]
    Member(#[source] MemberError),
}

/// The config to use for `input` (a runtime config's JSON), planned with `config`; `cwd` is the
/// bundle directory the runtime runs the hook in.
///
/// With `on_error: allow`, a config that cannot be read or edited comes back unchanged, byte for
/// byte, and one that cannot be planned for gets the `off` plan's environment, so the container's
/// environment and its `plan.env` agree.
pub fn precreate(config: &HookConfig, input: &[u8], cwd: &Path) -> Result<Vec<u8>, PrecreateError> {
    // A debug build can be made to panic here, for the test that the binary fails open.
    #[cfg(debug_assertions)]
    if std::env::var_os("HOOK_TEST_PANIC").is_some() {
        panic!("HOOK_TEST_PANIC is set");
    }
    match plan_into(config, input, cwd) {
        Ok(out) => Ok(out),
        Err(problem) => match verdict(config.on_error, &problem) {
            Ok(()) => {
                log::warn!("precreate: config left unchanged: {problem}");
                Ok(input.to_vec())
            }
            // The stage's error is the one line the runtime shows.
            Err(r) => Err(PrecreateError::Denied(r.problem)),
        },
    }
}

fn plan_into(config: &HookConfig, input: &[u8], cwd: &Path) -> Result<Vec<u8>, Problem> {
    let spec = parse_spec(input, Path::new("<stdin>"), cwd).map_err(Problem::spec)?;
    let text = std::str::from_utf8(input).map_err(|e| Problem::spec(StdinError::Utf8(e)))?;
    let mut doc = RawObject::parse(text).map_err(|e| Problem::spec(StdinError::Json(e)))?;
    let container = Container {
        id: "(precreate)".into(),
        pid: None,
        bundle: Some(cwd.to_path_buf()),
    };
    let (host, inventory) = Host::stored(config, false);
    crate::read::host::log_inventory("(precreate)", &inventory);
    let inputs = read(&host, config, container, spec, &Live::default());
    let decision = Course::new(&inputs, config, Ask::Create).into_decision();
    decision.verdict(config.on_error).map_err(|r| r.problem)?;
    let edit = SpecEdit::new(&inputs, &decision, config);
    write_edit(&mut doc, &edit).map_err(|e| Problem::spec(StdinError::Member(e)))?;
    log::info!("precreate: {}", decision.plan.why);
    Ok(doc.to_json().into_bytes())
}

/// Writes `edit` into the config `doc`: env, cpus and annotations. Every key it writes is
/// there once afterwards: a member it sets loses its duplicates ([`RawObject::set`]), and an env
/// entry of a name it adds (one the reader does not count as set, such as a bare `NAME`) goes.
pub fn write_edit(doc: &mut RawObject, edit: &SpecEdit) -> Result<(), MemberError> {
    let mut process = doc.object("process", "$")?;
    let mut env: Vec<String> = process.typed("env", "$.process")?.unwrap_or_default();
    env.retain(|entry| {
        let name = entry.split_once('=').map_or(entry.as_str(), |(k, _)| k);
        !edit.env.iter().any(|(k, _)| k == name)
    });
    env.extend(edit.env.iter().map(|(k, v)| format!("{k}={v}")));
    process.set("env", &env);
    doc.set("process", &process);
    if let Some(cpus) = &edit.cpus {
        let mut linux = doc.object("linux", "$")?;
        let mut resources = linux.object("resources", "$.linux")?;
        let mut cpu = resources.object("cpu", "$.linux.resources")?;
        cpu.set("cpus", &cpus.to_string());
        resources.set("cpu", &cpu);
        linux.set("resources", &resources);
        doc.set("linux", &linux);
    }
    let mut annotations = doc.object("annotations", "$")?;
    for (k, v) in &edit.annotations {
        annotations.set(k, v);
    }
    doc.set("annotations", &annotations);
    Ok(())
}
