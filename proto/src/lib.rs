//! felixbackend.proto messages.
