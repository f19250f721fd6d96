//! A minimal pipelining RESP2 client: commands are appended to a buffer, flushed in one
//! write, and their replies read in order. Lighter than a general client, so the client side
//! costs Redis as little CPU as the RocketMQ client costs skiff.

use anyhow::{bail, Context, Result};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Simple(Bytes),
    Error(String),
    Int(i64),
    Bulk(Bytes),
    Array(Vec<Value>),
    Nil,
}

impl Value {
    pub fn into_array(self) -> Result<Vec<Value>> {
        match self {
            Value::Array(v) => Ok(v),
            Value::Nil => Ok(Vec::new()),
            Value::Error(e) => bail!("redis error: {e}"),
            other => bail!("expected an array, got {other:?}"),
        }
    }

    pub fn into_bulk(self) -> Result<Bytes> {
        match self {
            Value::Bulk(b) | Value::Simple(b) => Ok(b),
            Value::Error(e) => bail!("redis error: {e}"),
            other => bail!("expected a bulk string, got {other:?}"),
        }
    }

    pub fn as_int(&self) -> Result<i64> {
        match self {
            Value::Int(i) => Ok(*i),
            Value::Error(e) => bail!("redis error: {e}"),
            other => bail!("expected an integer, got {other:?}"),
        }
    }

    pub fn ok(self) -> Result<()> {
        match self {
            Value::Error(e) => bail!("redis error: {e}"),
            _ => Ok(()),
        }
    }
}

pub struct Resp {
    stream: TcpStream,
    wbuf: Vec<u8>,
    rbuf: BytesMut,
    queued: usize,
}

impl Resp {
    pub async fn connect(addr: &str) -> Result<Resp> {
        let stream = TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to redis at {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(Resp {
            stream,
            wbuf: Vec::with_capacity(64 * 1024),
            rbuf: BytesMut::with_capacity(256 * 1024),
            queued: 0,
        })
    }

    /// Queues one command.
    pub fn cmd(&mut self, args: &[&[u8]]) {
        self.wbuf.push(b'*');
        self.wbuf.extend_from_slice(args.len().to_string().as_bytes());
        self.wbuf.extend_from_slice(b"\r\n");
        for a in args {
            self.wbuf.push(b'$');
            self.wbuf.extend_from_slice(a.len().to_string().as_bytes());
            self.wbuf.extend_from_slice(b"\r\n");
            self.wbuf.extend_from_slice(a);
            self.wbuf.extend_from_slice(b"\r\n");
        }
        self.queued += 1;
    }

    /// Writes every queued command; returns how many replies to read.
    pub async fn flush(&mut self) -> Result<usize> {
        self.stream.write_all(&self.wbuf).await?;
        self.wbuf.clear();
        Ok(std::mem::take(&mut self.queued))
    }

    /// Reads the next reply.
    pub async fn read(&mut self) -> Result<Value> {
        loop {
            if let Some((v, used)) = parse(&self.rbuf)? {
                self.rbuf.advance(used);
                return Ok(v);
            }
            if self.rbuf.capacity() - self.rbuf.len() < 64 * 1024 {
                self.rbuf.reserve(256 * 1024);
            }
            let n = self.stream.read_buf(&mut self.rbuf).await?;
            if n == 0 {
                bail!("redis closed the connection");
            }
        }
    }

    /// Sends one command and reads its reply.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Value> {
        self.cmd(args);
        self.flush().await?;
        self.read().await
    }
}

fn line(buf: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(from..)?;
    let pos = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..pos], from + pos + 2))
}

fn int(s: &[u8]) -> Result<i64> {
    std::str::from_utf8(s)?
        .parse::<i64>()
        .context("bad RESP integer")
}

/// Parses one value at the start of `buf`: `None` when incomplete.
fn parse(buf: &[u8]) -> Result<Option<(Value, usize)>> {
    parse_at(buf, 0)
}

fn parse_at(buf: &[u8], at: usize) -> Result<Option<(Value, usize)>> {
    let Some(&tag) = buf.get(at) else {
        return Ok(None);
    };
    let Some((l, next)) = line(buf, at + 1) else {
        return Ok(None);
    };
    Ok(Some(match tag {
        b'+' => (Value::Simple(Bytes::copy_from_slice(l)), next),
        b'-' => (Value::Error(String::from_utf8_lossy(l).into_owned()), next),
        b':' => (Value::Int(int(l)?), next),
        b'$' => {
            let n = int(l)?;
            if n < 0 {
                (Value::Nil, next)
            } else {
                let end = next + n as usize;
                if buf.len() < end + 2 {
                    return Ok(None);
                }
                (Value::Bulk(Bytes::copy_from_slice(&buf[next..end])), end + 2)
            }
        }
        b'*' => {
            let n = int(l)?;
            if n < 0 {
                (Value::Nil, next)
            } else {
                let mut items = Vec::with_capacity(n as usize);
                let mut pos = next;
                for _ in 0..n {
                    match parse_at(buf, pos)? {
                        Some((v, p)) => {
                            items.push(v);
                            pos = p;
                        }
                        None => return Ok(None),
                    }
                }
                (Value::Array(items), pos)
            }
        }
        other => bail!("bad RESP type byte {other:#x}"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_and_partial() {
        let full = b"*2\r\n$3\r\nabc\r\n*2\r\n:5\r\n$-1\r\n+OK\r\n";
        let (v, used) = parse(full).unwrap().unwrap();
        assert_eq!(
            v,
            Value::Array(vec![
                Value::Bulk(Bytes::from_static(b"abc")),
                Value::Array(vec![Value::Int(5), Value::Nil])
            ])
        );
        assert_eq!(&full[used..], b"+OK\r\n");
        for cut in 0..used {
            assert!(parse(&full[..cut]).unwrap().is_none(), "cut {cut}");
        }
    }
}
