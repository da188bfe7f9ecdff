//! The spec crate's tests, in one binary: the program a spec builds (`program`) and
//! `docs/SPEC.md` against the parser (`spec_doc`).

mod program;
mod spec_doc;
