//! [`compose`]: two IRs into one, by each section's [`CompositionMode`].

use crate::ir::PromptIr;
use crate::render;
use crate::section::{CompositionMode, Section};

/// Composes `first` and `second` into one IR, following each section's
/// [`CompositionMode`]:
///
/// - hierarchical sections (base instructions) come first, `first`'s before `second`'s;
/// - then the constraints of both (every constraint holds);
/// - then the additive sections of both (collected; the budget decides what stays);
/// - then the contextual sections, `first`'s before `second`'s (later observations update
///   earlier ones).
///
/// Within a mode, sections keep their order. A section with the same label and content as
/// one already placed is left out (by [`Section::hash`], or a hash computed now); a section
/// whose id is taken by another section gets the first free id of `id#2`, `id#3`, … .
/// Tools are `first`'s, then those of `second` whose name is new. The observations are
/// sequenced too: both, separated by a blank line, when both are non-empty. The metadata is
/// `first`'s, with the totals summed (count the result again for exact figures).
///
/// The result depends only on the two IRs: composing the same IRs always gives the same IR.
pub fn compose(first: PromptIr, second: PromptIr) -> PromptIr {
    let mut sections: Vec<Section> =
        Vec::with_capacity(first.sections.len() + second.sections.len());
    let mut hashes: Vec<String> = Vec::new();
    let modes = [
        CompositionMode::Hierarchical,
        CompositionMode::Constraint,
        CompositionMode::Additive,
        CompositionMode::Contextual,
    ];
    for mode in modes {
        for section in first.sections.iter().chain(&second.sections) {
            if section.composition != mode {
                continue;
            }
            let hash = section
                .hash
                .clone()
                .unwrap_or_else(|| render::content_hash(section));
            if hashes.contains(&hash) {
                continue;
            }
            hashes.push(hash);
            let mut section = section.clone();
            section.id = free_id(&sections, &section.id);
            sections.push(section);
        }
    }
    let mut tools = first.tools;
    for tool in second.tools {
        if !tools.iter().any(|t| t.name == tool.name) {
            tools.push(tool);
        }
    }
    let observation = match (first.observation.is_empty(), second.observation.is_empty()) {
        (_, true) => first.observation,
        (true, false) => second.observation,
        (false, false) => format!("{}\n\n{}", first.observation, second.observation),
    };
    let mut meta = first.meta;
    meta.total_tokens = meta.total_tokens.saturating_add(second.meta.total_tokens);
    meta.cache_hit = meta.cache_hit && second.meta.cache_hit;
    PromptIr {
        sections,
        tools,
        observation,
        meta,
    }
}

/// `id`, or the first of `id#2`, `id#3`, … no section in `taken` has.
fn free_id(taken: &[Section], id: &str) -> String {
    let used = |candidate: &str| taken.iter().any(|s| s.id == candidate);
    if !used(id) {
        return id.to_owned();
    }
    (2u64..)
        .map(|n| format!("{id}#{n}"))
        .find(|candidate| !used(candidate))
        .unwrap_or_else(|| id.to_owned())
}

// Modes not listed above (added later) would be silently lost: keep the list whole.
const _: () = {
    #[allow(dead_code)]
    fn every_mode_is_placed(mode: CompositionMode) {
        match mode {
            CompositionMode::Hierarchical
            | CompositionMode::Constraint
            | CompositionMode::Additive
            | CompositionMode::Contextual => {}
        }
    }
};
