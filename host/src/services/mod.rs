//! The services the host hands to guests through WIT imports.

pub mod audit;
pub mod executor;
pub mod stop;
