//! The event subscription a plugin answers `Configure` with: NRI's `EventMask`, bit `e - 1` for
//! each [`Event`] `e`. A mask of 0 means every event to the runtime, so a plugin never sends it.

use crate::api::Event;

/// A set of NRI events, as the `events` field of `ConfigureResponse` carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EventMask(pub i32);

/// Every event, in NRI's order (without `Unknown` and `Last`).
pub const EVENTS: [Event; 14] = [
    Event::RunPodSandbox,
    Event::StopPodSandbox,
    Event::RemovePodSandbox,
    Event::CreateContainer,
    Event::PostCreateContainer,
    Event::StartContainer,
    Event::PostStartContainer,
    Event::UpdateContainer,
    Event::PostUpdateContainer,
    Event::StopContainer,
    Event::RemoveContainer,
    Event::UpdatePodSandbox,
    Event::PostUpdatePodSandbox,
    Event::ValidateContainerAdjustment,
];

impl EventMask {
    /// No event.
    pub const NONE: EventMask = EventMask(0);

    /// The events NRI v0.6 to v0.9 know (containerd 1.7 and 2.0–2.1, CRI-O up to 1.33): 1 to 11.
    pub const UP_TO_V0_9: EventMask = EventMask((1 << 11) - 1);

    /// The events NRI v0.10 and later know: 1 to 14.
    pub const FROM_V0_10: EventMask = EventMask((1 << 14) - 1);

    /// The mask holding exactly `events`.
    pub const fn of(events: &[Event]) -> EventMask {
        let mut m = 0;
        let mut i = 0;
        while i < events.len() {
            m |= bit(events[i]);
            i += 1;
        }
        EventMask(m)
    }

    /// Whether `e` is in the set.
    pub const fn has(self, e: Event) -> bool {
        self.0 & bit(e) != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The events in both sets.
    pub const fn and(self, other: EventMask) -> EventMask {
        EventMask(self.0 & other.0)
    }

    /// The events of `self` not in `other`.
    pub const fn without(self, other: EventMask) -> EventMask {
        EventMask(self.0 & !other.0)
    }

    /// The events in the set, by name, comma-separated (for logs).
    pub fn names(self) -> String {
        EVENTS
            .iter()
            .filter(|e| self.has(**e))
            .map(|e| event_name(*e))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The bit of event `e` (none for `Unknown` and `Last`).
const fn bit(e: Event) -> i32 {
    match e {
        Event::Unknown | Event::Last => 0,
        e => 1 << (e as i32 - 1),
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
        Event::UpdatePodSandbox => "UpdatePodSandbox",
        Event::PostUpdatePodSandbox => "PostUpdatePodSandbox",
        Event::ValidateContainerAdjustment => "ValidateContainerAdjustment",
        Event::Last => "Last",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_event_minus_one() {
        let m = EventMask::of(&[
            Event::CreateContainer,
            Event::StopContainer,
            Event::RemoveContainer,
        ]);
        // CREATE_CONTAINER = 4 -> 1<<3, STOP_CONTAINER = 10 -> 1<<9, REMOVE_CONTAINER = 11 -> 1<<10
        assert_eq!(m.0, 0x8 | 0x200 | 0x400);
        assert_eq!(EventMask::of(&[Event::RunPodSandbox]).0, 1);
        assert_eq!(
            EventMask::of(&[Event::ValidateContainerAdjustment]).0,
            1 << 13
        );
        assert!(m.has(Event::CreateContainer));
        assert!(!m.has(Event::StartContainer));
        assert!(!m.has(Event::Unknown) && !m.has(Event::Last));
        assert_eq!(m.names(), "CreateContainer,StopContainer,RemoveContainer");
        assert_eq!(
            EventMask::of(&[Event::Unknown, Event::Last]),
            EventMask::NONE
        );
    }

    #[test]
    fn the_two_generations_of_valid_events() {
        // NRI 0.6-0.9: ValidEvents = (1 << (LAST(12) - 1)) - 1; 0.10+: LAST = 15.
        assert_eq!(EventMask::UP_TO_V0_9, EventMask::of(&EVENTS[..11]));
        assert_eq!(EventMask::FROM_V0_10, EventMask::of(&EVENTS));
        let newer = EventMask::of(&[Event::UpdatePodSandbox, Event::CreateContainer]);
        assert_eq!(
            newer.and(EventMask::UP_TO_V0_9),
            EventMask::of(&[Event::CreateContainer])
        );
        assert_eq!(
            newer.without(EventMask::UP_TO_V0_9).names(),
            "UpdatePodSandbox"
        );
    }
}
