"""The one Lua script a worker runs per host and sync: its batch in, the fleet's state out.

It runs atomically on the Redis server, so two workers' batches never interleave, and it
reads the time from the server (``TIME``), so the workers' clocks need not agree. Every key
it writes gets a TTL, refreshed on each write: a host no worker calls any more expires.

Everything it reads back is taken as written by a stranger (a co-tenant under the prefix, a
worker of another version): open times past ``recovery_timeout_max``, times and buckets from
the future, counts out of range and values that are no numbers are corrected before use and
written back corrected, and the reply says which (``CORRECTED_*``).

KEYS: breaker hash, budget hash, throttle hash, workers sorted set (all of one host).

ARGV:
  1 worker id         2 key TTL, ms         3 a worker counts as alive this long, ms
  4 breaker state here (0 closed, 1 open, 2 half open)    5 open here for, ms
  6 generation known here    7 failure run (trailing failures)
  8 ms since the batch's last run of successes began (-1: no success in the batch)
  9 change made here (0 none, 1 opened, 2 closed)
  10 failure_threshold    11 recovery_timeout, ms    12 recovery_timeout_max, ms
  13 jitter factor for a reopening (1 + uniform(0, 0.2), drawn by the worker)
  14 deposits    15 withdrawals    16 ratio    17 min_per_second    18 max_tokens
  19 throttle on (0/1)    20 tries    21 accepts    22 bucket width, ms    23 buckets
  24 ms since the first of the trailing failures (0 without)
  25 the channel an opening is published on ('' publishes none)    26 the host, as named there

An opening this script makes (a batch's failures bring the fleet's run to the threshold, or
a worker's own opening is accepted) is published on ARGV[25] as ``<generation>:<open for
ms>:<host>`` (``push`` reads it): every subscribed worker follows it at once, not at its
next sync. PUBLISH names no key, so it goes to every subscriber in a cluster too.

Returns: {breaker state, open for ms, generation, tokens (a string: Lua returns integers
only), throttle tries, throttle accepts, workers alive, fleet failure run, corrected (a sum
of ``CORRECTED_*``)}.
"""

from __future__ import annotations

from typing import Final

# What the script found out of range and corrected, as the bits of its last reply value.
CORRECTED_BREAKER: Final = 1
CORRECTED_BUDGET: Final = 2
CORRECTED_THROTTLE: Final = 4
CORRECTED_WORKERS: Final = 8

# A generation is an integer in [0, LAST_GENERATION] (2^52: a double, Lua's number, holds each
# exactly). The script never writes one past it and rebuilds a hash that holds one; a worker
# ignores a reply or a push that carries one. Written out in SYNC as 4503599627370496.
LAST_GENERATION: Final = 2**52

SYNC: Final = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])
local threshold = tonumber(ARGV[10])
local open_max = tonumber(ARGV[12])
local last_generation = 4503599627370496
local corrected = 0

-- The generation after g. Past the range it starts again from the server's time: a worker
-- that holds g (whoever wrote it) sees a change, and follows it.
local function after(g)
  if g + 1 > last_generation then return now end
  return g + 1
end

-- A number read back, or nil when it is none: NaN and the infinities are no counts.
local function number(value)
  local n = tonumber(value)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then return nil end
  return n
end

-- A write that may need memory comes first, so a Redis out of memory refuses the whole
-- script rather than running part of it.
redis.call('ZADD', KEYS[4], now, ARGV[1])
-- Members scored after now were not written by a worker's sync (each scores the server's
-- time): they would shrink every worker's share of the budget for ever.
if redis.call('ZREMRANGEBYSCORE', KEYS[4], '(' .. now, '+inf') > 0 then
  corrected = bit.bor(corrected, 8)
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[4], ttl)
local workers = redis.call('ZCARD', KEYS[4])

