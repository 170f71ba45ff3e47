//! Reading stored rows back: each column as a [`Cell`] (text or integer),
//! and the parsing of stored JSON, ids and counts.

use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::ids::SubagentId;
use crate::store::backend::StoreError;

/// One value read back.
#[derive(Debug)]
pub(super) enum Cell {
    Text(Option<String>),
    Int(i64),
}

impl Cell {
    pub(super) fn text(&mut self) -> Option<String> {
        match self {
            Self::Text(text) => text.take(),
            Self::Int(_) => None,
        }
    }

    pub(super) fn int(&self) -> i64 {
        match self {
            Self::Int(n) => *n,
            Self::Text(_) => 0,
        }
    }
}

// Reads the columns of `row` as `shape` says: `t` text (maybe null), `i` integer.
pub(super) fn read_row<R: Row>(row: &R, shape: &str) -> Result<Vec<Cell>, StoreError>
where
    usize: ColumnIndex<R>,
    for<'r> Option<String>: Decode<'r, R::Database>,
    String: Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    shape
        .chars()
        .enumerate()
        .map(|(index, kind)| match kind {
            'i' => row.try_get::<i64, _>(index).map(Cell::Int),
            _ => row.try_get::<Option<String>, _>(index).map(Cell::Text),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(StoreError::from)
}

pub(super) fn to_u32(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

pub(super) fn parse_json<T: serde::de::DeserializeOwned>(text: Option<String>) -> Result<T, StoreError> {
    serde_json::from_str(text.as_deref().unwrap_or("null")).map_err(|err| StoreError(format!("stored JSON: {err}")))
}

pub(super) fn parse_id(text: Option<String>) -> Result<SubagentId, StoreError> {
    let text = text.unwrap_or_default();
    SubagentId::parse(&text).ok_or_else(|| StoreError(format!("stored subagent id `{text}` is malformed")))
}
