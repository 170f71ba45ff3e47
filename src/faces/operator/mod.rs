//! The operator's face: the admin API (`/admin/*`, `routes`), the live
//! view (`/ui`, `ui` and its files under `ui/`), and a person's answers to
//! what subagents ask (`people`).

mod people;
mod routes;
mod ui;

pub(crate) use routes::{routes, AdminApi};
