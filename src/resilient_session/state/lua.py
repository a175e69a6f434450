"""The one Lua script a worker runs per host and sync: its batch in, the fleet's state out.

It runs atomically on the Redis server, so two workers' batches never interleave, and it
reads the time from the server (``TIME``), so the workers' clocks need not agree. Every key
it writes gets a TTL, refreshed on each write: a host no worker calls any more expires.

KEYS: breaker hash, budget hash, throttle hash, workers sorted set (all of one host).

ARGV:
  1 worker id         2 key TTL, ms         3 a worker counts as alive this long, ms
  4 breaker state here (0 closed, 1 open, 2 half open)    5 open here for, ms
  6 generation known here    7 failure run    8 success seen (0/1)
  9 change made here (0 none, 1 opened, 2 closed)
  10 failure_threshold    11 recovery_timeout, ms    12 recovery_timeout_max, ms
  13 jitter factor for a reopening (1 + uniform(0, 0.2), drawn by the worker)
  14 deposits    15 withdrawals    16 ratio    17 min_per_second    18 max_tokens
  19 throttle on (0/1)    20 tries    21 accepts    22 bucket width, ms    23 buckets

Returns: {breaker state, open for ms, generation, tokens (a string: Lua returns integers
only), throttle tries, throttle accepts, workers alive, fleet failure run}.
"""

from __future__ import annotations

from typing import Final

SYNC: Final = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])

redis.call('ZADD', KEYS[4], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[4], ttl)
local workers = redis.call('ZCARD', KEYS[4])

-- The breaker. A missing hash (first use, expiry, FLUSHALL, a restarted server) starts from
-- the reporting worker's own state, at a generation no worker can hold yet (the server's
-- time in ms), so every worker adopts it. A probing worker's is an opening that ran out: a
-- fleet rebuilt closed from it would close every open worker without any probe.
local known = tonumber(ARGV[6])
local fields = redis.call('HMGET', KEYS[1], 's', 'u', 'g', 'f', 'o')
local state = tonumber(fields[1])
local open_until = tonumber(fields[2]) or 0
local generation = tonumber(fields[3]) or 0
local failures = tonumber(fields[4]) or 0
local openings = tonumber(fields[5]) or 0
if state == nil then
  generation = math.max(now, known + 1)
  failures = 0
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
local change = tonumber(ARGV[9])
-- A change made against an older generation lost a race and is dropped; a worker that had
-- not synced yet (generation 0) raced no one.
if change ~= 0 and (known == generation or known == 0) then
  local ran_out = state == 1 and now >= open_until
  if change == 1 and (state == 0 or ran_out) then
    state = 1
    open_until = now + tonumber(ARGV[5])
    openings = openings + 1
    generation = generation + 1
    failures = 0
  elseif change == 2 and ran_out then
    state = 0
    openings = 0
    generation = generation + 1
    failures = 0
    throttle_reset = true
  end
end

-- A batch that ends in a success (the host just answered this worker) ends the fleet's run of
-- failures. One whose success came before failures adds them: the other workers' failures may
-- be newer than that success, and in an outage every batch's first try was a success.
if state == 0 then
  local run = tonumber(ARGV[7])
  if tonumber(ARGV[8]) == 1 and run == 0 then
    failures = 0
  else
    failures = failures + run
  end
  if failures >= tonumber(ARGV[10]) then
    openings = openings + 1
    local duration = tonumber(ARGV[11])
    if openings > 1 then
      local cap = tonumber(ARGV[12])
      local doubled = duration * 2 ^ math.min(openings - 2, 62)
      duration = math.min(cap, math.min(cap, doubled) * tonumber(ARGV[13]))
    end
    state = 1
    open_until = now + math.floor(duration)
    generation = generation + 1
    failures = 0
  end
end
redis.call('HSET', KEYS[1], 's', state, 'u', open_until, 'g', generation, 'f', failures,
  'o', openings)
redis.call('PEXPIRE', KEYS[1], ttl)
local open_for = 0
if state == 1 then open_for = math.max(0, open_until - now) end

-- The budget: one bucket, refilled by server time.
local max_tokens = tonumber(ARGV[18])
local bucket = redis.call('HMGET', KEYS[2], 't', 'a')
local tokens = tonumber(bucket[1]) or max_tokens
local refilled_at = tonumber(bucket[2]) or now
if now > refilled_at then
  tokens = math.min(max_tokens, tokens + (now - refilled_at) / 1000 * tonumber(ARGV[17]))
  refilled_at = now
end
tokens = math.min(max_tokens, tokens + tonumber(ARGV[14]) * tonumber(ARGV[16]))
tokens = math.min(max_tokens, math.max(0, tokens - tonumber(ARGV[15])))
redis.call('HSET', KEYS[2], 't', string.format('%.17g', tokens), 'a', refilled_at)
redis.call('PEXPIRE', KEYS[2], ttl)

-- The throttle window: one field pair per bucket of time, older buckets dropped.
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
    local number = sep and tonumber(string.sub(name, 1, sep - 1))
    if number == nil or number <= oldest then
      redis.call('HDEL', KEYS[3], name)
    elseif string.sub(name, sep + 1) == 't' then
      tries = tries + (tonumber(window[i + 1]) or 0)
    else
      accepts = accepts + (tonumber(window[i + 1]) or 0)
    end
  end
  if #window > 0 then redis.call('PEXPIRE', KEYS[3], ttl) end
end

return {state, open_for, generation, string.format('%.17g', tokens), tries, accepts, workers,
  failures}
"""
