//! Pure logic the actors use, kept free of actix so it tests without a runtime.
