//! Write weir transforms in Rust.
//!
//! A transform is one node of a weir pipeline: it receives rows (JSON
//! objects), may call the endpoints the pipeline grants it, and returns output
//! rows or a row error. Implement [`Transform`], export it with
//! [`export_transform!`], and build with `weir guest build`:
//!
//! ```
//! use serde_json::{Value, json};
//! use weir_sdk::{ConfigError, NodeCx, Row, RowCx, RowError, Transform, chat::Chat};
//!
//! struct Shout {
//!     endpoint: String,
//! }
//!
//! impl Transform for Shout {
//!     fn configure(options: Value, node: &NodeCx) -> Result<Self, ConfigError> {
//!         let endpoint = node.endpoint(options["endpoint"].as_str())?;
//!         Ok(Shout { endpoint })
//!     }
//!     fn output_fields(&self) -> Vec<String> {
//!         vec!["loud".into()]
//!     }
//!     fn process_row(&self, mut row: Row, cx: &RowCx) -> Result<Vec<Row>, RowError> {
//!         let prompt = format!("Shout this: {}", row.str_field("text")?);
//!         let answer = cx.chat(&self.endpoint, &Chat::new().user(prompt))?;
//!         row.set("loud", answer);
//!         Ok(vec![row])
//!     }
//! }
//!
//! weir_sdk::export_transform!(Shout);
//!
//! // The same logic, natively, against a scripted host:
//! use weir_sdk::testing::{self, MockHost};
//! let host = MockHost::new().grant("llm").reply_chat("llm", "HELLO");
//! let results = testing::run::<Shout>(&host, json!({}), vec![json!({"text": "hello"})]).unwrap();
//! assert_eq!(results[0].as_ref().unwrap()[0].get("loud"), Some(&json!("HELLO")));
//! assert_eq!(host.request_bodies()[0]["messages"][0]["content"], "Shout this: hello");
//! ```
//!
//! The logic runs natively in `cargo test` against [`testing::MockHost`], a
//! scripted host that answers requests without a network.

pub mod chat;
mod complete;
mod config_error;
pub mod host;
pub mod json;
mod row;
#[cfg(feature = "templates")]
pub mod template;
pub mod testing;
mod transform;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod wasm;

pub use config_error::ConfigError;
pub use host::{
    CallError, ChatAnswer, ChatError, ChatRequest, Host, Level, Message, Request, Response, Usage,
};
pub use row::{Row, RowError};
pub use transform::{NodeCx, RawTransform, RowCx, Transform, options};

/// The version of the `weir:transform` contract this SDK builds against.
pub const CONTRACT_VERSION: &str = "0.3.0";

/// Exports a [`Transform`] (or a [`RawTransform`]) as the component's
/// `weir:transform` implementation.
/// Expands to nothing outside wasm, so the same crate unit-tests natively.
#[macro_export]
macro_rules! export_transform {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct WeirTransformExport;
            impl $crate::wasm::bindings::exports::weir::transform::transform::Guest
                for WeirTransformExport
            {
                fn configure(
                    options: ::std::string::String,
                ) -> ::std::result::Result<
                    $crate::wasm::bindings::exports::weir::transform::transform::NodeInfo,
                    $crate::wasm::bindings::exports::weir::transform::transform::ConfigError,
                > {
                    $crate::wasm::configure::<$ty>(options)
                }
                fn process(
                    rows: ::std::vec::Vec<::std::string::String>,
                ) -> ::std::vec::Vec<$crate::wasm::bindings::exports::weir::transform::transform::Outcome>
                {
                    $crate::wasm::process::<$ty>(rows)
                }
            }
            $crate::wasm::bindings::export_node!(WeirTransformExport with_types_in $crate::wasm::bindings);
        };
    };
}
