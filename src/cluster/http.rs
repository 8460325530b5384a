//! The few bytes of HTTP/1.1 the etcd JSON gateway needs: one `POST` per connection
//! (`Connection: close`), a JSON body, an answer read to its end with a deadline. Written
//! here rather than pulled in: etcd's gateway is plain HTTP on the client port, and a
//! hand-sized client keeps the default build free of `protoc` and an async HTTP stack
//! (docs/guide/more-than-one-box.md says why). `https://` members go through [`post_tls`]:
//! ureq with rustls, which the notifier already builds in, checking them by the operator's
//! own CA.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The largest answer read: a range of every claim of a large fleet is far below it.
const MAX_ANSWER: usize = 16 << 20;

/// An answer: its status and its body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// `host:port` of `http://host:port[/]`; the config checked the shape.
fn authority(endpoint: &str) -> &str {
    let rest = endpoint.strip_prefix("http://").unwrap_or(endpoint);
    rest.strip_suffix('/').unwrap_or(rest)
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_string())
}

/// `POST <path>` with `body` to `endpoint`, the whole exchange within `timeout`.
pub fn post(
    endpoint: &str,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
    timeout: Duration,
) -> io::Result<Answer> {
    let deadline = Instant::now() + timeout;
    let host = authority(endpoint);
    let addrs: Vec<_> = host.to_socket_addrs()?.collect();
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address"));
    let mut stream = None;
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out("connect"));
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let mut s = stream.ok_or(last)?;
    let _ = s.set_nodelay(true);
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let left = deadline.saturating_duration_since(Instant::now());
    s.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out("answer"));
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > MAX_ANSWER {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "answer too long",
                    ));
                }
                // A complete answer ends the read even if the peer keeps the socket.
                if let Some(a) = parse(&raw)? {
                    return Ok(a);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(timed_out("answer"));
            }
            Err(e) => return Err(e),
        }
    }
    parse(&raw)?.ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "answer cut short"))
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// The answer in `raw` once it is complete; `None` while more is to come.
fn parse(raw: &[u8]) -> io::Result<Option<Answer>> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| bad("header not text"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| bad("no status line"))?;
    let mut length = None;
    let mut chunked = false;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "content-length" {
            length = Some(v.parse::<usize>().map_err(|_| bad("content-length"))?);
        } else if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
            chunked = true;
        }
    }
    let rest = &raw[end + 4..];
    if chunked {
        return Ok(dechunk(rest)?.map(|body| Answer { status, body }));
    }
    match length {
        Some(n) if rest.len() >= n => Ok(Some(Answer {
            status,
            body: rest[..n].to_vec(),
        })),
        Some(_) => Ok(None),
        // Neither: the body runs to the end of the connection, which the caller sees.
        None => Ok(None),
    }
}

/// A chunked body, once its last chunk is in.
fn dechunk(mut rest: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let mut body = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size = std::str::from_utf8(&rest[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok())
            .ok_or_else(|| bad("chunk size"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(Some(body));
        }
        if rest.len() < size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// `POST <path>` with `body` to an `https://` `endpoint` through `agent` (which checks the
/// member by the fleet's CA and shows this host's certificate when it has one), the whole
/// exchange within `timeout`.
pub fn post_tls(
    agent: &ureq::Agent,
    endpoint: &str,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
    timeout: Duration,
) -> io::Result<Answer> {
    let url = format!("{}{path}", endpoint.trim_end_matches('/'));
    let mut req = agent
        .post(&url)
        .config()
        .timeout_global(Some(timeout))
        .build()
        .header("Content-Type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req.send(body).map_err(|e| match e {
        ureq::Error::Io(e) => e,
        ureq::Error::Timeout(_) => timed_out("request"),
        other => io::Error::other(other.to_string()),
    })?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER as u64)
        .read_to_vec()
        .map_err(|e| io::Error::other(e.to_string()))?;
    Ok(Answer { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_by_length_and_by_chunks() {
        let a = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            .unwrap()
            .unwrap();
        assert_eq!((a.status, a.body.as_slice()), (200, b"{}".as_slice()));
        assert!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n{}")
                .unwrap()
                .is_none()
        );
        let chunked = b"HTTP/1.1 503 x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n2\r\n\"}\r\n0\r\n\r\n";
        let a = parse(chunked).unwrap().unwrap();
        assert_eq!((a.status, a.body.as_slice()), (503, b"{\"a\"}".as_slice()));
        assert!(parse(&chunked[..chunked.len() - 5]).unwrap().is_none());
        assert!(parse(b"garbage\r\n\r\n").is_err());
    }
}
