//! The directory on Redis or Valkey (`redis://`, `rediss://` for TLS, a password or
//! ACL user in the URL).
//!
//! Keys, under the configured prefix `P`:
//! - `P:node:<id>`: the node's record (JSON), with the TTL;
//! - `P:nodes`: a sorted set of node ids scored by when their record lapses (Unix ms,
//!   Redis's clock), so the live nodes are listed without `SCAN`;
//! - `P:stream:<app/name>`: the owning node's id, with the TTL; `~<id>` while the
//!   stream's publisher is away (its grace window), when another node may claim it;
//! - `P:streams:<id>`: the set of streams a node owns, with the TTL.
//!
//! Every operation that reads and writes is one Lua script, so it is atomic (two
//! nodes claiming one stream cannot both win) and costs one round trip. The scripts
//! name keys they build from their arguments, so they need one Redis (with replicas
//! and Sentinel for availability), not Redis Cluster: the directory's load is small
//! (see `docs/cluster.md`).

use super::store::{Claimed, NodeEntry, NodeRecord, StoreError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

static REFRESH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local id, ttl = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], ARGV[3], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, id)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('DEL', KEYS[3])
local lost = {}
for i = 5, #ARGV do
  local name = string.sub(ARGV[i], 2)
  local k = ARGV[4] .. name
  local cur = redis.call('GET', k)
  if (not cur) or cur == id or cur == '~' .. id then
    local v = id
    if string.sub(ARGV[i], 1, 1) == 'O' then v = '~' .. id end
    redis.call('SET', k, v, 'PX', ttl)
    redis.call('SADD', KEYS[3], name)
  else
    lost[#lost + 1] = name
  end
end
redis.call('PEXPIRE', KEYS[3], ttl)
return lost
",
    )
});

static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local cur = redis.call('GET', KEYS[1])
local from = ''
if cur and cur ~= ARGV[1] and cur ~= '~' .. ARGV[1] then
  if string.sub(cur, 1, 1) == '~' then
    from = string.sub(cur, 2)
  elseif ARGV[3] == '1' then
    from = cur
  else
    return {0, cur}
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
redis.call('SADD', KEYS[2], ARGV[4])
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]))
return {1, from}
",
    )
});

static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] or cur == '~' .. ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('SREM', KEYS[2], ARGV[2])
return 1
",
    )
});

static OWNER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local o = redis.call('GET', KEYS[1])
if not o then return false end
if string.sub(o, 1, 1) == '~' then o = string.sub(o, 2) end
return redis.call('GET', ARGV[1] .. o)
",
    )
});

static MARK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] or cur == '~' .. ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', tonumber(ARGV[3]))
  return 1
end
return 0
",
    )
});

static NODES: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')
local out = {}
for _, id in ipairs(ids) do
  local rec = redis.call('GET', ARGV[1] .. id)
  if rec then
    out[#out + 1] = rec
    out[#out + 1] = redis.call('SMEMBERS', ARGV[2] .. id)
  end
end
return out
",
    )
});

static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
for i = 3, #ARGV do
  local k = ARGV[2] .. ARGV[i]
  local cur = redis.call('GET', k)
  if cur == ARGV[1] or cur == '~' .. ARGV[1] then redis.call('DEL', k) end
end
return 1
",
    )
});

