//! [`compile`]: a [`PromptIr`] into the [`Prompt`] providers take, under its budget, with a
//! [`CompileReport`] of what was kept, shrunk and dropped, and why.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use agent_op::{Message, Prompt};

use crate::error::PromptError;
use crate::ir::PromptIr;
use crate::render;
use crate::section::{CompositionMode, Section, SectionContent};
use crate::tokens::{MESSAGE_OVERHEAD, REPLY_PRIMING, TokenCounter};
use agent_op::context::{
    BudgetAllocation, CompileReport, DropReason, Outcome, Priority, SectionReport, SectionSource,
    ToolReport,
};

/// A compiled prompt and how it was made.
#[derive(Clone, Debug, PartialEq)]
pub struct Compiled {
    /// What to send.
    pub prompt: Prompt,
    /// What was kept, shrunk and dropped, and why.
    pub report: CompileReport,
}

/// Which share of a fixed-ratio budget an item draws on.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Share {
    System,
    Context,
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Kind {
    Section(usize),
    Tool(usize),
}

struct Item {
    kind: Kind,
    priority: Priority,
    value: f64,
    share: Share,
    /// Tokens whole.
    full: u32,
    /// The fewest tokens it may be shrunk to (`full` when it may not be).
    min: u32,
    /// Tokens planned.
    size: u32,
    dropped: Option<DropReason>,
}

impl Item {
    fn critical(&self) -> bool {
        self.priority == Priority::Critical
    }

    fn live(&self) -> bool {
        self.dropped.is_none()
    }
}

