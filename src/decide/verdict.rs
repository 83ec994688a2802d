//! The verdict on a planning problem, the one rule every front end follows: under
//! `on_error: allow` the container starts (with the `off` plan carrying the cause, where the
//! front end writes one); under `deny` it is refused.

use super::problem::Problem;
use crate::config::OnError;

/// A container refused for a planning problem (`on_error: deny`): the cause, in one line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(transparent)]
pub struct Refusal {
    /// The planning problem.
    pub problem: Problem,
}

/// The verdict on `problem` under `on_error`: `Ok` where the container starts anyway.
pub fn verdict(on_error: OnError, problem: &Problem) -> Result<(), Refusal> {
    match on_error {
        OnError::Allow => Ok(()),
        OnError::Deny => Err(Refusal {
            problem: problem.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::ReadError;

    #[test]
    fn allow_starts_and_deny_refuses_with_the_cause() {
        let p = Problem::from(ReadError::EmptyMask);
        assert_eq!(verdict(OnError::Allow, &p), Ok(()));
        let r = verdict(OnError::Deny, &p).unwrap_err();
        assert_eq!(r.to_string(), ReadError::EmptyMask.to_string());
        assert_eq!(r.problem.cause(), "empty_mask");
    }
}
