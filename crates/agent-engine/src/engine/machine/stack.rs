//! The continuation stack and the scopes in force, with the nearest deadline kept current.

use std::any::Any;
use std::sync::Arc;

use agent_op::interp::{AnyValue, Effect, Feed, LoopStep, Node};
use tokio::time::Instant;

use super::{Frame, MAX_FEED_DEPTH, Stack};
use crate::engine::Unwind;
use crate::engine::scope::{ActiveScope, ScopeId};

impl<S> Stack<S> {
    pub(super) fn new(
        finish: fn(&mut dyn Any) -> AnyValue,
        inherited: Arc<[ActiveScope]>,
        root: bool,
    ) -> Stack<S> {
        let inherited_deadline = inherited.iter().filter_map(|s| s.deadline).min();
        // Room for a few frames up front: most programs nest a handful deep.
        let mut frames = Vec::with_capacity(8);
        frames.push(Frame::Return(finish));
        Stack {
            frames,
            scopes: Vec::new(),
            scope_deadlines: Vec::new(),
            inherited_deadline,
            inherited,
            next_deadline: inherited_deadline,
            own_deadline: None,
            root,
            done: None,
            depth: 0,
        }
    }

    pub(super) fn all_scopes(&self) -> impl DoubleEndedIterator<Item = &ActiveScope> {
        self.inherited.iter().chain(self.scopes.iter())
    }

    /// The innermost `with_tools` scope in force, if any.
    pub(super) fn tool_scope(&self) -> Option<&Arc<agent_op::ToolScope>> {
        self.all_scopes().rev().find_map(|s| s.tools.as_ref())
    }

    /// Enters `scope`, innermost.
    pub(super) fn push_scope(&mut self, scope: ActiveScope) {
        let earliest = earliest(self.own_deadline, scope.deadline);
        self.scopes.push(scope);
        self.scope_deadlines.push(earliest);
        self.refresh_deadline();
    }

    /// Leaves the scopes from the `len`-th on.
    pub(super) fn truncate_scopes(&mut self, len: usize) {
        self.scopes.truncate(len);
        self.scope_deadlines.truncate(len);
        self.refresh_deadline();
    }

    pub(super) fn refresh_deadline(&mut self) {
        self.own_deadline = self.scope_deadlines.last().copied().flatten();
        self.next_deadline = earliest(self.inherited_deadline, self.own_deadline);
    }

    /// A sub-agent answering a tool call ends with a tool result: a tool error marks its
    /// spans failed, as a failed tool call's would be.
    fn mark_agent_outcome(&self, id: ScopeId, slot: &dyn Any) {
        let Some(scope) = self.scopes.iter().rev().find(|s| s.id == id) else {
            return;
        };
        let Some(outer) = &scope.outer_span else {
            return;
        };
        type ToolOutcome = Option<Result<serde_json::Value, agent_op::ToolError>>;
        if let Some(Some(Err(error))) = slot.downcast_ref::<ToolOutcome>() {
            crate::engine::spans::failed(outer, error.kind.as_str());
            crate::engine::spans::failed(&scope.span, error.kind.as_str());
        }
    }

    pub(super) fn pop_scope(&mut self, id: ScopeId) {
        if let Some(pos) = self.scopes.iter().rposition(|s| s.id == id) {
            self.truncate_scopes(pos);
        }
    }

    /// The outermost scope whose deadline has passed, as an unwind. Looks for it only once
    /// the nearest deadline has passed, so checking costs O(1) while none has.
    pub(super) fn expired(&self, now: Instant) -> Option<Unwind> {
        if self.next_deadline.is_none_or(|d| d > now) {
            return None;
        }
        self.all_scopes()
            .find(|s| s.deadline.is_some_and(|d| d <= now))
            .map(|s| Unwind::Exit {
                scope: s.id,
                exit: s.deadline_exit(now),
            })
    }
}

/// The earlier of two optional deadlines (`None` is no deadline).
pub(super) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<S> Feed<S> for Stack<S> {
    fn feed(&mut self, slot: &mut dyn Any) -> Node<S> {
        let Some(frame) = self.frames.pop() else {
            return Node::Effect(Box::new(Effect::Fail(
                "internal interpreter error: a value was produced with no continuation".into(),
            )));
        };
        if self.depth >= MAX_FEED_DEPTH {
            let stored = match &frame {
                Frame::Bind(bind) => Some(bind.box_input(slot)),
                Frame::Loop(body) => Some(body.box_input(slot)),
                // Scope and return frames only nest as deep as the program's own structure.
                Frame::Scope(_) | Frame::Return(_) => None,
            };
            if let Some(value) = stored {
                self.frames.push(frame);
                return Node::Pure(value);
            }
        }
        self.depth += 1;
        let next = match frame {
            Frame::Bind(bind) => bind.resume(slot, self),
            Frame::Loop(mut body) => match body.resume(slot, self) {
                LoopStep::Continue(next) => {
                    self.frames.push(Frame::Loop(body));
                    next
                }
                LoopStep::Done(next) => next,
            },
            Frame::Scope(scope) => {
                self.mark_agent_outcome(scope.id, slot);
                self.pop_scope(scope.id);
                (scope.ok)(slot, self)
            }
            Frame::Return(finish) => {
                self.done = Some(finish(slot));
                Node::Unit
            }
        };
        self.depth -= 1;
        next
    }
}
