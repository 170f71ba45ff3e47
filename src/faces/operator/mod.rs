//! The operator's face: the admin API (`/admin/*`, `routes`), the live
//! view (`/ui`, `ui` and its files under `ui/`), and a person's answers to
//! what subagents ask (`people`); `access`: who may use them (each of the
//! three asks it, and none imports another but `routes`, which mounts them).

mod access;
mod people;
mod routes;
mod ui;

pub(crate) use access::AdminApi;
pub(crate) use routes::routes;
