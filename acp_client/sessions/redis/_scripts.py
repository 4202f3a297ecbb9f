"""The Lua scripts of :class:`~acp_client.sessions.RedisSessionStore`: one atomic server-side step each.

Key layout 3 (``_keys.py``): a session's lease names its holder and the holder's *incarnation* in the
session's key group (``"token|owner|inc"``); it is valid while the owner's heartbeat key of that group
(``hb:<owner>``) holds that incarnation. So a worker keeps all its leases of a group alive with one
``PEXPIRE`` of its heartbeat, and a dead worker's sessions are found from its heartbeat and the set of the
sessions it holds (``owned:<owner>|<inc>``, listed in ``owners``), never by looking at every lease. Released
and migrated sessions go to the group's ``free`` set. A lease of layout 2 (``"token|owner"``, whose key
expires with the lease) is honoured while its key exists, and turned into layout 3 when its holder claims
it again.

Each script touches the keys of one key group (one hash tag, so one Redis Cluster slot: see ``_link.py``),
and only commands that Redis 6.2+ and Valkey 8 both have (and ``cjson``, which both bundle). Scripts are run
by SHA (``EVALSHA``), loaded on a ``NOSCRIPT`` answer.
"""

from __future__ import annotations

import hashlib

__all__ = ["_GROUP", "_SCRIPTS", "_SHAS"]

# shared by the scripts that read leases: parse "token|owner|inc" (inc nil for layout 2; token nil for
# anything else), and whether a lease value names a live holder (P: the group's key prefix)
_LEASES = """
local function parse(v)
  if not v then return nil end
  local a = string.find(v, '|', 1, true)
  if not a then return nil end
  local t = tonumber(string.sub(v, 1, a - 1))
  local b = string.find(v, '|', a + 1, true)
  if not b then return t, string.sub(v, a + 1), nil end
  return t, string.sub(v, a + 1, b - 1), string.sub(v, b + 1)
end
local function live(P, v)
  local t, o, i = parse(v)
  if not t then return false end
  if not i then return true end
  return redis.call('GET', P .. 'hb:' .. o) == i
end
"""

# the bulk claim: one call for up to 200 sessions of one key group, their ids in one JSON argument and the
# answer in one JSON string (packing and parsing thousands of separate items costs far more on the client).
# The bulk scripts build the sessions' key names from the group's prefix, which holds the group's hash tag,
# so every key they touch is in the slot of the key they declare (the group's epoch key, which also routes
# the call to its node on a cluster): Redis 7 and Valkey 8 clusters accept undeclared keys of the declared
# slot.
# KEYS: the group's epoch key   ARGV: JSON array of ids, owner, ttl_ms, prefix, a fresh incarnation
# -> JSON: the incarnation, then per session two items: token (> 0: claimed or already ours) and the record
#    ('' if none), or 0 and the live holder's lease value
_CLAIM_MANY = _LEASES + """
local P, owner, ttl = ARGV[4], ARGV[2], ARGV[3]
local hb = P .. 'hb:' .. owner
local inc = redis.call('GET', hb)
if inc then
  redis.call('PEXPIRE', hb, ttl)
else
  inc = ARGV[5]
  redis.call('SET', hb, inc, 'PX', ttl)
end
local mine = owner .. '|' .. inc
local out = {inc}
local took = false
for _, sid in ipairs(cjson.decode(ARGV[1])) do
  local lease = P .. 'lease:' .. sid
  local cur = redis.call('GET', lease)
  local t, o, i = parse(cur)
  local token, holder = nil, nil
  if t and not i then
    if o == owner then
      token = t
      redis.call('SET', lease, t .. '|' .. mine)
    else
      holder = cur
    end
  elseif t and o == owner and i == inc then
    token = t
  elseif t and redis.call('GET', P .. 'hb:' .. o) == i then
    holder = cur
  elseif t then
    redis.call('SREM', P .. 'owned:' .. o .. '|' .. i, sid)
  end
  if not token and not holder then
    token = redis.call('INCR', P .. 'fence:' .. sid)
    redis.call('SET', lease, token .. '|' .. mine)
  end
  if token then
    redis.call('SADD', P .. 'owned:' .. mine, sid)
    redis.call('SREM', P .. 'free', sid)
    took = true
    out[#out + 1] = token
    out[#out + 1] = redis.call('HGET', P .. 'rec:' .. sid, 'record') or ''
  else
    if i then redis.call('SREM', P .. 'free', sid) end
    out[#out + 1] = 0
    out[#out + 1] = holder
  end
end
if took then redis.call('SADD', P .. 'owners', mine) end
return cjson.encode(out)
"""

# KEYS: the group's epoch key   ARGV: incarnation, ttl_ms, epoch, prefix, owner
# -> 1 the heartbeat (every lease of the group under that incarnation) extended; 0 it lapsed or was replaced;
#    -2 the group's data was lost
_RENEW_MANY = """
if redis.call('GET', KEYS[1]) ~= ARGV[3] then return -2 end
local hb = ARGV[4] .. 'hb:' .. ARGV[5]
if redis.call('GET', hb) == ARGV[1] then
  redis.call('PEXPIRE', hb, ARGV[2])
  return 1
end
return 0
"""

