//! The event subscription a plugin answers `Configure` with: NRI's `EventMask`, bit `e - 1` for
//! each [`Event`] `e` (`pkg/api/event.go`).

use super::proto::Event;

/// A set of NRI events, as the `events` field of `ConfigureResponse` carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventMask(pub i32);

impl EventMask {
    /// The events the cpuplan plugin subscribes to: CreateContainer (to place the container),
    /// StopContainer and RemoveContainer (to release what it was given).
    pub const CPUPLAN: EventMask = EventMask::of(&[
        Event::CreateContainer,
        Event::StopContainer,
        Event::RemoveContainer,
    ]);

    /// The mask holding exactly `events`.
    pub const fn of(events: &[Event]) -> EventMask {
        let mut m = 0;
        let mut i = 0;
        while i < events.len() {
            m |= 1 << (events[i] as i32 - 1);
            i += 1;
        }
        EventMask(m)
    }

    /// Whether `e` is in the set.
    pub fn has(self, e: Event) -> bool {
        e != Event::Unknown && self.0 & (1 << (e as i32 - 1)) != 0
    }

    /// The events in the set, by name, comma-separated (for logs).
    pub fn names(self) -> String {
        (1..=11)
            .filter_map(|n| Event::try_from(n).ok())
            .filter(|e| self.has(*e))
            .map(event_name)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The event's name in NRI's Go API (`CreateContainer`…), for logs.
pub fn event_name(e: Event) -> &'static str {
    match e {
        Event::Unknown => "Unknown",
        Event::RunPodSandbox => "RunPodSandbox",
        Event::StopPodSandbox => "StopPodSandbox",
        Event::RemovePodSandbox => "RemovePodSandbox",
        Event::CreateContainer => "CreateContainer",
        Event::PostCreateContainer => "PostCreateContainer",
        Event::StartContainer => "StartContainer",
        Event::PostStartContainer => "PostStartContainer",
        Event::UpdateContainer => "UpdateContainer",
        Event::PostUpdateContainer => "PostUpdateContainer",
        Event::StopContainer => "StopContainer",
        Event::RemoveContainer => "RemoveContainer",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_event_minus_one() {
        // NRI: CREATE_CONTAINER = 4 -> 1<<3, STOP_CONTAINER = 10 -> 1<<9, REMOVE_CONTAINER = 11 -> 1<<10
        assert_eq!(EventMask::CPUPLAN.0, 0x8 | 0x200 | 0x400);
        assert_eq!(EventMask::of(&[Event::RunPodSandbox]).0, 1);
        assert!(EventMask::CPUPLAN.has(Event::CreateContainer));
        assert!(!EventMask::CPUPLAN.has(Event::StartContainer));
        assert!(!EventMask::CPUPLAN.has(Event::Unknown));
        assert_eq!(
            EventMask::CPUPLAN.names(),
            "CreateContainer,StopContainer,RemoveContainer"
        );
    }

    #[test]
    fn within_what_nri_0_6_accepts() {
        // NRI 0.6 rejects bits at or above LAST - 1 = 11 ("invalid plugin events").
        assert_eq!(EventMask::CPUPLAN.0 & !((1 << 11) - 1), 0);
    }
}
