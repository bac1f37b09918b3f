//! The client layer: one HTTP/1.1 keep-alive connection to the broker (raw
//! hyper `client::conn::http1`; no pool, so producers never contend for
//! connections and each producer's requests go down its own socket, one at a
//! time), the typed calls every scenario makes on it (`api.rs`: push, pop,
//! ack, configure), and the request bodies (`payload.rs`).
//!
//! It imports nothing of the tool but `error.rs`.

mod api;
pub(crate) mod payload;

pub(crate) use api::{ack_results, check_push, completed, queued, Ack, Message, Popped};

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::error::{Context, Result};

/// A response: status and the whole body.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) body: Bytes,
}

impl Reply {
    /// The start of the body, for error messages.
    pub(crate) fn snippet(&self) -> String {
        String::from_utf8_lossy(&self.body)
            .chars()
            .take(300)
            .collect()
    }
}

/// A keep-alive connection; requests on it are sequential.
pub(crate) struct Conn {
    sender: SendRequest<Full<Bytes>>,
    host: HeaderValue,
}

impl Conn {
    /// Open a connection (`TCP_NODELAY` on) and start driving it.
    pub(crate) async fn connect(addr: SocketAddr) -> Result<Conn> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connect to {addr}"))?;
        stream.set_nodelay(true).context("set TCP_NODELAY")?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .with_context(|| format!("HTTP handshake with {addr}"))?;
        // Errors surface on the next request as a closed channel.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let host = HeaderValue::from_str(&addr.to_string()).context("Host header")?;
        Ok(Conn { sender, host })
    }

    /// Open `n` connections, one after the other.
    pub(crate) async fn connect_many(addr: SocketAddr, n: usize) -> Result<Vec<Conn>> {
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            conns.push(Conn::connect(addr).await?);
        }
        Ok(conns)
    }

    /// `GET path`.
    pub(crate) async fn get(&mut self, path: &str) -> Result<Reply> {
        self.send(Method::GET, path, Bytes::new()).await
    }

    /// `POST path` with a JSON body.
    pub(crate) async fn post_json(&mut self, path: &str, body: Bytes) -> Result<Reply> {
        self.send(Method::POST, path, body).await
    }

    async fn send(&mut self, method: Method, path: &str, body: Bytes) -> Result<Reply> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.host.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .context("build request")?;
        self.sender
            .ready()
            .await
            .context("connection to the broker")?;
        let response = self
            .sender
            .send_request(request)
            .await
            .with_context(|| format!("request {path}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .with_context(|| format!("read the response to {path}"))?
            .to_bytes();
        Ok(Reply { status, body })
    }
}