/// Compiles `ir` under its budget ([`PromptMeta::budget`](crate::PromptMeta::budget)),
/// counting with `counter`. Sections and tools not yet counted are counted (and cached);
/// counting the IR first ([`PromptIr::count`]) makes compiling it again cheap.
///
///
/// # The rules
///
/// 1. The prompt may use `total × (1 − reserve_ratio)` tokens
///    ([`TokenBudget::available`](crate::TokenBudget::available)), counting every section as
///    rendered (label included), each message's and the reply's overhead, the observation and
///    the tool definitions.
/// 2. `Critical` sections and tools, and the observation, are always sent whole. If they
///    alone do not fit, compilation fails with [`PromptError::CriticalOverBudget`].
/// 3. Everything else is ranked: by priority first, then (for sections) by relevance ×
///    recency decay — or information density × recency decay under
///    [`BudgetAllocation::InformationWeighted`]. Within a priority, tools rank below sections,
///    so tools of `Medium` or `Low` priority are dropped before `Medium` sections. Ties go to
///    the earlier item.
/// 4. Under [`BudgetAllocation::FixedRatios`], system sections (hierarchical and constraint
///    text) and context (every other section, and the tools) are each held to their share
///    first.
/// 5. While over budget, the lowest-ranked sections that have a `min_tokens` are shrunk
///    toward it; then the lowest-ranked items are dropped; then shrunk sections grow back, the
///    highest-ranked first, into whatever the drops freed.
/// 6. A text section is shrunk at a token boundary, keeping its start — or its end, for a
///    section of the recent conversation ([`SectionSource::Temporal`]). A message section
///    keeps its newest messages, and an assistant message that calls tools stays with the
///    tool results answering it; a message section never starts with a tool result whose
///    call is not in it.
/// 7. Sections with no content are dropped; of sections with the same label and content,
///    the highest-priority one (the first among equals) is kept.
/// 8. Output order is the IR's: one system message of the kept text sections, then the kept
///    message sections, then the observation as the user's message. Text sections that
///    follow each other with the same label share one heading (their counts still include
///    it, so the report errs high by a few tokens, never low). The same IR, budget and
///    encoding always give the same messages, byte for byte.
///
/// A relevance that is NaN counts as 0; relevance is clamped to 0–1.
pub fn compile(ir: &PromptIr, counter: &TokenCounter) -> Result<Compiled, PromptError> {
    check_ids(ir)?;
    let budget = &ir.meta.budget;
    let available = budget.available();
    let decay = f64::from(ir.meta.strategy.recency_decay);
    let now = ir.meta.timestamp;

    // Each section's content hash, computed once: it keys the counts, the duplicates and
    // the cuts.
    let hashes: Vec<Cow<'_, str>> = ir
        .sections
        .iter()
        .map(|section| match &section.hash {
            Some(hash) => Cow::Borrowed(hash.as_str()),
            None => Cow::Owned(render::content_hash(section)),
        })
        .collect();

    // Plan every item at its whole size.
    let mut items: Vec<Item> = Vec::with_capacity(ir.sections.len() + ir.tools.len());
    for (i, section) in ir.sections.iter().enumerate() {
        let full = match section.hash {
            Some(_) => section.tokens,
            None => counter.count_section(section, &hashes[i]),
        };
        let share = match (&section.content, section.composition) {
            (
                SectionContent::Text(_),
                CompositionMode::Hierarchical | CompositionMode::Constraint,
            ) => Share::System,
            _ => Share::Context,
        };
        let weight = match budget.allocation {
            BudgetAllocation::InformationWeighted => information_density(&section.content),
            _ => clamp_unit(section.relevance.unwrap_or(1.0)),
        };
        let age_hours = section
            .recency
            .map(|at| (now - at).num_seconds().max(0) as f64 / 3600.0)
            .unwrap_or(0.0);
        let recency = if age_hours > 0.0 && decay.is_finite() && decay > 0.0 {
            decay.clamp(0.0, 1.0).powf(age_hours)
        } else {
            1.0
        };
        let min = section.min_tokens.map_or(full, |m| m.min(full));
        items.push(Item {
            kind: Kind::Section(i),
            priority: section.priority,
            value: weight * recency,
            share,
            full,
            min,
            size: full,
            dropped: nothing_to_send(&section.content).then_some(DropReason::Empty),
        });
    }
    for (i, tool) in ir.tools.iter().enumerate() {
        let full = if tool.tokens == 0 {
            counter.count_tool(tool)
        } else {
            tool.tokens
        };
        items.push(Item {
            kind: Kind::Tool(i),
            priority: tool.priority,
            value: 1.0,
            share: Share::Context,
            full,
            min: full,
            size: full,
            dropped: None,
        });
    }
    drop_duplicates(&hashes, &mut items);
    for item in &mut items {
        if item.dropped.is_some() {
            item.size = 0;
        }
    }

    let observation = counter.count_observation(&ir.observation);
    let has_text = items.iter().any(|item| {
        item.live()
            && matches!(item.kind, Kind::Section(i) if matches!(ir.sections[i].content, SectionContent::Text(_)))
    });
    if observation == 0
        && !items
            .iter()
            .any(|item| item.live() && matches!(item.kind, Kind::Section(_)))
    {
        return Err(PromptError::Empty);
    }
    let system_overhead = if has_text { MESSAGE_OVERHEAD } else { 0 };
    let tokens_before = items
        .iter()
        .map(|item| item.full)
        .fold(REPLY_PRIMING + system_overhead, u32::saturating_add)
        .saturating_add(observation);
    let fixed = items
        .iter()
        .filter(|item| item.critical() && item.live())
        .map(|item| item.full)
        .fold(REPLY_PRIMING + system_overhead, u32::saturating_add)
        .saturating_add(observation);
    if fixed > available {
        return Err(PromptError::CriticalOverBudget {
            needed: fixed,
            available,
        });
    }

    // Lowest rank first: by priority, tools below sections, by value, the later item first.
    // Sorted on packed keys: no closure chasing items through an index.
    let mut keys: Vec<(u8, u64, std::cmp::Reverse<usize>)> = items
        .iter()
        .enumerate()
        .filter(|(_, item)| !item.critical())
        .map(|(i, item)| {
            let rank = (item.priority as u8) << 1 | u8::from(is_section(item));
            (rank, ordered_bits(item.value), std::cmp::Reverse(i))
        })
        .collect();
    keys.sort_unstable();
    let order: Vec<usize> = keys.into_iter().map(|(_, _, i)| i.0).collect();

    let caps = share_caps(&budget.allocation, available);
    for &(share, cap) in &caps {
        let used = share_used(&items, share);
        if used > cap {
            free(
                &mut items,
                &order,
                used - cap,
                DropReason::OverAllocation,
                |item| item.share == share,
            );
        }
    }
    let used = fixed
        + items
            .iter()
            .filter(|i| !i.critical())
            .map(|i| i.size)
            .sum::<u32>();
    if used > available {
        free(
            &mut items,
            &order,
            used - available,
            DropReason::OverBudget,
            |_| true,
        );
    }
    regrow(&mut items, &order, available - fixed, &caps);

    assemble(
        ir,
        &hashes,
        counter,
        &items,
        tokens_before,
        system_overhead,
        observation,
    )
}

