//! Size of the built-in guest and the cost of a new configured instance.

use std::sync::Arc;
use std::time::Instant;
use weir::config::GuestLimits;
use weir::runtime::{NodeRuntime, NodeServices, Outbound, Runtime, builtin};

const INSTANCES: usize = 200;

pub async fn report() -> anyhow::Result<()> {
    let llm = builtin::find("llm").expect("the llm guest is built in");
    let runtime = Runtime::new()?;
    // Bypasses the compiled-component cache, to time a real compile.
    let started = Instant::now();
    runtime.compile_uncached(llm.bytes)?;
    let compile = started.elapsed();
    let loaded = runtime.load(llm.bytes, "llm")?;
    let services = Arc::new(NodeServices {
        node_name: "bench".into(),
        endpoints: vec!["llm".into()],
        outbound: Outbound::Live(Default::default()),
        audit: None,
    });
    let options = r#"{"template": "Review: {{ row.text }}", "model": "m"}"#.to_string();
    let node = NodeRuntime::new(&runtime, &loaded, services, options, GuestLimits::default())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut held = Vec::with_capacity(INSTANCES);
    held.push(node.checkout().await?);
    let started = Instant::now();
    for _ in 0..INSTANCES {
        held.push(node.checkout().await?);
    }
    let per_instance = started.elapsed() / INSTANCES as u32;
    println!("\nguest `llm`");
    println!(
        "  component size                  {} bytes",
        llm.bytes.len()
    );
    println!(
        "  compile (cranelift, uncached)   {:.0} ms",
        compile.as_secs_f64() * 1e3
    );
    println!(
        "  new instance + configure        {:.0} µs (mean of {INSTANCES})",
        per_instance.as_secs_f64() * 1e6
    );
    Ok(())
}
