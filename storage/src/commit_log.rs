//! Append-only commit-log segments (implementation pending).
