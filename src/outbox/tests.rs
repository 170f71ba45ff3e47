//! The outbox's unit tests: its byte bound, overflow, reservations and
//! stalls.

use super::*;
use std::time::Duration;

#[test]
fn pushes_overflow_at_twice_the_byte_bound_and_taking_a_line_releases_its_bytes() {
    let (outbox, mut rx) = Outbox::new(100, 5);
    outbox.push("123456".into());
    outbox.push("7890".into());
    assert_eq!(outbox.queued_bytes(), 10);
    assert_eq!(rx.try_recv().unwrap(), "123456");
    assert_eq!(outbox.queued_bytes(), 4);
    outbox.push("abcdef".into());
    assert!(!outbox.overflowed().is_cancelled(), "taking released the bytes");
    outbox.push("x".into());
    assert!(outbox.overflowed().is_cancelled(), "11 bytes do not fit in twice 5");
    assert_eq!(outbox.queued_bytes(), 10);
}

#[test]
fn a_dropped_receiver_is_a_client_gone_not_a_full_outbox() {
    let (outbox, rx) = Outbox::new(100, 100);
    outbox.push("a".into());
    assert!(!outbox.client_gone());
    drop(rx);
    outbox.push("b".into());
    assert!(outbox.overflowed().is_cancelled(), "the session ends");
    assert!(outbox.client_gone(), "because the client is gone");

    let (outbox, _rx) = Outbox::new(1, 100);
    outbox.push("a".into());
    outbox.push("b".into());
    assert!(outbox.overflowed().is_cancelled());
    assert!(!outbox.client_gone(), "a full outbox is a slow client");
}

#[test]
fn one_line_longer_than_the_bound_fits_an_empty_outbox() {
    let (outbox, mut rx) = Outbox::new(100, 4);
    outbox.push("a long line".into());
    assert!(!outbox.overflowed().is_cancelled());
    assert_eq!(rx.try_recv().unwrap(), "a long line");
    assert_eq!(outbox.queued_bytes(), 0);
}

#[actix_rt::test]
async fn a_reservation_waits_for_room_and_taking_a_line_makes_it() {
    let (outbox, mut rx) = Outbox::new(100, 10);
    let first = outbox.reserve(8).await;
    outbox.push_reserved("12345678".into(), first);
    assert_eq!(outbox.queued_bytes(), 8);
    let waiting = {
        let outbox = outbox.clone();
        actix_rt::spawn(async move { outbox.reserve(8).await.bytes })
    };
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished(), "8 + 8 bytes do not fit in 10");
    assert_eq!(rx.recv().await.unwrap(), "12345678");
    assert_eq!(waiting.await.unwrap(), 8, "taken: room for it");
    assert_eq!(outbox.queued_bytes(), 0, "the reservation was dropped unused");
}

#[actix_rt::test]
async fn a_full_outbox_that_nobody_reads_stalls_and_one_that_is_read_does_not() {
    let (outbox, mut rx) = Outbox::new(100, 4);
    outbox.push("12345".into());
    assert!(!outbox.stalled(Duration::from_secs(3600)));
    std::thread::sleep(Duration::from_millis(30));
    assert!(outbox.stalled(Duration::from_millis(20)), "full, and nothing taken for 30 ms");
    rx.try_recv().unwrap();
    outbox.push("12345".into());
    assert!(!outbox.stalled(Duration::from_millis(20)), "pushed into an empty outbox: progress");
}