# KEYS: lease   ARGV: "token|owner|inc", prefix, sid
_RELEASE = _LEASES + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local t, o, i = parse(ARGV[1])
redis.call('SREM', ARGV[2] .. 'owned:' .. o .. '|' .. i, ARGV[3])
if redis.call('EXISTS', ARGV[2] .. 'rec:' .. ARGV[3]) == 1 then redis.call('SADD', ARGV[2] .. 'free', ARGV[3]) end
return 1
"""

# KEYS: the group's epoch key   ARGV: owner, incarnation, prefix
# every lease of one group given up at once (a worker closing): its heartbeat deleted, so the adoption scans
# find its sessions at once
_RELEASE_ALL = """
local hb = ARGV[3] .. 'hb:' .. ARGV[1]
if redis.call('GET', hb) == ARGV[2] then redis.call('DEL', hb) return 1 end
return 0
"""

# KEYS: lease, rec, index, epoch   ARGV: "token|owner|inc", token, owner, record json, sid, prefix, epoch
# -> {1, ''} written; {0, live holder or ''} lease not held; {-1, stored token} stale token; {-2, ''} data lost
_SAVE = _LEASES + """
if redis.call('GET', KEYS[4]) ~= ARGV[7] then return {-2, ''} end
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] or not live(ARGV[6], cur) then
  if live(ARGV[6], cur) then return {0, cur} end
  return {0, ''}
end
local stored = tonumber(redis.call('HGET', KEYS[2], 'token') or '0')
if stored > tonumber(ARGV[2]) then return {-1, tostring(stored)} end
redis.call('HSET', KEYS[2], 'record', ARGV[4], 'token', ARGV[2], 'owner', ARGV[3])
redis.call('SADD', KEYS[3], ARGV[5])
return {1, ''}
"""

# KEYS: lease, rec, index, fence, epoch   ARGV: "token|owner|inc", sid, prefix, epoch
# -> {1, ''} deleted (or already gone); {0, live holder or ''} lease not held; {-2, ''} data lost
_DELETE = _LEASES + """
if redis.call('GET', KEYS[5]) ~= ARGV[4] then return {-2, ''} end
local P, sid = ARGV[3], ARGV[2]
local cur = redis.call('GET', KEYS[1])
local alive = live(P, cur)
if cur ~= ARGV[1] or not alive then
  if alive then return {0, cur} end
  if redis.call('EXISTS', KEYS[2]) == 1 then return {0, ''} end
end
local t, o, i = parse(cur)
if i then redis.call('SREM', P .. 'owned:' .. o .. '|' .. i, sid) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4])
redis.call('SREM', KEYS[3], sid)
redis.call('SREM', P .. 'free', sid)
return {1, ''}
"""

# KEYS: the group's epoch key   ARGV: prefix, limit, owner
# -> JSON array of free session ids of the group: up to ``limit`` (random) from each dead incarnation's set
#    (its heartbeat gone or replaced) and from the free set (those of its members whose layout-2 lease still
#    runs are left out, unless it names ``owner``; a member a live worker holds is dropped from the set); a
#    dead incarnation with nothing left is dropped. Its cost grows with the workers and with the sessions
#    found, not with the sessions live workers hold.
_FREE = _LEASES + """
local P, n = ARGV[1], tonumber(ARGV[2])
local out = {}
for _, e in ipairs(redis.call('SMEMBERS', P .. 'owners')) do
  local sep = string.find(e, '|', 1, true)
  if (not sep) or redis.call('GET', P .. 'hb:' .. string.sub(e, 1, sep - 1)) ~= string.sub(e, sep + 1) then
    local some = redis.call('SRANDMEMBER', P .. 'owned:' .. e, n)
    if #some == 0 then redis.call('SREM', P .. 'owners', e) end
    for _, sid in ipairs(some) do out[#out + 1] = sid end
  end
end
for _, sid in ipairs(redis.call('SRANDMEMBER', P .. 'free', n)) do
  local cur = redis.call('GET', P .. 'lease:' .. sid)
  local t, o, i = parse(cur)
  if not live(P, cur) or (not i and o == ARGV[3]) then
    out[#out + 1] = sid
  elseif i then
    redis.call('SREM', P .. 'free', sid)
  end
end
return cjson.encode(out)
"""

# KEYS: the group's epoch key   ARGV: prefix, owner
# -> JSON array of the sessions ``owner`` holds in the group under its live incarnation (a worker restarted
#    with the same owner id takes them back)
_MINE = """
local inc = redis.call('GET', ARGV[1] .. 'hb:' .. ARGV[2])
if not inc then return '[]' end
return cjson.encode(redis.call('SMEMBERS', ARGV[1] .. 'owned:' .. ARGV[2] .. '|' .. inc))
"""

# KEYS: the group's index   ARGV: cursor, count
# -> {next cursor, JSON array of ids}
_SCAN = """
local page = redis.call('SSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
return {page[1], cjson.encode(page[2])}
"""

# the one-time step from layout 2 (a group without its ``layout`` marker): every indexed session that has no
# lease of layout 3 goes to the free set (a layout-2 lease still running is honoured when it is claimed)
# KEYS: the group's index   ARGV: cursor, count, prefix
# -> next cursor; at 0 the group is marked done
_CONVERT = """
local P = ARGV[3]
local page = redis.call('SSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
for _, sid in ipairs(page[2]) do
  local cur = redis.call('GET', P .. 'lease:' .. sid)
  local b = cur and string.find(cur, '|', (string.find(cur, '|', 1, true) or 0) + 1, true)
  if not b then redis.call('SADD', P .. 'free', sid) end
end
if tonumber(page[1]) == 0 then redis.call('SET', P .. 'layout', '3') end
return page[1]
"""

#: sessions per bulk script call: keeps each call short on the server (it runs atomically)
_GROUP = 200

_SCRIPTS = {
    "claim_many": _CLAIM_MANY,
    "renew_many": _RENEW_MANY,
    "release": _RELEASE,
    "release_all": _RELEASE_ALL,
    "save": _SAVE,
    "delete": _DELETE,
    "free": _FREE,
    "mine": _MINE,
    "scan": _SCAN,
    "convert": _CONVERT,
}
_SHAS = {name: hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest() for name, text in _SCRIPTS.items()}
