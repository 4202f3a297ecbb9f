"""The Lua scripts of :class:`~acp_client.sessions.RedisSessionStore`: one atomic server-side step each.

Claim, renew, release, fenced save and delete, their bulk forms, and the index scan; each touches the keys
of one key group (one hash tag, so one Redis Cluster slot: see ``_link.py``). Only commands that
Redis 6.2+ and Valkey 8 both have (and ``cjson``, which both bundle). Scripts are run by SHA (``EVALSHA``),
loaded on a ``NOSCRIPT`` answer.
"""

from __future__ import annotations

import hashlib

__all__ = ["_GROUP", "_SCRIPTS", "_SHAS"]

# KEYS: lease, fence, rec   ARGV: owner, ttl_ms
# -> {1, token, record|false} claimed (or already ours, extended); {0, holder} held by someone else
_CLAIM = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local sep = string.find(cur, '|', 1, true)
  if sep and string.sub(cur, sep + 1) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(string.sub(cur, 1, sep - 1)), redis.call('HGET', KEYS[3], 'record')}
  end
  return {0, cur}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. '|' .. ARGV[1], 'NX', 'PX', ARGV[2])
return {1, token, redis.call('HGET', KEYS[3], 'record')}
"""

# KEYS: lease, epoch   ARGV: "token|owner", ttl_ms, epoch
# -> 1 renewed; 0 lost (holder or '' follows); -2 the store lost its data
_RENEW = """
if redis.call('GET', KEYS[2]) ~= ARGV[3] then return {-2, ''} end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, ''}
end
return {0, cur or ''}
"""

# KEYS: lease   ARGV: "token|owner"
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""

# KEYS: lease, rec, index, epoch   ARGV: "token|owner", token, owner, record json, sid, epoch
# -> {1, ''} written; {0, holder-or-''} lease not held; {-1, stored token} stale token; {-2, ''} data lost
_SAVE = """
if redis.call('GET', KEYS[4]) ~= ARGV[6] then return {-2, ''} end
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then return {0, cur or ''} end
local stored = tonumber(redis.call('HGET', KEYS[2], 'token') or '0')
if stored > tonumber(ARGV[2]) then return {-1, tostring(stored)} end
redis.call('HSET', KEYS[2], 'record', ARGV[4], 'token', ARGV[2], 'owner', ARGV[3])
redis.call('SADD', KEYS[3], ARGV[5])
return {1, ''}
"""

# KEYS: lease, rec, index, fence, epoch   ARGV: "token|owner", sid, epoch
# -> {1, ''} deleted (or already gone); {0, holder-or-''} lease not held; {-2, ''} data lost
_DELETE = """
if redis.call('GET', KEYS[5]) ~= ARGV[3] then return {-2, ''} end
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if (not cur) and redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('SREM', KEYS[3], ARGV[2])
    return {1, ''}
  end
  return {0, cur or ''}
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4])
redis.call('SREM', KEYS[3], ARGV[2])
return {1, ''}
"""

# the bulk forms: one script call for up to 200 sessions of one key group, their ids in one JSON argument
# and the answer in one JSON string (packing and parsing thousands of separate items costs far more on the
# client). They build the sessions' key names from the group's prefix, which holds the group's hash tag, so
# every key they touch is in the slot of the key they declare (the group's epoch key, which also routes the
# call to its node on a cluster): Redis 7 and Valkey 8 clusters accept undeclared keys of the declared slot.
# KEYS: the group's epoch key (routing only)   ARGV: JSON array of session ids, owner, ttl_ms, the group's
# key prefix ("ns:{ns:b}:")
# -> JSON: per session two items, token (> 0: claimed or already ours) and the record ('' if none),
#    or 0 and the holder's lease value
_CLAIM_MANY = """
local out = {}
for _, sid in ipairs(cjson.decode(ARGV[1])) do
  local lease = ARGV[4] .. 'lease:' .. sid
  local cur = redis.call('GET', lease)
  local token = nil
  if cur then
    local sep = string.find(cur, '|', 1, true)
    if sep and string.sub(cur, sep + 1) == ARGV[2] then
      redis.call('PEXPIRE', lease, ARGV[3])
      token = tonumber(string.sub(cur, 1, sep - 1))
    end
  else
    token = redis.call('INCR', ARGV[4] .. 'fence:' .. sid)
    redis.call('SET', lease, token .. '|' .. ARGV[2], 'NX', 'PX', ARGV[3])
  end
  if token then
    out[#out + 1] = token
    out[#out + 1] = redis.call('HGET', ARGV[4] .. 'rec:' .. sid, 'record') or ''
  else
    out[#out + 1] = 0
    out[#out + 1] = cur
  end
end
return cjson.encode(out)
"""

# KEYS: the group's epoch key   ARGV: JSON array of [session id, "token|owner"], ttl_ms, epoch, the group's prefix
# -> JSON [-2]: the store lost its data; else one item per session: 1 renewed, or the holder's value ('' if none)
_RENEW_MANY = """
if redis.call('GET', KEYS[1]) ~= ARGV[3] then return cjson.encode({-2}) end
local out = {}
for i, pair in ipairs(cjson.decode(ARGV[1])) do
  local lease = ARGV[4] .. 'lease:' .. pair[1]
  local cur = redis.call('GET', lease)
  if cur == pair[2] then
    redis.call('PEXPIRE', lease, ARGV[2])
    out[i] = 1
  else
    out[i] = cur or ''
  end
end
return cjson.encode(out)
"""

# KEYS: the group's index   ARGV: cursor, count, the group's lease key prefix ('' for every id, else only ids
# without a lease)
# -> {next cursor, JSON array of ids}
_SCAN = """
local page = redis.call('SSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
if ARGV[3] == '' then return {page[1], cjson.encode(page[2])} end
local free = {}
for _, sid in ipairs(page[2]) do
  if redis.call('EXISTS', ARGV[3] .. sid) == 0 then free[#free + 1] = sid end
end
return {page[1], cjson.encode(free)}
"""

#: sessions per bulk script call: keeps each call short on the server (it runs atomically)
_GROUP = 200

_SCRIPTS = {
    "claim": _CLAIM,
    "claim_many": _CLAIM_MANY,
    "renew": _RENEW,
    "renew_many": _RENEW_MANY,
    "release": _RELEASE,
    "save": _SAVE,
    "delete": _DELETE,
    "scan": _SCAN,
}
_SHAS = {name: hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest() for name, text in _SCRIPTS.items()}