/// The directory on one Redis (or Valkey) server, through one multiplexed connection
/// that reconnects by itself.
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    prefix: Arc<str>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store on `url` (`redis://[user:password@]host[:port][/db]`, or `rediss://`
    /// trusting the web PKI's roots and, when given, those of the PEM bytes `ca`). No
    /// connection is made yet: the first operation makes it, so a node starts while
    /// Redis is away. Must be called within the Tokio runtime that runs the store.
    pub fn open(
        url: &str,
        ca: Option<Vec<u8>>,
        prefix: &str,
        timeout: Duration,
    ) -> Result<RedisStore, StoreError> {
        let client = match ca {
            Some(root_cert) => redis::Client::build_with_tls(
                url,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(root_cert),
                },
            )?,
            None => redis::Client::open(url)?,
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            // Reconnects are the manager's, in the background, each time an operation
            // finds the connection broken; the heartbeat keeps asking.
            .set_number_of_retries(1)
            .set_max_delay(timeout);
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(RedisStore {
            conn,
            prefix: prefix.into(),
        })
    }

    /// The server's CPU time so far (`INFO cpu`: user + system seconds).
    pub async fn server_cpu(&self) -> Result<f64, StoreError> {
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(info
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                matches!(k, "used_cpu_sys" | "used_cpu_user")
                    .then(|| v.trim().parse::<f64>().ok())?
            })
            .sum())
    }

    fn node_key(&self, id: &str) -> String {
        format!("{}:node:{id}", self.prefix)
    }

    fn nodes_key(&self) -> String {
        format!("{}:nodes", self.prefix)
    }

    fn streams_key(&self, id: &str) -> String {
        format!("{}:streams:{id}", self.prefix)
    }

    fn stream_prefix(&self) -> String {
        format!("{}:stream:", self.prefix)
    }

    fn stream_key(&self, key: &str) -> String {
        format!("{}{key}", self.stream_prefix())
    }
}

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl super::store::Store for RedisStore {
    async fn refresh(
        &self,
        node: &NodeRecord,
        owned: &[(String, bool)],
        ttl: Duration,
    ) -> Result<Vec<String>, StoreError> {
        let record = serde_json::to_string(node)?;
        let mut call = REFRESH.prepare_invoke();
        call.key(self.node_key(&node.id))
            .key(self.nodes_key())
            .key(self.streams_key(&node.id))
            .arg(&node.id)
            .arg(millis(ttl))
            .arg(record)
            .arg(self.stream_prefix());
        for (key, away) in owned {
            call.arg(format!("{}{key}", if *away { 'O' } else { 'L' }));
        }
        Ok(call.invoke_async(&mut self.conn.clone()).await?)
    }

    async fn claim(
        &self,
        node: &str,
        key: &str,
        takeover: bool,
        ttl: Duration,
    ) -> Result<Claimed, StoreError> {
        let (won, other): (i64, String) = CLAIM
            .key(self.stream_key(key))
            .key(self.streams_key(node))
            .arg(node)
            .arg(millis(ttl))
            .arg(if takeover { "1" } else { "0" })
            .arg(key)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match (won, other.is_empty()) {
            (1, true) => Claimed::Owned { from: None },
            (1, false) => Claimed::Owned { from: Some(other) },
            _ => Claimed::Held(other),
        })
    }

    async fn release(&self, node: &str, key: &str) -> Result<(), StoreError> {
        let _: i64 = RELEASE
            .key(self.stream_key(key))
            .key(self.streams_key(node))
            .arg(node)
            .arg(key)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    async fn away(&self, node: &str, key: &str, ttl: Duration) -> Result<(), StoreError> {
        let _: i64 = MARK
            .key(self.stream_key(key))
            .arg(node)
            .arg(format!("~{node}"))
            .arg(millis(ttl))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    async fn owner(&self, key: &str) -> Result<Option<NodeRecord>, StoreError> {
        let record: Option<String> = OWNER
            .key(self.stream_key(key))
            .arg(self.node_key(""))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(record.map(|r| serde_json::from_str(&r)).transpose()?)
    }

    async fn nodes(&self) -> Result<Vec<NodeEntry>, StoreError> {
        let flat: Vec<Value> = NODES
            .key(self.nodes_key())
            .arg(self.node_key(""))
            .arg(self.streams_key(""))
            .invoke_async(&mut self.conn.clone())
            .await?;
        let mut nodes = Vec::with_capacity(flat.len() / 2);
        for pair in flat.chunks(2) {
            let [record, streams] = pair else {
                return Err(StoreError::Shape);
            };
            let record: String = redis::from_redis_value_ref(record)?;
            let mut streams: Vec<String> = redis::from_redis_value_ref(streams)?;
            streams.sort();
            nodes.push(NodeEntry {
                record: serde_json::from_str(&record)?,
                streams,
            });
        }
        nodes.sort_by(|a, b| a.record.id.cmp(&b.record.id));
        Ok(nodes)
    }

    async fn leave(&self, node: &str, owned: &[String]) -> Result<(), StoreError> {
        let mut call = LEAVE.prepare_invoke();
        call.key(self.node_key(node))
            .key(self.nodes_key())
            .key(self.streams_key(node))
            .arg(node)
            .arg(self.stream_prefix());
        for key in owned {
            call.arg(key);
        }
        let _: i64 = call.invoke_async(&mut self.conn.clone()).await?;
        Ok(())
    }
}
