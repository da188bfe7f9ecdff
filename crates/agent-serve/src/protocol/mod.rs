//! One module per wire protocol. Each owns its wire types and a `router()`, and only
//! translates between them and the run model: adding a protocol adds a module here.

pub(crate) mod ag_ui;
pub(crate) mod agent_protocol;
pub mod openai;
