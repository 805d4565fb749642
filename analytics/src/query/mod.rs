//! The typed request model of the QoE routes and its parsing (see [`parse`]).

mod parse;

pub use self::parse::*;
