//! Loading one stored session whole: its row, its subagents with their
//! tasks (checkpoints put back together from their parts), memories and
//! mailboxes, its journal and its unserved frames.

use serde_json::Value;
use std::collections::HashMap;

use super::cells::{parse_id, parse_json, to_u32};
use super::sql_store::SqlStore;
use crate::entries::InboxMessage;
use crate::ids::SubagentId;
use crate::protocol::wire::SubagentMessagePayload;
use crate::protocol::wire::{CostUsd, SubagentStatus, Usage};
use crate::store::backend::StoreError;
use crate::store::batch;
use crate::store::change::{Checkpoint, SessionRow, StoredSession, StoredSubagent, StoredTask, SubagentRow};

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

        let mut parts = self.checkpoint_parts(id).await?;
        let mut tasks = HashMap::new();
        for mut task in self
            .fetch(
                "SELECT subagent_id, task, task_no, attempt, step, checkpoint, appended_to FROM tasks \
                 WHERE session_id = $1",
                id,
                "ttiiitt",
            )
            .await?
        {
            let subagent = parse_id(task[0].text())?;
            let checkpoint = match task[5].text() {
                Some(state) => {
                    let mut state: Value = parse_json(Some(state))?;
                    if let Some(field) = task[6].text() {
                        let list = parts.remove(&subagent).unwrap_or_default().into_list(subagent)?;
                        match &mut state {
                            Value::Object(object) => object.insert(field, Value::Array(list)),
                            _ => return Err(StoreError(format!("stored checkpoint of {subagent} is not an object"))),
                        };
                    }
                    Some(Checkpoint { step: to_u32(task[4].int()), state })
                }
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
                 config, status, result, error, usage_input, usage_output, memory, COALESCE(usage_cost, -1) \
                 FROM subagents WHERE session_id = $1 ORDER BY ord",
                id,
                "titttitittttiiti",
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
            let memory = match sub[14].text() {
                Some(text) => Some(parse_json::<Vec<Value>>(Some(text))?),
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
                    // -1: NULL, nothing priced was spent.
                    cost_usd: u64::try_from(sub[15].int()).ok().map(CostUsd::from_nanos),
                },
            };
            subagents.push(StoredSubagent {
                id: subagent,
                row,
                task: tasks.remove(&subagent),
                memory,
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

    // The checkpoint parts of a session's tasks, by subagent, in order.
    async fn checkpoint_parts(&self, id: &str) -> Result<HashMap<SubagentId, Parts>, StoreError> {
        let mut parts: HashMap<SubagentId, Parts> = HashMap::new();
        for mut part in self
            .fetch(
                "SELECT subagent_id, seq, items FROM checkpoint_parts WHERE session_id = $1 ORDER BY subagent_id, seq",
                id,
                "tit",
            )
            .await?
        {
            let subagent = parse_id(part[0].text())?;
            let items: Vec<Value> = parse_json(part[2].text())?;
            parts.entry(subagent).or_default().0.push((u64::try_from(part[1].int()).unwrap_or(0), items));
        }
        Ok(parts)
    }
}

/// One task's checkpoint parts, in `seq` order: (index of the first item, items).
#[derive(Debug, Default)]
struct Parts(Vec<(u64, Vec<Value>)>);

impl Parts {
    /// The list they make. Each part must start where the one before ended
    /// (the first at 0): a gap or an overlap would resume the task from a
    /// state it never had, so the load fails instead.
    fn into_list(self, subagent: SubagentId) -> Result<Vec<Value>, StoreError> {
        let mut list = Vec::with_capacity(self.0.iter().map(|(_, items)| items.len()).sum());
        for (seq, items) in self.0 {
            if seq != list.len() as u64 {
                return Err(StoreError(format!(
                    "stored checkpoint of {subagent}: a part starts at item {seq}, the parts before end at {}",
                    list.len()
                )));
            }
            list.extend(items);
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::super::temp_sqlite::TempSqlite;
    use super::*;
    use crate::protocol::wire::TaskDefinition;
    use crate::store::backend::Store;
    use crate::store::change::{Appended, Change, Held};
    use crate::store::url::StoreUrl;
    use crate::store::writer::writer_settings::WriterSettings;
    use serde_json::json;
    use std::sync::Arc;

    fn checkpoint(session: &Arc<str>, id: SubagentId, step: u32, from: u64, items: &[Value]) -> Change {
        Change::Checkpoint {
            session: session.clone(),
            id,
            checkpoint: Checkpoint { step, state: json!({ "usage": step }) },
            appended: Some(Appended { field: "messages", from, items: items.to_vec() }),
            held: Held::default(),
        }
    }

    /// Checkpoints committed one by one, each with the messages it added,
    /// load back as the whole conversation; a run's first checkpoint
    /// starts it over; the task's end deletes its parts.
    #[tokio::test]
    async fn checkpoint_parts_load_back_as_the_whole_list_and_go_with_their_task() {
        let file = TempSqlite::new("parts");
        let url = StoreUrl::Sqlite(file.path.clone());
        let store = SqlStore::connect(&url, &WriterSettings::default()).await.expect("open");
        let session: Arc<str> = "s".into();
        let id = SubagentId::parse("sub_00000001").expect("id");
        let row = SessionRow::handshaken_tcp(&session);
        let sub = SubagentRow::spawned();
        let task = Arc::new(TaskDefinition::new("t", "i"));
        let m: Vec<Value> = (0..6).map(|n| json!({ "role": "user", "content": n })).collect();
        let commit = async |batch: Vec<Change>| store.commit(&batch, 1024, None).await.expect("commit");
        let loaded = async || {
            let stored = store.load_session("s").await.expect("load").expect("stored");
            stored.subagents[0].task.as_ref().and_then(|task| task.checkpoint.clone())
        };
        commit(vec![
            Change::SessionOpened(row),
            Change::Subagent { session: session.clone(), id, row: sub },
            Change::TaskStarted { session: session.clone(), id, task, task_no: 1, attempt: 1, fresh: true },
            checkpoint(&session, id, 1, 0, &m[..2]),
        ])
        .await;
        commit(vec![checkpoint(&session, id, 1, 2, &m[2..3])]).await;
        // Two in one batch: one part.
        commit(vec![checkpoint(&session, id, 2, 3, &m[3..4]), checkpoint(&session, id, 3, 4, &m[4..6])]).await;
        let whole = loaded().await.expect("a checkpoint");
        assert_eq!(whole, Checkpoint { step: 3, state: json!({ "usage": 3, "messages": m }) });
        let parts = store.checkpoint_parts("s").await.expect("parts").remove(&id).expect("parts");
        assert_eq!(parts.0.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [0, 2, 3], "one row per batch");

        // A resumed run starts the list over: what it records replaces it.
        commit(vec![checkpoint(&session, id, 4, 0, &m[..1]), checkpoint(&session, id, 5, 1, &m[5..6])]).await;
        let again = loaded().await.expect("a checkpoint");
        assert_eq!(again.state["messages"], json!([m[0], m[5]]));

        // A checkpoint stored whole (another adapter's) is read as it is.
        commit(vec![Change::Checkpoint {
            session: session.clone(),
            id,
            checkpoint: Checkpoint { step: 6, state: json!({ "whole": true }) },
            appended: None,
            held: Held::default(),
        }])
        .await;
        assert_eq!(loaded().await.expect("a checkpoint").state, json!({ "whole": true }));

        commit(vec![Change::TaskEnded {
            session: session.clone(),
            id,
            status: SubagentStatus::Completed,
            result: None,
            error: None,
            held: Held::default(),
            usage: Usage::default(),
        }])
        .await;
        assert!(loaded().await.is_none());
        assert!(store.checkpoint_parts("s").await.expect("parts").is_empty(), "the ended task's parts are deleted");
    }

    #[test]
    fn parts_make_their_list_in_order_and_a_gap_is_refused() {
        let id = SubagentId::parse("sub_00000001").expect("id");
        let parts = Parts(vec![(0, vec![json!(0), json!(1)]), (2, vec![json!(2)]), (3, vec![json!(3)])]);
        assert_eq!(parts.into_list(id).expect("contiguous"), vec![json!(0), json!(1), json!(2), json!(3)]);
        assert_eq!(Parts::default().into_list(id).expect("none"), Vec::<Value>::new());
        let gap = Parts(vec![(0, vec![json!(0)]), (2, vec![json!(2)])]);
        let err = gap.into_list(id).expect_err("a gap");
        assert!(err.0.contains("starts at item 2"), "{err}");
        let late = Parts(vec![(1, vec![json!(1)])]);
        assert!(late.into_list(id).is_err(), "the first part starts at 0");
    }
}
