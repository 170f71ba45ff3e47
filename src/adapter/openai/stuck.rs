//! The stuck detector of one task's tool-calling loop: a model that repeats
//! itself is told so, and one that keeps at it is stopped.
//!
//! Three patterns, each bounded by `[limits] max_repeated_tool_calls` (N):
//! - `repeated_call`: the same call (tool and arguments) N times in a row;
//! - `repeated_error`: the same tool failing with the same error N times in
//!   a row, whatever its arguments;
//! - `alternation`: two calls taking turns (A B A B …), each made N times.
//!
//! Past N the next call of the pattern is not made: the model is answered
//! `{"error": "repeated call: …"}` instead. When it has been refused N times
//! more without doing anything else, the task ends `FAILED`, its error
//! beginning `stuck:`.

use serde_json::{json, Value};

use super::client::ToolCall;

/// What to do with a tool call.
#[derive(Debug, PartialEq)]
pub(super) enum Verdict {
    /// Make it.
    Go,
    /// Do not make it; answer the model with this.
    Refuse {
        /// The pattern (`repeated_call`, `repeated_error`, `alternation`).
        pattern: &'static str,
        /// The model's answer.
        answer: Value,
    },
    /// End the task: the error, beginning `stuck:`, and the pattern.
    Stuck {
        /// The pattern.
        pattern: &'static str,
        /// The task's error.
        error: String,
    },
}

/// One call as the detector compares them.
#[derive(Debug, Clone, PartialEq)]
struct Made {
    name: String,
    // The arguments, parsed when they are JSON (so spacing and key order do
    // not make two calls differ), else as sent.
    arguments: Value,
    // How it failed, when it did (its `error` text).
    error: Option<String>,
}

/// The calls of one task so far, as far as the patterns look back.
#[derive(Debug)]
pub(super) struct StuckDetector {
    limit: usize,
    // The calls made or refused, newest last (at most `2 * limit + 1` kept).
    made: Vec<Made>,
    // Calls refused since the last call that was made.
    refused: usize,
}

impl StuckDetector {
    /// A detector allowing `limit` repeats (0: it never interferes).
    pub(super) fn new(limit: u32) -> Self {
        Self { limit: limit as usize, made: Vec::new(), refused: 0 }
    }

    /// Judges `call` before it is made.
    pub(super) fn judge(&mut self, call: &ToolCall) -> Verdict {
        if self.limit == 0 {
            return Verdict::Go;
        }
        let next = Made { name: call.name.clone(), arguments: parse(&call.arguments), error: None };
        let Some((pattern, what)) = self.pattern(&next) else {
            return Verdict::Go;
        };
        // A refused call still counts in its pattern (a refused repeat of a
        // failure fails the same way), so the pattern goes on being seen.
        let error =
            if pattern == "repeated_error" { self.made.last().and_then(|made| made.error.clone()) } else { None };
        self.remember(Made { error, ..next });
        self.refused += 1;
        crate::metrics::metrics().stuck(pattern);
        if self.refused > self.limit {
            return Verdict::Stuck {
                pattern,
                error: format!("stuck: {what}, and the model kept making it after {} refusals", self.limit),
            };
        }
        let answer = json!({
            "error": format!(
                "repeated call: {what}. It was not made again: it would answer the same. Do something \
                 else (other arguments, another tool), or give your final answer with what you have."
            )
        });
        Verdict::Refuse { pattern, answer }
    }

    /// Records a call that was made, with its answer (an `{"error": …}`
    /// answer, or an MCP result with `isError`, counts as a failure).
    pub(super) fn made(&mut self, call: &ToolCall, answer: &Value) {
        if self.limit == 0 {
            return;
        }
        self.refused = 0;
        let error = answer.get("error").map(text_of).or_else(|| {
            (answer.get("isError") == Some(&Value::Bool(true)))
                .then(|| text_of(answer.get("content").unwrap_or(answer)))
        });
        self.remember(Made { name: call.name.clone(), arguments: parse(&call.arguments), error });
    }

    // Keeps `made` as the newest call, and no more calls than a pattern
    // looks back over.
    fn remember(&mut self, made: Made) {
        self.made.push(made);
        let keep = 2 * self.limit + 1;
        if self.made.len() > keep {
            self.made.drain(..self.made.len() - keep);
        }
    }

    // The pattern `next` would extend past the limit, and how to say it.
    fn pattern(&self, next: &Made) -> Option<(&'static str, String)> {
        let n = self.limit;
        let recent = |count: usize| self.made.len() >= count;
        let tail = |count: usize| &self.made[self.made.len() - count..];
        let same = |a: &Made, b: &Made| a.name == b.name && a.arguments == b.arguments;
        if recent(n) && tail(n).iter().all(|made| same(made, next)) {
            return Some((
                "repeated_call",
                format!("`{}` with these arguments was called {n} times in a row", next.name),
            ));
        }
        if recent(n) {
            let last = tail(n);
            let error = last[0].error.as_ref();
            if error.is_some() && last.iter().all(|made| made.name == next.name && made.error.as_ref() == error) {
                let error = error.map(String::as_str).unwrap_or_default();
                return Some((
                    "repeated_error",
                    format!("`{}` failed the same way {n} times in a row ({})", next.name, clip(error)),
                ));
            }
        }
        // A B A B … A B, then A again: each of the two made n times.
        if recent(2 * n) {
            let last = tail(2 * n);
            let (a, b) = (&last[0], &last[1]);
            let alternates =
                !same(a, b) && last.iter().enumerate().all(|(at, made)| same(made, if at % 2 == 0 { a } else { b }));
            if alternates && same(next, a) {
                return Some((
                    "alternation",
                    format!(
                        "`{}` and `{}` were called by turns, each {n} times with the same arguments",
                        a.name, b.name
                    ),
                ));
            }
        }
        None
    }
}

