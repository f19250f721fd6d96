//! Consumer-side actors.