/// Whether a section has nothing that can be sent: no text, or no messages but tool
/// results whose call is not there.
fn nothing_to_send(content: &SectionContent) -> bool {
    match content {
        SectionContent::Messages(messages) => crate::units::sendable(messages).is_empty(),
        other => other.is_empty(),
    }
}

fn is_section(item: &Item) -> bool {
    matches!(item.kind, Kind::Section(_))
}

fn check_ids(ir: &PromptIr) -> Result<(), PromptError> {
    let mut seen: HashSet<&str, FastHash> =
        HashSet::with_capacity_and_hasher(ir.sections.len(), FastHash);
    match ir.sections.iter().find(|s| !seen.insert(s.id.as_str())) {
        Some(section) => Err(PromptError::DuplicateSectionId {
            id: section.id.clone(),
        }),
        None => Ok(()),
    }
}

/// Of sections with the same content hash, keeps the highest priority (the first among
/// equals).
fn drop_duplicates(hashes: &[Cow<'_, str>], items: &mut [Item]) {
    // The item kept so far for each hash.
    let mut kept: HashMap<&str, usize, FastHash> =
        HashMap::with_capacity_and_hasher(hashes.len(), FastHash);
    for at in 0..items.len() {
        let Kind::Section(i) = items[at].kind else {
            continue;
        };
        if items[at].dropped.is_some() {
            continue;
        }
        match kept.entry(&hashes[i]) {
            Entry::Vacant(slot) => {
                slot.insert(at);
            }
            Entry::Occupied(mut slot) => {
                let first = *slot.get();
                if items[at].priority > items[first].priority {
                    items[first].dropped = Some(DropReason::Duplicate);
                    slot.insert(at);
                } else {
                    items[at].dropped = Some(DropReason::Duplicate);
                }
            }
        }
    }
}

/// The cap of each share of a fixed-ratio budget (shares summing past 1 are normalised).
fn share_caps(allocation: &BudgetAllocation, available: u32) -> Vec<(Share, u32)> {
    let BudgetAllocation::FixedRatios {
        system,
        context,
        observation,
    } = allocation
    else {
        return Vec::new();
    };
    let ratio = |r: f32| {
        if r.is_finite() {
            f64::from(r).max(0.0)
        } else {
            0.0
        }
    };
    let (system, context) = (ratio(*system), ratio(*context));
    let sum = system + context + ratio(*observation);
    let scale = if sum > 1.0 { 1.0 / sum } else { 1.0 };
    let cap = |r: f64| (f64::from(available) * r * scale).floor() as u32;
    vec![(Share::System, cap(system)), (Share::Context, cap(context))]
}

fn share_used(items: &[Item], share: Share) -> u32 {
    items
        .iter()
        .filter(|item| item.share == share)
        .map(|item| item.size)
        .sum()
}

/// Frees `need` tokens from the items `eligible` accepts: shrinks the lowest-ranked toward
/// their minimum first, then drops the lowest-ranked.
fn free(
    items: &mut [Item],
    order: &[usize],
    need: u32,
    reason: DropReason,
    eligible: impl Fn(&Item) -> bool,
) {
    let mut freed = 0u32;
    for &i in order {
        let item = &mut items[i];
        if item.live() && eligible(item) && item.size > item.min {
            let cut = (item.size - item.min).min(need - freed);
            item.size -= cut;
            freed += cut;
            if freed >= need {
                return;
            }
        }
    }
    for &i in order {
        let item = &mut items[i];
        if item.live() && eligible(item) {
            freed = freed.saturating_add(item.size);
            item.size = 0;
            item.dropped = Some(reason);
            if freed >= need {
                return;
            }
        }
    }
}

/// Grows shrunk items back, the highest-ranked first, into the room left.
fn regrow(items: &mut [Item], order: &[usize], room: u32, caps: &[(Share, u32)]) {
    let mut used: u32 = items
        .iter()
        .filter(|it| !it.critical())
        .map(|it| it.size)
        .sum();
    let mut shares: Vec<(Share, u32, u32)> = caps
        .iter()
        .map(|&(share, cap)| (share, cap, share_used(items, share)))
        .collect();
    for &i in order.iter().rev() {
        let item = &items[i];
        if !item.live() || item.size >= item.full {
            continue;
        }
        let mut grow = (item.full - item.size).min(room.saturating_sub(used));
        let share = shares.iter_mut().find(|(share, _, _)| *share == item.share);
        if let Some((_, cap, share_used)) = &share {
            grow = grow.min(cap.saturating_sub(*share_used));
        }
        if let Some((_, _, share_used)) = share {
            *share_used += grow;
        }
        used += grow;
        items[i].size += grow;
    }
}

/// Renders the plan into the prompt and its report.
fn assemble(
    ir: &PromptIr,
    hashes: &[Cow<'_, str>],
    counter: &TokenCounter,
    items: &[Item],
    tokens_before: u32,
    system_overhead: u32,
    observation: u32,
) -> Result<Compiled, PromptError> {
    let mut system = String::new();
    let mut conversation: Vec<Message> = Vec::new();
    let mut sections = Vec::with_capacity(ir.sections.len());
    let mut tools = Vec::new();
    let mut definitions = Vec::new();
    let mut after = REPLY_PRIMING.saturating_add(observation);
    let mut any_text = false;
    // The label of the last text section placed: a run of sections with one label shares
    // one heading.
    let mut heading: &str = "";
    for item in items {
        match item.kind {
            Kind::Section(i) => {
                let section = &ir.sections[i];
                let (tokens, outcome) = match item.dropped {
                    Some(reason) => (0, Outcome::Dropped { reason }),
                    None => {
                        let sent = place(
                            section,
                            &hashes[i],
                            item,
                            counter,
                            &mut Placed {
                                system: &mut system,
                                heading: &mut heading,
                                conversation: &mut conversation,
                            },
                        );
                        match sent {
                            0 => (
                                0,
                                Outcome::Dropped {
                                    reason: DropReason::OverBudget,
                                },
                            ),
                            n if n < item.full => (n, Outcome::Shrunk),
                            n => (n, Outcome::Kept),
                        }
                    }
                };
                if tokens > 0 && matches!(section.content, SectionContent::Text(_)) {
                    any_text = true;
                }
                after = after.saturating_add(tokens);
                sections.push(SectionReport {
                    id: section.id.clone(),
                    source: section.source.clone(),
                    priority: section.priority,
                    tokens_before: item.full,
                    tokens_after: tokens,
                    outcome,
                });
            }
            Kind::Tool(i) => {
                let tool = &ir.tools[i];
                let outcome = match item.dropped {
                    Some(reason) => Outcome::Dropped { reason },
                    None => {
                        after = after.saturating_add(item.full);
                        definitions.push(tool.definition());
                        Outcome::Kept
                    }
                };
                tools.push(ToolReport {
                    name: tool.name.clone(),
                    priority: tool.priority,
                    tokens: item.full,
                    outcome,
                });
            }
        }
    }
    let mut messages = Vec::with_capacity(conversation.len() + 2);
    if any_text {
        after = after.saturating_add(system_overhead);
        let trimmed = system.trim_end_matches('\n').len();
        system.truncate(trimmed);
        messages.push(Message::system(system));
    }
    messages.extend(conversation);
    if !ir.observation.is_empty() {
        messages.push(Message::user(ir.observation.clone()));
    }
    let mut prompt = Prompt::from_messages(messages);
    prompt.tools = definitions.into();
    let compression_ratio = if tokens_before == 0 {
        1.0
    } else {
        (f64::from(after) / f64::from(tokens_before)) as f32
    };
    let budget = &ir.meta.budget;
    Ok(Compiled {
        prompt,
        report: CompileReport {
            sections,
            tools,
            tokens_before,
            tokens_after: after,
            budget: budget.total,
            reserve: budget.reserve(),
            available: budget.available(),
            compression_ratio,
        },
    })
}

/// Where placed sections go.
struct Placed<'o, 'a> {
    system: &'o mut String,
    /// The label of the last text section placed.
    heading: &'o mut &'a str,
    conversation: &'o mut Vec<Message>,
}

/// Adds a kept section to the prompt at its planned size; returns the tokens it takes (0 if
/// nothing of it fits).
fn place<'a>(
    section: &'a Section,
    hash: &str,
    item: &Item,
    counter: &TokenCounter,
    out: &mut Placed<'_, 'a>,
) -> u32 {
    match &section.content {
        SectionContent::Text(text) => {
            let label = if *out.heading == section.label {
                ""
            } else {
                section.label.as_str()
            };
            if item.size >= item.full {
                render::push_text_section(out.system, label, text);
                *out.heading = &section.label;
                return item.full;
            }
            let keep_end = section.source == SectionSource::Temporal;
            match counter.shrink_text(hash, &section.label, text, item.size, keep_end) {
                Some((len, tokens)) => {
                    let kept = if keep_end {
                        &text[text.len() - len..]
                    } else {
                        &text[..len]
                    };
                    render::push_text_section(out.system, label, kept);
                    *out.heading = &section.label;
                    tokens
                }
                None => 0,
            }
        }
        SectionContent::Messages(messages) => {
            let units = crate::units::message_units(messages);
            let mut kept = Vec::new();
            let mut tokens = 0u32;
            // Newest first: keep the longest suffix of whole units that fits.
            for unit in units.iter().rev() {
                let n = counter.count_messages(unit);
                if tokens.saturating_add(n) > item.size {
                    break;
                }
                tokens += n;
                kept.push(*unit);
            }
            for unit in kept.iter().rev() {
                out.conversation.extend(unit.iter().cloned());
            }
            tokens
        }
    }
}

/// `x`'s bits, ordered as `f64::total_cmp` orders `x`.
fn ordered_bits(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// A hasher for the section ids and content hashes compile looks up: FxHash's multiply and
/// rotate, much cheaper than SipHash for short keys. Keys come from the program, and a
/// collision costs only a slower lookup, so no DoS resistance is needed.
#[derive(Clone, Copy, Default)]
struct FastHash;

impl std::hash::BuildHasher for FastHash {
    type Hasher = FxHasher;

    fn build_hasher(&self) -> FxHasher {
        FxHasher(0)
    }
}

struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0xf135_7aea_2e62_a9c5;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.0 = (self.0 ^ u64::from_le_bytes(word))
                .wrapping_mul(K)
                .rotate_left(26);
        }
        for &byte in chunks.remainder() {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(K).rotate_left(26);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
/// A relevance in 0–1; NaN counts as 0.
fn clamp_unit(x: f32) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        f64::from(x).clamp(0.0, 1.0)
    }
}

/// The share of distinct words among a section's words (1 for an empty one).
fn information_density(content: &SectionContent) -> f64 {
    let text = match content {
        SectionContent::Text(text) => text.as_str(),
        SectionContent::Messages(_) => return 1.0,
    };
    let mut words: Vec<&str> = text.split_whitespace().collect();
    let total = words.len();
    if total == 0 {
        return 1.0;
    }
    words.sort_unstable();
    words.dedup();
    words.len() as f64 / total as f64
}
