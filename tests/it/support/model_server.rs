//! A scripted model provider on 127.0.0.1 for the real agent CLIs: the Anthropic Messages
//! API (`POST /v1/messages`, what Claude Code calls through `ANTHROPIC_BASE_URL`) and the
//! OpenAI Responses API (`POST /v1/responses`, what Codex calls through a custom provider's
//! `base_url`), both streaming as server-sent events.
//!
//! Its model does one thing: asked with a shell tool on offer, it calls it once with
//! [`COMMAND`] (which writes and commits a file in the CLI's working directory), and once
//! the tool's output comes back it ends the turn with a usage block. Every other request
//! (Claude Code's side calls without tools) gets a one-word answer. Which failure the
//! provider plays is the [`Scenario`], fixed per server; every request is kept in
//! [`ModelServer::requests`] so a test can count what the fleet paid for.
//!
//! std only: one thread accepts, one thread a connection; each answer closes its
//! connection (`Connection: close`), so no request ever waits behind a held one.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the model's one tool call runs: a file written and committed in the CLI's working
/// directory (the attempt's worktree). The identity is given on the command line because
/// the agent's environment may carry no git identity of its own.
pub const COMMAND: &str = "echo afk > afk-done.txt && git add afk-done.txt && \
git -c user.name=afk-model -c user.email=afk-model@example.invalid commit -q -m 'afk: model commit'";

/// The tokens every successful turn reports: input, output, cache-read.
pub const TURN_USAGE: (u64, u64, u64) = (1000, 50, 200);

/// The model's last words. They talk about limits, as a model may: the conversation must
/// never read as the CLI's own report of one.
pub const FINAL_TEXT: &str =
    "Done: the file is committed. No rate_limit_error here, and no usage limit reached.";

/// The model name the server answers with (what the CLI asked for is echoed back).
const FALLBACK_MODEL: &str = "afk-scripted-model";

/// How long a held connection (silence after headers, no headers at all) is kept open
/// at most: beyond any test's deadline, short of a leaked thread living forever.
const HOLD_MAX: Duration = Duration::from_secs(900);

/// Which failure the provider plays. Counts are of *model* requests (those offering a shell
/// tool, or continuing a tool call); side calls always succeed unless the scenario is
/// account-wide (a real provider refuses every call of an exhausted account).
#[derive(Debug, Clone, PartialEq)]
pub enum Scenario {
    /// Every request answered.
    Success,
    /// The first `n` model requests get 429 with `retry-after: 0`, then success.
    Burst429 { n: usize },
    /// Every request 429 with `retry-after` (seconds).
    Sustained429 { retry_after: u64 },
    /// The prepaid credit or quota is used up.
    Credit,
    /// The plan's usage limit, resetting at `reset_epoch`.
    UsageLimit { reset_epoch: u64 },
    /// 401: the key is invalid.
    Unauthorized,
    /// 400: this conversation is refused (too long): the failure, not the account's.
    BadRequest,
    /// Every request gets this status, overloaded (529 Anthropic's, 503 anyone's).
    Overloaded { status: u16 },
    /// The first model request's stream is cut after its first event; then success.
    StreamCutOnce,
    /// Every model request's stream is cut after its first event.
    StreamCutAlways,
    /// 200 and the SSE headers, then nothing: the connection is held open.
    HeadersThenSilence,
    /// The request is read and never answered: the connection is held open.
    NoHeaders,
}

/// Which API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Anthropic,
    OpenAi,
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub api: Api,
    pub path: String,
    /// Whether it was a model request (offering a shell tool or answering a tool call).
    pub model: bool,
    /// The HTTP status answered (0 when none was sent).
    pub status: u16,
}

struct Shared {
    scenario: Scenario,
    seen: Mutex<Vec<Seen>>,
    stop: AtomicBool,
}