fn parse(arguments: &str) -> Value {
    let text = if arguments.trim().is_empty() { "{}" } else { arguments };
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

// An error quoted in a note, cut to a readable length.
fn clip(text: &str) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall { id: "c".into(), name: name.into(), arguments: arguments.into() }
    }

    // Makes `call` if the detector lets it, answering `answer`.
    fn step(detector: &mut StuckDetector, call: &ToolCall, answer: Value) -> Verdict {
        let verdict = detector.judge(call);
        if verdict == Verdict::Go {
            detector.made(call, &answer);
        }
        verdict
    }

    fn pattern_of(verdict: &Verdict) -> Option<&'static str> {
        match verdict {
            Verdict::Go => None,
            Verdict::Refuse { pattern, .. } | Verdict::Stuck { pattern, .. } => Some(pattern),
        }
    }

    #[test]
    fn the_same_call_is_refused_past_the_limit_then_the_task_is_stuck() {
        let mut detector = StuckDetector::new(3);
        let same = call("fs__read", r#"{"path": "/a", "n": 1}"#);
        let respaced = call("fs__read", r#"{"n":1,"path":"/a"}"#);
        for _ in 0..2 {
            assert_eq!(step(&mut detector, &same, json!("ok")), Verdict::Go);
        }
        assert_eq!(step(&mut detector, &respaced, json!("ok")), Verdict::Go, "the same arguments, respaced");
        for _ in 0..3 {
            let verdict = step(&mut detector, &same, json!("ok"));
            let Verdict::Refuse { pattern: "repeated_call", answer } = verdict else { panic!("{verdict:?}") };
            let text = answer["error"].as_str().unwrap();
            assert!(text.starts_with("repeated call: `fs__read`") && text.contains("3 times"), "{text}");
        }
        let Verdict::Stuck { pattern: "repeated_call", error } = step(&mut detector, &same, json!("ok")) else {
            panic!("not stuck")
        };
        assert!(error.starts_with("stuck: `fs__read`"), "{error}");
    }

    #[test]
    fn another_call_in_between_resets_the_count() {
        let mut detector = StuckDetector::new(2);
        let a = call("a", "{}");
        assert_eq!(step(&mut detector, &a, json!(1)), Verdict::Go);
        assert_eq!(step(&mut detector, &a, json!(1)), Verdict::Go);
        assert!(matches!(step(&mut detector, &a, json!(1)), Verdict::Refuse { .. }));
        assert_eq!(step(&mut detector, &call("b", "{}"), json!(1)), Verdict::Go, "something else clears it");
        assert_eq!(step(&mut detector, &a, json!(1)), Verdict::Go);
    }

    #[test]
    fn a_tool_failing_the_same_way_with_other_arguments_is_caught() {
        let mut detector = StuckDetector::new(3);
        let denied = json!({ "error": "access denied" });
        for n in 0..3 {
            assert_eq!(
                step(&mut detector, &call("fs__read", &format!(r#"{{"path": "/{n}"}}"#)), denied.clone()),
                Verdict::Go
            );
        }
        let verdict = step(&mut detector, &call("fs__read", r#"{"path": "/9"}"#), denied.clone());
        assert_eq!(pattern_of(&verdict), Some("repeated_error"));
        let mcp_failure = json!({ "isError": true, "content": [{ "type": "text", "text": "no" }] });
        let mut detector = StuckDetector::new(2);
        for n in 0..2 {
            assert_eq!(step(&mut detector, &call("x", &format!("{{\"n\": {n}}}")), mcp_failure.clone()), Verdict::Go);
        }
        assert_eq!(pattern_of(&detector.judge(&call("x", r#"{"n": 7}"#))), Some("repeated_error"));
        assert_eq!(detector.judge(&call("y", "{}")), Verdict::Go, "another tool may still be tried");
    }

    #[test]
    fn two_calls_taking_turns_are_caught_and_zero_disables_every_pattern() {
        let mut detector = StuckDetector::new(3);
        let (a, b) = (call("a", r#"{"k": 1}"#), call("b", "{}"));
        for _ in 0..3 {
            assert_eq!(step(&mut detector, &a, json!(1)), Verdict::Go);
            assert_eq!(step(&mut detector, &b, json!(2)), Verdict::Go);
        }
        assert_eq!(pattern_of(&step(&mut detector, &a, json!(1))), Some("alternation"));

        let mut off = StuckDetector::new(0);
        for _ in 0..50 {
            assert_eq!(step(&mut off, &a, json!({ "error": "e" })), Verdict::Go);
        }
    }
}
