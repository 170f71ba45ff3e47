//! The raw actix floor shared by `benches/throughput.rs` and
//! `examples/profile_cycle.rs`: the smallest useful actor, and the driver that
//! runs many requests at once, for the floor and the host alike.

use actix::prelude::*;
use futures_util::stream::{FuturesUnordered, StreamExt};

/// Runs `futures` concurrently and collects their outputs in completion
/// order (`join_all` keeps input order, paying a binary heap for it once
/// outputs arrive out of order, which grows the driver's cost with N).
///
/// The driver runs outside tokio's coop budget (`unconstrained`): inside it,
/// once 128 polls are spent in a round every other pending future is woken
/// again at once (`Defer::defer`) and re-polled, so driving N requests that
/// queue at one actor (the supervisor) from one task costs O(N²): at 100k,
/// 57 µs per subagent instead of 5 µs. The floor is driven the same way.
pub async fn all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    tokio::task::unconstrained(futures.into_iter().collect::<FuturesUnordered<F>>().collect()).await
}

/// The smallest useful actor: replies to a number with the number.
pub struct Echo;

impl Actor for Echo {
    type Context = Context<Self>;
}

/// A number to echo.
#[derive(Message)]
#[rtype(result = "u64")]
pub struct Ping(pub u64);

impl Handler<Ping> for Echo {
    type Result = u64;

    fn handle(&mut self, msg: Ping, _ctx: &mut Self::Context) -> u64 {
        msg.0
    }
}

/// Asks an actor to stop.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;

impl Handler<Stop> for Echo {
    type Result = ();

    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
