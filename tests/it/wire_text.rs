//! The hand-written event encoder (`WireEvent::write_fields`, what the host
//! sends) writes exactly the text serde writes from `WireEvent`'s
//! `Serialize`: for every kind of detail, strings that need escapes and
//! strings that do not, unicode, and ids at their extremes.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::sync::Arc;
use subagent_host::protocol::wire::{CostUsd, SubagentStatus, Usage};
use subagent_host::SubagentId;
use subagent_host::{Event, EventDetail, EventKind, TaskUsage, WireEvent};

/// Text with the characters that need escaping, unicode, and plain ASCII.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_0-9]{0,12}",
        proptest::collection::vec(
            prop_oneof![
                Just('"'),
                Just('\\'),
                Just('\n'),
                Just('\u{0}'),
                Just('\u{1f}'),
                Just('\u{7f}'),
                Just('é'),
                Just('\u{2028}'),
                Just('🦀'),
                proptest::char::range('a', 'z'),
            ],
            0..16
        )
        .prop_map(|chars| chars.into_iter().collect()),
    ]
}

fn id() -> impl Strategy<Value = SubagentId> {
    prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()].prop_map(SubagentId)
}

fn detail() -> impl Strategy<Value = EventDetail> {
    prop_oneof![
        Just(EventDetail::None),
        text().prop_map(EventDetail::Progress),
        (text(), text()).prop_map(|(from, kind)| EventDetail::Message { from, kind }),
        // Up to past the most an event lists on the wire (64).
        (text(), proptest::collection::vec(id(), 0..80))
            .prop_map(|(strategy, ids)| EventDetail::Merged { strategy: strategy.into(), subagent_ids: ids.into() }),
        any::<u32>().prop_map(|attempt| EventDetail::Resumed { attempt }),
        (text(), any::<u64>(), any::<u64>()).prop_map(|(provider, position, estimated_wait_ms)| {
            EventDetail::Throttled { provider: provider.into(), position, estimated_wait_ms }
        }),
    ]
}

fn usage() -> impl Strategy<Value = Usage> {
    (any::<u64>(), any::<u64>(), proptest::option::of(any::<u64>())).prop_map(|(input_tokens, output_tokens, cost)| {
        Usage { input_tokens, output_tokens, cost_usd: cost.map(CostUsd::from_nanos) }
    })
}

fn event() -> impl Strategy<Value = Event> {
    (
        id(),
        (0..EventKind::ALL.len()).prop_map(|at| EventKind::ALL[at]),
        (0..SubagentStatus::ALL.len()).prop_map(|at| SubagentStatus::ALL[at]),
        proptest::option::of(text()),
        proptest::option::of(text()),
        any::<u32>(),
        proptest::option::of(text()),
        detail(),
        proptest::option::of((usage(), usage())),
    )
        .prop_map(|(subagent_id, kind, status, parent, root, depth, error, detail, usage)| Event {
            subagent_id,
            kind,
            status,
            parent_agent_id: parent.map(Arc::from),
            root_agent_id: root.map(Arc::from),
            depth,
            error: error.map(Arc::from),
            detail,
            usage: usage.map(|(own, subtree)| TaskUsage { own, subtree }),
        })
}

#[test]
fn the_hand_written_event_text_is_serdes_byte_for_byte() {
    let mut runner = TestRunner::new(Config { cases: 2_000, ..Config::default() });
    runner
        .run(&event(), |event| {
            let by_serde = serde_json::to_string(&WireEvent(&event)).unwrap();
            let mut by_hand = b"{".to_vec();
            WireEvent(&event).write_fields(&mut by_hand);
            by_hand.push(b'}');
            prop_assert_eq!(String::from_utf8(by_hand).unwrap(), by_serde);
            Ok(())
        })
        .unwrap();
}

#[test]
fn an_encoded_event_line_is_its_envelope_and_the_serde_fields() {
    let event = Event {
        subagent_id: SubagentId(0x0a1b_2c3d),
        kind: EventKind::Progress,
        status: SubagentStatus::Running,
        parent_agent_id: Some("client \"agent\"".into()),
        root_agent_id: None,
        depth: 2,
        error: None,
        detail: EventDetail::Progress("line\nbreak".into()),
        usage: None,
    };
    let line: serde_json::Value = serde_json::from_str(&subagent_host::event_line(&event)).unwrap();
    let mut fields = serde_json::to_value(WireEvent(&event)).unwrap();
    let fields = fields.as_object_mut().unwrap();
    assert_eq!(line["type"], "SUBAGENT_EVENT");
    assert!(line["id"].as_str().is_some_and(|id| id.len() == 32));
    assert!(line.get("req_id").is_none(), "an event is no reply");
    for (key, value) in fields.iter() {
        assert_eq!(&line[key], value, "{key}");
    }
    assert_eq!(line.as_object().unwrap().len(), 4 + fields.len(), "type, id, a2e, ts and the fields");
}

#[test]
fn a_merged_event_lists_at_most_64_sources_on_the_wire_and_counts_them_all() {
    let merged = |n: u32| Event {
        subagent_id: SubagentId(1),
        kind: EventKind::Merged,
        status: SubagentStatus::Completed,
        parent_agent_id: None,
        root_agent_id: None,
        depth: 0,
        error: None,
        detail: EventDetail::Merged { strategy: "voting".into(), subagent_ids: (1..=n).map(SubagentId).collect() },
        usage: None,
    };
    let content = |n: u32| {
        let line: serde_json::Value = serde_json::from_str(&subagent_host::event_line(&merged(n))).unwrap();
        line["content"].clone()
    };
    let small = content(3);
    assert_eq!(small["sources"], 3);
    assert_eq!(small["subagent_ids"], serde_json::json!(["sub_00000001", "sub_00000002", "sub_00000003"]));
    assert!(small.get("truncated").is_none());
    let large = content(10_000);
    assert_eq!(large["sources"], 10_000);
    let listed = large["subagent_ids"].as_array().unwrap();
    assert_eq!(listed.len(), subagent_host::MERGED_IDS_ON_THE_WIRE);
    assert_eq!(listed[0], "sub_00000001", "the first sources, in request order");
    assert_eq!(large["truncated"], true);
}
