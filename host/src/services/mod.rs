//! The services the host hands to guests through WIT imports.

pub mod audit;
pub mod batch;
pub mod budget;
pub mod cache;
pub mod cost;
pub mod executor;
pub mod redirects;
pub mod running_mean;
pub mod stop;
pub mod storage;