-- The breaker. A missing hash (first use, expiry, FLUSHALL, a restarted server) starts from
-- the reporting worker's own state, at a generation no worker can hold yet (the server's
-- time in ms, or past the reporting worker's), so every worker adopts it. A probing worker's
-- is an opening that ran out: a fleet rebuilt closed from it would close every open worker
-- without any probe. A hash whose state or generation is out of range is rebuilt the same way.
local known = tonumber(ARGV[6])
local fields = redis.call('HMGET', KEYS[1], 's', 'u', 'g', 'o', 'l', 'r')
local state = number(fields[1])
local open_until = number(fields[2]) or 0
local generation = number(fields[3])
local openings = number(fields[4]) or 0
local latest = number(fields[5]) or 0
if fields[1] and (state ~= 0 and state ~= 1 or generation == nil or generation < 0
    or generation > last_generation or generation ~= math.floor(generation)) then
  state = nil
  corrected = bit.bor(corrected, 1)
end
-- No opening outlasts recovery_timeout_max, however far ahead the hash says it ends.
if open_until > now + open_max then
  open_until = now + open_max
  corrected = bit.bor(corrected, 1)
end
if openings < 0 or openings > 64 then
  openings = math.max(0, math.min(64, math.floor(openings)))
  corrected = bit.bor(corrected, 1)
end
if latest > now then
  latest = now
  corrected = bit.bor(corrected, 1)
end

