//! Loading one stored session whole: its row, its subagents with their
//! tasks, memories and mailboxes, its journal and its unserved frames.

use serde_json::Value;
use std::collections::HashMap;

use super::cells::{parse_id, parse_json, to_u32};
use super::sql_store::SqlStore;
use crate::entries::InboxMessage;
use crate::protocol::wire::SubagentMessagePayload;
use crate::protocol::wire::{SubagentStatus, Usage};
use crate::store::batch;
use crate::store::{Checkpoint, SessionRow, StoreError, StoredSession, StoredSubagent, StoredTask, SubagentRow};

impl SqlStore {
    pub(super) async fn load_session(&self, id: &str) -> Result<Option<StoredSession>, StoreError> {
        let mut sessions = self
            .fetch(
                "SELECT agent_id, capabilities, principal, transport, next_seq, handshaken, last_inbound FROM sessions WHERE id = $1",
                id,
                "ttttiii",
            )
            .await?;
        let Some(mut session) = sessions.pop() else { return Ok(None) };
        let high_water = u64::try_from(session[6].int()).unwrap_or(0);
        let capabilities: Vec<String> = parse_json(session[1].text())?;
        let row = SessionRow {
            id: id.into(),
            agent_id: session[0].text().unwrap_or_default(),
            capabilities,
            principal: session[2].text(),
            transport: session[3].text().unwrap_or_default(),
            handshaken: session[5].int() != 0,
        };
        let mut next_seq = u64::try_from(session[4].int()).unwrap_or(1).max(1);

        let mut tasks = HashMap::new();
        for mut task in self
            .fetch(
                "SELECT subagent_id, task, task_no, attempt, step, checkpoint FROM tasks WHERE session_id = $1",
                id,
                "ttiiit",
            )
            .await?
        {
            let subagent = parse_id(task[0].text())?;
            let checkpoint = match task[5].text() {
                Some(state) => Some(Checkpoint { step: to_u32(task[4].int()), state: parse_json(Some(state))? }),
                None => None,
            };
            tasks.insert(
                subagent,
                StoredTask {
                    task: parse_json(task[1].text())?,
                    task_no: u64::try_from(task[2].int()).unwrap_or(0),
                    attempt: to_u32(task[3].int()),
                    position: u64::try_from(task[4].int()).unwrap_or(0),
                    checkpoint,
                },
            );
        }
        let mut memories = HashMap::new();
        for mut memory in self.fetch("SELECT owner_id, entries FROM memories WHERE session_id = $1", id, "tt").await? {
            memories.insert(parse_id(memory[0].text())?, parse_json::<Vec<Value>>(memory[1].text())?);
        }
        let mut mailboxes = HashMap::new();
        for mut mailbox in
            self.fetch("SELECT subagent_id, messages FROM mailboxes WHERE session_id = $1", id, "tt").await?
        {
            let stored: Vec<batch::StoredMessage> = parse_json(mailbox[1].text())?;
            let messages = stored
                .into_iter()
                .map(|m| InboxMessage {
                    from: m.from,
                    payload: SubagentMessagePayload { kind: m.kind, content: m.content },
                })
                .collect::<Vec<_>>();
            mailboxes.insert(parse_id(mailbox[0].text())?, messages);
        }
        let mut subagents = Vec::new();
        for mut sub in self
            .fetch(
                "SELECT id, ord, parent_id, parent_agent_id, root_agent_id, depth, spawn_key, tasks_started, \
                 config, status, result, error, usage_input, usage_output FROM subagents \
                 WHERE session_id = $1 ORDER BY ord",
                id,
                "titttitittttii",
            )
            .await?
        {
            let subagent = parse_id(sub[0].text())?;
            let parent = match sub[2].text() {
                Some(text) => Some(parse_id(Some(text))?),
                None => None,
            };
            let status: SubagentStatus = serde_json::from_value(Value::String(sub[9].text().unwrap_or_default()))
                .map_err(|err| StoreError(format!("stored status: {err}")))?;
            let result = match sub[10].text() {
                Some(text) => Some(parse_json(Some(text))?),
                None => None,
            };
            let row = SubagentRow {
                ord: u64::try_from(sub[1].int()).unwrap_or(0),
                parent,
                parent_agent_id: sub[3].text().map(Into::into),
                root_agent_id: sub[4].text().map(Into::into),
                depth: to_u32(sub[5].int()),
                spawn_key: sub[6].text().map(Into::into),
                tasks_started: u64::try_from(sub[7].int()).unwrap_or(0),
                config: std::sync::Arc::new(parse_json(sub[8].text())?),
                status,
                result,
                error: sub[11].text().map(Into::into),
                usage: Usage {
                    input_tokens: u64::try_from(sub[12].int()).unwrap_or(0),
                    output_tokens: u64::try_from(sub[13].int()).unwrap_or(0),
                },
            };
            subagents.push(StoredSubagent {
                id: subagent,
                row,
                task: tasks.remove(&subagent),
                memory: memories.remove(&subagent),
                mailbox: mailboxes.remove(&subagent).unwrap_or_default(),
            });
        }
        let mut journal = Vec::new();
        for mut line in self.fetch("SELECT seq, line FROM journal WHERE session_id = $1 ORDER BY seq", id, "it").await?
        {
            let seq = u64::try_from(line[0].int()).unwrap_or(0);
            next_seq = next_seq.max(seq + 1);
            journal.push((seq, line[1].text().unwrap_or_default()));
        }
        let mut inbound = Vec::new();
        for mut frame in
            self.fetch("SELECT seq, frame FROM inbound WHERE session_id = $1 ORDER BY seq", id, "it").await?
        {
            inbound.push((u64::try_from(frame[0].int()).unwrap_or(0), frame[1].text().unwrap_or_default()));
        }
        // Past every frame ever journaled, served (and deleted) ones too.
        let last_inbound = inbound.last().map_or(0, |(seq, _)| *seq).max(high_water);
        Ok(Some(StoredSession { row, subagents, next_seq, journal, inbound, last_inbound }))
    }
}
