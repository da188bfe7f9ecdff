//! `op!`: do-notation for [`Op`](crate::Op), so programs read top to bottom instead of nesting
//! closures.

/// Writes a program as a sequence of steps.
///
/// - `let x <- program;` runs `program` and binds its result (`x` may be `_` or a tuple
///   pattern such as `(a, b)`).
/// - `let x = expression;` binds a plain value.
/// - `program;` runs a program and discards its result.
/// - the last line is the program whose result is returned.
///
/// Every step after a `<-` becomes a `move` closure, so later steps can use earlier results.
///
/// ```
/// use agent_op::{op, Prompt};
/// use agent_op::op::{get, infer_raw, modify, pure, Op};
///
/// let program: Op<u32, String> = op! {
///     let reply <- infer_raw("small-model", Prompt::new().user("Say hi"));
///     modify(|turns: &mut u32| *turns += 1);
///     let turns <- get();
///     let text = format!("{} (turn {turns})", reply.content);
///     pure(text)
/// };
/// # let _ = program;
/// ```
#[macro_export]
macro_rules! op {
    (let $p:tt <- $e:expr ; $($rest:tt)+) => {
        $crate::Op::and_then($e, move |$p| $crate::op!($($rest)+))
    };
    (let $p:ident : $t:ty = $e:expr ; $($rest:tt)+) => {{
        let $p: $t = $e;
        $crate::op!($($rest)+)
    }};
    (let $p:pat = $e:expr ; $($rest:tt)+) => {{
        let $p = $e;
        $crate::op!($($rest)+)
    }};
    ($e:expr ; $($rest:tt)+) => {
        $crate::Op::and_then($e, move |_| $crate::op!($($rest)+))
    };
    ($e:expr $(;)?) => {
        $e
    };
}
