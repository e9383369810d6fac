//! Chat: building prompts for the model and counting their tokens.

pub mod tokens;