/// The running server; dropping it stops accepting and releases held connections.
pub struct ModelServer {
    pub port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl ModelServer {
    pub fn start(scenario: Scenario) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("model server bind");
        let port = listener.local_addr().expect("model server addr").port();
        listener
            .set_nonblocking(true)
            .expect("model server nonblocking");
        let shared = Arc::new(Shared {
            scenario,
            seen: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::spawn(move || {
            while !s.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let s = Arc::clone(&s);
                        std::thread::spawn(move || serve(conn, &s));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        ModelServer {
            port,
            shared,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:<port>`: Claude Code's `ANTHROPIC_BASE_URL`; Codex's provider
    /// `base_url` is this plus `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Model requests answered with a successful turn.
    pub fn model_successes(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.model && r.status == 200)
            .count()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// A port on 127.0.0.1 where nothing listens (bound, then let go): connection refused.
pub fn refused_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

struct Request {
    path: String,
    body: serde_json::Value,
}

fn read_request(conn: &TcpStream) -> Option<Request> {
    let mut r = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let _method = parts.next()?;
    let path = parts.next()?.to_string();
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "content-length" {
            length = v.parse().ok()?;
        } else if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(length, 0);
        r.read_exact(&mut body).ok()?;
    }
    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    Some(Request { path, body })
}

/// Whether the request offers a shell tool (`Bash`, `exec_command`, `shell`) or carries a
/// tool's result back: the conversation itself, not a side call.
fn is_model_request(body: &serde_json::Value) -> bool {
    let shell = body["tools"].as_array().is_some_and(|tools| {
        tools
            .iter()
            .any(|t| matches!(t["name"].as_str(), Some("Bash" | "exec_command" | "shell")))
    });
    shell || has_tool_result(body)
}

/// Whether the conversation already holds the tool's output (the model's second turn).
fn has_tool_result(body: &serde_json::Value) -> bool {
    let anthropic = body["messages"].as_array().is_some_and(|m| {
        m.iter().any(|msg| {
            msg["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
        })
    });
    let openai = body["input"].as_array().is_some_and(|items| {
        items
            .iter()
            .any(|i| i["type"] == "function_call_output" || i["type"] == "custom_tool_call_output")
    });
    anthropic || openai
}

fn serve(mut conn: TcpStream, s: &Shared) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let Some(req) = read_request(&conn) else {
        return;
    };
    let api = if req.path.contains("/responses") {
        Api::OpenAi
    } else {
        Api::Anthropic
    };
    let model = is_model_request(&req.body);
    let index = {
        let seen = s.seen.lock().map(|v| v.iter().filter(|r| r.model).count());
        seen.unwrap_or(0)
    };
    let record = |status: u16| {
        if let Ok(mut v) = s.seen.lock() {
            v.push(Seen {
                api,
                path: req.path.clone(),
                model,
                status,
            });
        }
    };
    let model_name = req.body["model"]
        .as_str()
        .unwrap_or(FALLBACK_MODEL)
        .to_string();
    let second_turn = has_tool_result(&req.body);
    // Claude Code falls back to a non-streaming request when a stream breaks.
    let streaming = req.body["stream"].as_bool().unwrap_or(false);
    let answer = |conn: &mut TcpStream, cut: bool| {
        let call_tool = model && !second_turn;
        match api {
            Api::Anthropic if !streaming => {
                let _ = write_json(conn, &anthropic_message(&model_name, call_tool, model), cut);
            }
            Api::Anthropic => {
                let events = anthropic_turn(&model_name, call_tool, model);
                let _ = write_sse(conn, &events, cut.then_some(1));
            }
            Api::OpenAi => {
                let _ = write_sse(conn, &openai_turn(&model_name, call_tool), cut.then_some(1));
            }
        }
        if cut {
            let _ = conn.shutdown(Shutdown::Both);
        }
    };
    let ok = |conn: &mut TcpStream| answer(conn, false);
    match &s.scenario {
        Scenario::Success => {
            record(200);
            ok(&mut conn);
        }
        Scenario::Burst429 { n } if model && index < *n => {
            record(429);
            let _ = write_error(
                &mut conn,
                api,
                429,
                ErrorKind::RateLimit,
                &[("retry-after", "0")],
            );
        }
        Scenario::Burst429 { .. } => {
            record(200);
            ok(&mut conn);
        }
        Scenario::Sustained429 { retry_after } => {
            record(429);
            let ra = retry_after.to_string();
            let _ = write_error(
                &mut conn,
                api,
                429,
                ErrorKind::RateLimit,
                &[("retry-after", &ra)],
            );
        }
        Scenario::Credit => {
            let status = match api {
                Api::Anthropic => 400,
                Api::OpenAi => 429,
            };
            record(status);
            let _ = write_error(&mut conn, api, status, ErrorKind::Credit, &[]);
        }
        Scenario::UsageLimit { reset_epoch } => {
            record(429);
            let reset = reset_epoch.to_string();
            let _ = write_error(
                &mut conn,
                api,
                429,
                ErrorKind::UsageLimit(*reset_epoch),
                &[
                    ("anthropic-ratelimit-unified-status", "rejected"),
                    ("anthropic-ratelimit-unified-reset", &reset),
                    (
                        "anthropic-ratelimit-unified-representative-claim",
                        "five_hour",
                    ),
                    ("x-codex-primary-used-percent", "100"),
                    ("x-codex-primary-reset-at", &reset),
                ],
            );
        }
        Scenario::Unauthorized => {
            record(401);
            let _ = write_error(&mut conn, api, 401, ErrorKind::Auth, &[]);
        }
        Scenario::BadRequest if model => {
            record(400);
            let _ = write_error(&mut conn, api, 400, ErrorKind::TooLong, &[]);
        }
        Scenario::BadRequest => {
            record(200);
            ok(&mut conn);
        }
        Scenario::Overloaded { status } => {
            record(*status);
            let _ = write_error(&mut conn, api, *status, ErrorKind::Overloaded, &[]);
        }
        Scenario::StreamCutOnce | Scenario::StreamCutAlways
            if model && (index == 0 || s.scenario == Scenario::StreamCutAlways) =>
        {
            record(200);
            answer(&mut conn, true);
        }
        Scenario::StreamCutOnce | Scenario::StreamCutAlways => {
            record(200);
            ok(&mut conn);
        }
        Scenario::HeadersThenSilence => {
            record(200);
            let _ = conn.write_all(sse_head().as_bytes());
            let _ = conn.flush();
            hold(&conn, s);
        }
        Scenario::NoHeaders => {
            record(0);
            hold(&conn, s);
        }
    }
}

/// Keeps `conn` open, unanswered, until the client goes or the server stops.
fn hold(conn: &TcpStream, s: &Shared) {
    let started = Instant::now();
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    let mut probe = [0u8; 1];
    while !s.stop.load(Ordering::Relaxed) && started.elapsed() < HOLD_MAX {
        match (&*conn).read(&mut probe) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

fn sse_head() -> String {
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
     connection: close\r\n\r\n"
        .to_string()
}

/// Writes the SSE answer; with `cut`, only that many events, then returns (the caller
/// drops the connection mid-stream).
fn write_sse(
    conn: &mut TcpStream,
    events: &[serde_json::Value],
    cut: Option<usize>,
) -> std::io::Result<()> {
    conn.write_all(sse_head().as_bytes())?;
    for (i, e) in events.iter().enumerate() {
        if cut.is_some_and(|c| i >= c) {
            break;
        }
        let name = e["type"].as_str().unwrap_or("message");
        conn.write_all(format!("event: {name}\ndata: {e}\n\n").as_bytes())?;
        conn.flush()?;
    }
    Ok(())
}

enum ErrorKind {
    TooLong,
    RateLimit,
    Credit,
    UsageLimit(u64),
    Auth,
    Overloaded,
}

/// The provider's error body for `kind`, in `api`'s shape, as the real providers send it.
fn error_body(api: Api, kind: &ErrorKind) -> serde_json::Value {
    use serde_json::json;
    match (api, kind) {
        (Api::Anthropic, ErrorKind::TooLong) => json!({"type":"error","error":{
            "type":"invalid_request_error",
            "message":"prompt is too long: 250000 tokens > 200000 maximum"}}),
        (Api::OpenAi, ErrorKind::TooLong) => json!({"error":{
            "message":"Your input exceeds the context window of this model. Please adjust your input and try again.",
            "type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}),
        (Api::Anthropic, ErrorKind::RateLimit) => json!({"type":"error","error":{
            "type":"rate_limit_error",
            "message":"This request would exceed the rate limit for your organization of 50 requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."}}),
        (Api::Anthropic, ErrorKind::Credit) => json!({"type":"error","error":{
            "type":"invalid_request_error",
            "message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}),
        (Api::Anthropic, ErrorKind::UsageLimit(_)) => json!({"type":"error","error":{
            "type":"rate_limit_error",
            "message":"This request would exceed your account's rate limit. Please try again later."}}),
        (Api::Anthropic, ErrorKind::Auth) => json!({"type":"error","error":{
            "type":"authentication_error","message":"invalid x-api-key"}}),
        (Api::Anthropic, ErrorKind::Overloaded) => json!({"type":"error","error":{
            "type":"overloaded_error","message":"Overloaded"}}),
        (Api::OpenAi, ErrorKind::RateLimit) => json!({"error":{
            "message":"Rate limit reached for requests. Please try again in 1s.",
            "type":"requests","param":null,"code":"rate_limit_exceeded"}}),
        (Api::OpenAi, ErrorKind::Credit) => json!({"error":{
            "message":"You exceeded your current quota, please check your plan and billing details.",
            "type":"insufficient_quota","param":null,"code":"insufficient_quota"}}),
        (Api::OpenAi, ErrorKind::UsageLimit(reset)) => json!({"error":{
            "type":"usage_limit_reached",
            "message":"The usage limit has been reached",
            "plan_type":"plus",
            "resets_at": reset,
            "resets_in_seconds": reset.saturating_sub(crate_now())}}),
        (Api::OpenAi, ErrorKind::Auth) => json!({"error":{
            "message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.",
            "type":"invalid_request_error","param":null,"code":"invalid_api_key"}}),
        (Api::OpenAi, ErrorKind::Overloaded) => json!({"error":{
            "message":"The server is overloaded or not ready yet.",
            "type":"server_error","param":null,"code":"server_is_overloaded"}}),
    }
}

fn crate_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn write_error(
    conn: &mut TcpStream,
    api: Api,
    status: u16,
    kind: ErrorKind,
    headers: &[(&str, &str)],
) -> std::io::Result<()> {
    let body = error_body(api, &kind).to_string();
    let reason = match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    conn.write_all(body.as_bytes())?;
    conn.flush()
}

/// A non-streaming answer: the whole JSON body, or with `cut` its first half and the
/// connection dropped.
fn write_json(conn: &mut TcpStream, body: &serde_json::Value, cut: bool) -> std::io::Result<()> {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    let sent = if cut { body.len() / 2 } else { body.len() };
    conn.write_all(&body.as_bytes()[..sent])?;
    conn.flush()
}

/// The non-streaming Anthropic message of one turn, as [`anthropic_turn`] streams it.
fn anthropic_message(model: &str, call_tool: bool, counted: bool) -> serde_json::Value {
    use serde_json::json;
    let (input, output, cache) = if counted { TURN_USAGE } else { (10, 1, 0) };
    let (content, stop) = if call_tool {
        (
            json!([{"type":"tool_use","id":"toolu_afk_1","name":"Bash",
                    "input":{"command": COMMAND, "description": "Write and commit a file"}}]),
            "tool_use",
        )
    } else {
        (json!([{"type":"text","text":FINAL_TEXT}]), "end_turn")
    };
    json!({"id":"msg_afk_1","type":"message","role":"assistant","model":model,
           "content":content,"stop_reason":stop,"stop_sequence":null,
           "usage":{"input_tokens":input,"output_tokens":output,"cache_read_input_tokens":cache,
                    "cache_creation_input_tokens":0}})
}

/// Anthropic Messages stream events of one turn: a `Bash` tool call running [`COMMAND`]
/// when `call_tool`, else a short text; the usage in `message_start` and `message_delta`.
fn anthropic_turn(model: &str, call_tool: bool, counted: bool) -> Vec<serde_json::Value> {
    use serde_json::json;
    let (input, output, cache) = if counted { TURN_USAGE } else { (10, 1, 0) };
    let mut ev = vec![json!({"type":"message_start","message":{
        "id":"msg_afk_1","type":"message","role":"assistant","model":model,"content":[],
        "stop_reason":null,"stop_sequence":null,
        "usage":{"input_tokens":input,"output_tokens":1,"cache_read_input_tokens":cache,
                 "cache_creation_input_tokens":0}}})];
    let stop = if call_tool {
        let args = json!({"command": COMMAND, "description": "Write and commit a file"});
        ev.push(
            json!({"type":"content_block_start","index":0,"content_block":{
            "type":"tool_use","id":"toolu_afk_1","name":"Bash","input":{}}}),
        );
        ev.push(json!({"type":"content_block_delta","index":0,"delta":{
            "type":"input_json_delta","partial_json":args.to_string()}}));
        "tool_use"
    } else {
        ev.push(
            json!({"type":"content_block_start","index":0,"content_block":{
            "type":"text","text":""}}),
        );
        ev.push(json!({"type":"content_block_delta","index":0,"delta":{
            "type":"text_delta","text":FINAL_TEXT}}));
        "end_turn"
    };
    ev.push(json!({"type":"content_block_stop","index":0}));
    ev.push(
        json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},
        "usage":{"input_tokens":input,"output_tokens":output,"cache_read_input_tokens":cache,
                 "cache_creation_input_tokens":0}}),
    );
    ev.push(json!({"type":"message_stop"}));
    ev
}

/// OpenAI Responses stream events of one turn: an `exec_command` function call running
/// [`COMMAND`] when `call_tool`, else an assistant message; the usage in `response.completed`.
fn openai_turn(model: &str, call_tool: bool) -> Vec<serde_json::Value> {
    use serde_json::json;
    let (input, output, cache) = TURN_USAGE;
    let item = if call_tool {
        json!({"type":"function_call","id":"fc_afk_1","call_id":"call_afk_1",
               "name":"exec_command","arguments":json!({"cmd": COMMAND}).to_string(),
               "status":"completed"})
    } else {
        json!({"type":"message","id":"msg_afk_1","role":"assistant","status":"completed",
               "content":[{"type":"output_text","text":FINAL_TEXT,
                           "annotations":[]}]})
    };
    let response = |status: &str, usage: serde_json::Value| {
        json!({"id":"resp_afk_1","object":"response","created_at":crate_now(),
               "status":status,"model":model,"output":[],"usage":usage})
    };
    vec![
        json!({"type":"response.created","response":response("in_progress", serde_json::Value::Null)}),
        json!({"type":"response.output_item.added","output_index":0,"item":item}),
        json!({"type":"response.output_item.done","output_index":0,"item":item}),
        json!({"type":"response.completed","response":response("completed", json!({
            "input_tokens":input,"input_tokens_details":{"cached_tokens":cache},
            "output_tokens":output,"output_tokens_details":{"reasoning_tokens":0},
            "total_tokens":input + output}))}),
    ]
}
