//! The verdict on a planning problem, the one rule every front end follows: under
//! `on_error: allow` the container starts (with the `off` plan carrying the cause, where the
//! front end writes one); under `deny` it is refused.

use crate::config::OnError;

/// A container refused for a planning problem (`on_error: deny`): the cause, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct Refusal {
    /// The planning problem.
    pub problem: String,
}

/// The verdict on `problem` under `on_error`: `Ok` where the container starts anyway.
pub fn verdict(on_error: OnError, problem: &str) -> Result<(), Refusal> {
    match on_error {
        OnError::Allow => Ok(()),
        OnError::Deny => Err(Refusal {
            problem: problem.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_starts_and_deny_refuses_with_the_cause() {
        assert_eq!(verdict(OnError::Allow, "x"), Ok(()));
        let r = verdict(OnError::Deny, "the mask is empty").unwrap_err();
        assert_eq!(r.to_string(), "the mask is empty");
    }
}
