//! [`Cause`]: the underlying error of a failure, kept whole.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// The underlying error of a failure — an I/O, HTTP, database or decoding error — kept as the
/// error value itself, not as text, so a caller can inspect it.
///
/// The error types of this workspace hold one where a lower layer failed and return it from
/// [`Error::source`]: walking the chain reaches the original error, which
/// [`downcast_ref`](Cause::downcast_ref) (or `downcast_ref` on the `&dyn Error` that
/// `source()` returns) turns back into its concrete type. It is shared (an [`Arc`]) so the
/// errors holding it stay `Clone`.
///
/// ```
/// use agent_op::Cause;
///
/// let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "read-only file");
/// let cause = Cause::new(io);
/// assert_eq!(cause.to_string(), "read-only file");
/// let io: &std::io::Error = cause.downcast_ref().unwrap();
/// assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
/// ```
#[derive(Clone)]
pub struct Cause(Arc<dyn Error + Send + Sync + 'static>);

impl Cause {
    /// Keeps `error`.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Cause {
        Cause(Arc::new(error))
    }

    /// Keeps an error that is already boxed.
    pub fn from_boxed(error: Box<dyn Error + Send + Sync + 'static>) -> Cause {
        Cause(Arc::from(error))
    }

    /// The error, for [`Error::source`] implementations and inspection.
    pub fn get_ref(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }

    /// The error as a `T`, if it is one.
    pub fn downcast_ref<T: Error + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

/// Two causes are equal when they are the same error or describe the same failure (the
/// same message): errors from other crates rarely implement `PartialEq`, and the errors
/// holding a `Cause` compare their other fields exactly.
impl PartialEq for Cause {
    fn eq(&self, other: &Cause) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("reading the config")
        }
    }

    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn the_kept_error_is_reachable_and_keeps_its_own_chain() {
        let cause = Cause::new(Outer(std::io::Error::other("disk gone")));
        assert!(cause.downcast_ref::<Outer>().is_some());
        assert!(cause.downcast_ref::<std::io::Error>().is_none());
        let next = cause.get_ref().source().expect("the inner error");
        assert_eq!(next.to_string(), "disk gone");
        assert!(next.downcast_ref::<std::io::Error>().is_some());
    }

    #[test]
    fn causes_compare_by_identity_or_message() {
        let a = Cause::new(std::io::Error::other("x"));
        assert_eq!(a, a.clone());
        assert_eq!(a, Cause::new(std::io::Error::other("x")));
        assert_ne!(a, Cause::new(std::io::Error::other("y")));
    }
}
