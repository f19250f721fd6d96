//! An error as one line of text: its own message, then each source's, joined with ": ". Every
//! door (remoting remarks, gRPC statuses, the console's JSON errors) answers with the whole
//! chain, since a client sees only the text and the outermost message alone rarely says why.

/// An error and its sources, joined with ": ".
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut s = err.to_string();
    let mut src = err.source();
    while let Some(e) = src {
        s.push_str(": ");
        s.push_str(&e.to_string());
        src = e.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn each_source_follows_its_error() {
        let err = Outer(Inner(std::io::Error::other("disk")));
        assert_eq!(error_chain(&err), "outer: inner: disk");
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }
}
