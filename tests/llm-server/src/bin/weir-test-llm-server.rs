//! TEST TOOL — not a model. Serves the test LLM server on loopback so that
//! weir can be run and benchmarked without a real provider.

use clap::Parser;
use std::time::Duration;
use weir_test_llm_server::{Reply, Script, TestLlmServer, presets};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    about = "Test tool: a scripted OpenAI-compatible chat and batch server on loopback (not a model)"
)]
struct Args {
    #[arg(long, default_value_t = 8089)]
    port: u16,
    /// echo: answer `echo: <prompt>`; sentiment: keyword classifier for demos;
    /// structured: JSON following the request's json_schema, values derived
    /// from the prompt (bundles answered entry by entry); label: one of the
    /// labels the system prompt lists after `labels:`.
    #[arg(long, default_value = "sentiment")]
    reply: String,
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// SECONDS=MS: from SECONDS after the start on, answers take MS instead
    /// of `--latency-ms`, as a server does when its other tenants leave or
    /// come; repeat for more changes (`--latency-change-at 20=100`).
    #[arg(long, value_parser = latency_change)]
    latency_change_at: Vec<(Duration, Duration)>,
    /// Each answer takes from 1 - F/2 to 1 + F/2 times `--latency-ms`
    /// whatever the load, as a model's answers of different lengths do
    /// (1: from half to one and a half times).
    #[arg(long, default_value_t = 0.0)]
    latency_spread: f64,
    /// Instead of `--latency-spread`: each answer's latency is log-normal
    /// with this sigma and a mean of `--latency-ms`, whatever the load, as a
    /// model's answers are: most near the median, a long tail of far longer
    /// ones (0.8: median 0.73 times the mean, one in a hundred beyond 4.7
    /// times; capped at 20 times).
    #[arg(long, default_value_t = 0.0)]
    latency_tail: f64,
    /// Answer 429 beyond this many requests at once.
    #[arg(long)]
    capacity: Option<usize>,
    /// SECONDS=N: from SECONDS after the start on, answer 429 beyond N
    /// requests at once instead of `--capacity`, as a shared endpoint does
    /// when its other tenants come or leave; repeat for more changes
    /// (`--capacity-change-at 8=16 --capacity-change-at 16=64`).
    #[arg(long, value_parser = capacity_change)]
    capacity_change_at: Vec<(Duration, usize)>,
    /// Seconds a 429 beyond `--capacity` asks the client to wait
    /// (`Retry-After`; 0 by default).
    #[arg(long)]
    retry_after: Option<f64>,
    /// Serve this many requests at once and queue the rest, first come,
    /// first served, as llama.cpp, vLLM and Ollama do (never 429).
    #[arg(long)]
    serve_at_once: Option<usize>,
    /// With `--serve-at-once`: each answer takes this share of
    /// `--latency-ms` more for every other request served with it, as a
    /// continuous-batching server (vLLM, TGI, SGLang) slows each step as its
    /// batch grows (0.01: 128 at once take 2.27 times as long each).
    #[arg(long, default_value_t = 0.0)]
    batch_slowdown: f64,
    /// Allow this many requests a minute (a bucket holding 6 seconds'
    /// worth) and answer 429 with `retry-after-ms` beyond, as a provider's
    /// rate limit does; every answer carries `x-ratelimit-*-requests`
    /// (`anthropic-ratelimit-requests-*` and `retry-after` on
    /// `/v1/messages`).
    #[arg(long)]
    requests_per_minute: Option<u32>,
    /// Allow this many tokens a minute (a bucket holding 6 seconds' worth),
    /// a request taking its prompt's tokens and its `max_tokens` (else its
    /// answer's) at arrival; 429 with `retry-after-ms` beyond; every answer
    /// carries `x-ratelimit-*-tokens` (`anthropic-ratelimit-tokens-*` on
    /// `/v1/messages`).
    #[arg(long)]
    tokens_per_minute: Option<u32>,
    /// On `/v1/messages` only, as Anthropic enforces output tokens apart:
    /// allow this many output tokens a minute (a bucket holding 6 seconds'
    /// worth), a request taking its `max_tokens` at arrival; 429 and
    /// `retry-after` beyond; every answer there carries
    /// `anthropic-ratelimit-output-tokens-*`.
    #[arg(long)]
    output_tokens_per_minute: Option<u32>,
    /// Misbehave as a kind of endpoint does, around `--latency-ms`: chaos
    /// (like ChaosLLM's preset: a quarter of requests fail with 429, 529,
    /// 503, 502, 504, 500, resets, 30–60 s hangs, HTML or truncated bodies;
    /// some answers slow); bursts (3 % of requests refused at any time, 80 %
    /// in bursts covering a quarter of the time, whatever the load);
    /// stress_extreme (like ChaosLLM's: 31 % refused at any time, 97 % in
    /// the first 5 s of every 15 s).
    #[arg(long)]
    preset: Option<String>,
    /// With `--preset bursts`: which windows are bursts. Each number is
    /// another schedule with the same share of bursts.
    #[arg(long, default_value_t = 0)]
    burst_schedule: u64,
    /// Batch APIs: seconds from a batch's creation to its end (0: done at
    /// the first look after it was made).
    #[arg(long, default_value_t = 0.0)]
    batch_seconds: f64,
    /// Batch APIs: lines whose prompt contains this text are never answered
    /// and end expired.
    #[arg(long)]
    batch_expire_marker: Option<String>,
    /// Answer 500 to `response_format: json_schema`, as llama.cpp's server
    /// does (`json_object` is honoured).
    #[arg(long)]
    refuse_json_schema: bool,
    /// Cut answers longer than the request's `max_tokens` (four characters
    /// to a token), with `finish_reason: length`.
    #[arg(long)]
    cut_at_max_tokens: bool,
    /// Once this many requests have arrived, answer nothing more: every
    /// request being served, queued or arriving waits until its client
    /// hangs up, as a model server whose GPU hung does.
    #[arg(long)]
    stall_after: Option<u64>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let reply = match args.reply.as_str() {
        "echo" => Reply::Echo,
        "sentiment" => Reply::Sentiment,
        "structured" => Reply::Structured,
        "label" => Reply::Label,
        other => {
            anyhow::bail!("unknown --reply `{other}`: use echo, sentiment, structured or label")
        }
    };
    let latency = Duration::from_millis(args.latency_ms);
    let base = match args.preset.as_deref() {
        None => Script::default(),
        Some("chaos") => presets::chaos(latency),
        Some("bursts") => presets::error_bursts(latency),
        Some("stress_extreme") => presets::stress_extreme(latency),
        Some(other) => {
            anyhow::bail!("unknown --preset `{other}`: use chaos, bursts or stress_extreme")
        }
    };
    let bursts = base
        .bursts
        .clone()
        .map(|bursts| weir_test_llm_server::Bursts {
            schedule: args.burst_schedule,
            ..bursts
        });
    anyhow::ensure!(
        (0.0..=2.0).contains(&args.latency_spread),
        "--latency-spread must be from 0 to 2"
    );
    anyhow::ensure!(
        (0.0..=3.0).contains(&args.latency_tail)
            && (args.latency_tail == 0.0 || args.latency_spread == 0.0),
        "--latency-tail must be from 0 to 3, and goes without --latency-spread"
    );
    anyhow::ensure!(
        args.batch_slowdown >= 0.0 && (args.batch_slowdown == 0.0 || args.serve_at_once.is_some()),
        "--batch-slowdown must be 0 or more, and goes with --serve-at-once"
    );
    let mut latency_steps = args.latency_change_at;
    latency_steps.sort();
    let mut capacity_steps = args.capacity_change_at;
    capacity_steps.sort();
    let script = Script {
        reply,
        latency,
        latency_steps,
        latency_spread: args.latency_spread,
        latency_tail: args.latency_tail,
        capacity: args.capacity,
        capacity_steps,
        retry_after_seconds: args.retry_after.or(base.retry_after_seconds),
        serve_at_once: args.serve_at_once,
        batch_slowdown: args.batch_slowdown,
        requests_per_minute: args.requests_per_minute,
        tokens_per_minute: args.tokens_per_minute,
        output_tokens_per_minute: args.output_tokens_per_minute,
        batch_seconds: Duration::try_from_secs_f64(args.batch_seconds).map_err(|_| {
            anyhow::anyhow!("--batch-seconds must be a number of seconds, 0 or more")
        })?,
        batch_expire_marker: args.batch_expire_marker,
        refuse_json_schema: args.refuse_json_schema,
        cut_at_max_tokens: args.cut_at_max_tokens,
        stall_after: args.stall_after,
        record: false,
        bursts,
        ..base
    };
    let server = TestLlmServer::bind(script, &format!("127.0.0.1:{}", args.port)).await?;
    println!(
        "test LLM server (not a model) listening: OPENAI_BASE_URL={} \
         (also Azure OpenAI under {root}/openai, Anthropic under {root}, batch APIs included)",
        server.base_url(),
        root = server.root_url()
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}

fn latency_change(arg: &str) -> Result<(Duration, Duration), String> {
    let (at, ms) = change(arg, "MS", "20=100")?;
    let ms = ms
        .parse::<u64>()
        .map_err(|_| format!("`{ms}`: expected a latency in whole milliseconds"))?;
    Ok((at, Duration::from_millis(ms)))
}

fn capacity_change(arg: &str) -> Result<(Duration, usize), String> {
    let (at, n) = change(arg, "N", "8=16")?;
    let n = n
        .parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{n}`: expected a number of requests, 1 or more"))?;
    Ok((at, n))
}

/// Splits `SECONDS=VALUE`, the seconds since the start parsed.
fn change<'a>(arg: &'a str, value: &str, example: &str) -> Result<(Duration, &'a str), String> {
    let (at, rest) = arg
        .split_once('=')
        .ok_or_else(|| format!("`{arg}`: expected SECONDS={value}, as in {example}"))?;
    let at = at
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("`{at}`: expected seconds since the start, 0 or more"))?;
    Ok((at, rest))
}