-- The fleet's run: the failures seen after the latest success any worker saw, in server
-- time. Each entry is one batch's trailing failures, "<time of the first>:<count>".
local run = {}
for first, count in string.gmatch(fields[6] or '', '(%d+):(%d+)') do
  first, count = tonumber(first), tonumber(count)
  if first > now or count > threshold then corrected = bit.bor(corrected, 1) end
  run[#run + 1] = {math.min(first, now), math.min(count, threshold)}
end

if state == nil then
  -- Never past the range, whatever the worker held: a hash out of range is rebuilt again at
  -- every sync, and each rebuild forgets the fleet's run of failures.
  generation = math.max(now, after(known))
  run = {}
  if tonumber(ARGV[4]) ~= 0 then
    state = 1
    open_until = now + tonumber(ARGV[5])
    openings = 1
  else
    state = 0
    open_until = 0
    openings = 0
  end
end

local throttle_reset = false
local opened = false
local change = tonumber(ARGV[9])
-- A change made against an older generation lost a race and is dropped; a worker that had
-- not synced yet (generation 0) raced no one.
if change ~= 0 and (known == generation or known == 0) then
  local ran_out = state == 1 and now >= open_until
  if change == 1 and (state == 0 or ran_out) then
    state = 1
    open_until = now + tonumber(ARGV[5])
    openings = openings + 1
    generation = after(generation)
    run = {}
    opened = true
  elseif change == 2 and ran_out then
    state = 0
    openings = 0
    generation = after(generation)
    run = {}
    throttle_reset = true
  end
end

-- A success ends every run that began before it, whichever worker saw either: so a batch
-- that holds a success but ends in failures keeps only those, and a success from before an
-- outage, reported late, drops none of the outage's failures.
local failures = 0
if state == 0 then
  local success_age = tonumber(ARGV[8])
  if success_age >= 0 then latest = math.max(latest, now - success_age) end
  local trailing = tonumber(ARGV[7])
  if trailing > 0 then run[#run + 1] = {now - tonumber(ARGV[24]), trailing} end
  local kept = {}
  for _, entry in ipairs(run) do
    if entry[1] >= latest then
      kept[#kept + 1] = entry
      failures = failures + entry[2]
    end
  end
  -- At most 64 entries: the two oldest runs become one, as old as the older, so a success
  -- drops it no later than it would have dropped either.
  while #kept > 64 do
    kept[2] = {math.min(kept[1][1], kept[2][1]), kept[1][2] + kept[2][2]}
    table.remove(kept, 1)
  end
  run = kept
  if failures >= threshold then
    openings = openings + 1
    local duration = tonumber(ARGV[11])
    if openings > 1 then
      local doubled = duration * 2 ^ math.min(openings - 2, 62)
      duration = math.min(open_max, math.min(open_max, doubled) * tonumber(ARGV[13]))
    end
    state = 1
    open_until = now + math.floor(duration)
    generation = after(generation)
    run = {}
    failures = 0
    opened = true
  end
else
  run = {}
end
local parts = {}
for i, entry in ipairs(run) do parts[i] = string.format('%d:%d', entry[1], entry[2]) end
redis.call('HSET', KEYS[1], 's', state, 'u', open_until, 'g', generation, 'f', failures,
  'o', openings, 'l', latest, 'r', table.concat(parts, ','))
redis.call('PEXPIRE', KEYS[1], ttl)
local open_for = 0
if state == 1 then open_for = math.max(0, open_until - now) end
if opened and (ARGV[25] or '') ~= '' then
  redis.call('PUBLISH', ARGV[25], string.format('%d:%d:%s', generation, open_for, ARGV[26]))
end

-- The budget: one bucket, refilled by server time.
local max_tokens = tonumber(ARGV[18])
local bucket = redis.call('HMGET', KEYS[2], 't', 'a')
local tokens = number(bucket[1])
local refilled_at = number(bucket[2])
if bucket[1] and (tokens == nil or tokens < 0 or tokens > max_tokens) then
  tokens = math.max(0, math.min(max_tokens, tokens or 0))
  corrected = bit.bor(corrected, 2)
end
if refilled_at and refilled_at > now then
  refilled_at = now
  corrected = bit.bor(corrected, 2)
end
tokens = tokens or max_tokens
refilled_at = refilled_at or now
if now > refilled_at then
  tokens = math.min(max_tokens, tokens + (now - refilled_at) / 1000 * tonumber(ARGV[17]))
  refilled_at = now
end
tokens = math.min(max_tokens, tokens + tonumber(ARGV[14]) * tonumber(ARGV[16]))
tokens = math.min(max_tokens, math.max(0, tokens - tonumber(ARGV[15])))
redis.call('HSET', KEYS[2], 't', string.format('%.17g', tokens), 'a', refilled_at)
redis.call('PEXPIRE', KEYS[2], ttl)

-- The throttle window: one field pair per bucket of time, older buckets dropped, and
-- buckets from the future or counts that are no counts dropped as corrupt.
local tries, accepts = 0, 0
if throttle_reset then redis.call('DEL', KEYS[3]) end
if tonumber(ARGV[19]) == 1 then
  local width = tonumber(ARGV[22])
  local newest = math.floor(now / width)
  local oldest = newest - tonumber(ARGV[23])
  if tonumber(ARGV[20]) > 0 then redis.call('HINCRBY', KEYS[3], newest .. ':t', ARGV[20]) end
  if tonumber(ARGV[21]) > 0 then redis.call('HINCRBY', KEYS[3], newest .. ':a', ARGV[21]) end
  local window = redis.call('HGETALL', KEYS[3])
  for i = 1, #window, 2 do
    local name = window[i]
    local sep = string.find(name, ':', 1, true)
    local index = sep and tonumber(string.sub(name, 1, sep - 1))
    local count = number(window[i + 1])
    if index == nil or index <= oldest then
      redis.call('HDEL', KEYS[3], name)
    elseif index > newest or count == nil or count < 0 or count > 2147483647 then
      redis.call('HDEL', KEYS[3], name)
      corrected = bit.bor(corrected, 4)
    elseif string.sub(name, sep + 1) == 't' then
      tries = tries + count
    else
      accepts = accepts + count
    end
  end
  if #window > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
end
-- A window's accepts never outnumber its tries: each accept is a try's.
accepts = math.min(accepts, tries)

return {state, open_for, generation, string.format('%.17g', tokens), tries, accepts, workers,
  failures, corrected}
"""
