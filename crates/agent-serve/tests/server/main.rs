//! The server's tests, in one binary (each test file would link the whole server again):
//! its API over real HTTP (`api`), the official clients and schemathesis (`clients`), and
//! hostile input on every route (`fuzz`).

mod api;
mod clients;
mod fuzz;
mod support;
