/**
 * The limit engine's Redis scripts. Two kinds of counter live side by side, and one script call
 * may meet both:
 *
 * - a **rolling window** (per-account scopes, the failed-authentication budget) is a string:
 *   an 18-byte header (`r1`, then big-endian 32-bit `start`, `n`, `cap`, `last`) followed by a ring
 *   of `cap` 32-bit admission times, in milliseconds of Redis's own clock modulo 2^32. The `n`
 *   entries from `start` are the admissions still inside the window, oldest first; `last` is the
 *   newest time written. A request is admitted when fewer than `limit` admissions are younger than
 *   the window, so no span of one window ever holds more than `limit`. The ring grows by doubling
 *   up to the limit, only when every slot holds an admission still inside the window, and the key
 *   expires one window after its newest admission: a key costs 4 bytes per slot. Times modulo 2^32
 *   are read as ages (`now - time` modulo 2^32), which is exact for windows up to a day, since no
 *   entry a live key holds is older than two windows;
 * - a **fixed window** (per-IP scopes and express-rate-limit's counters) is an integer counter
 *   whose expiry is its window's end.
 *
 * Each counter's arguments are its limit, its window in ms and its flags: `e` when it is enforced
 * (a shadow counter never refuses), `r` when it rolls, and `a` on a rolling counter of events that
 * have already happened (failed credential comparisons): such an event is recorded even when the
 * counter has no room or another counter refused, in place of the oldest admission, so that the
 * ring keeps the newest `limit` events and reports full until the oldest of them leaves. A refusal
 * still answers `refused`: the event was over the limit.
 */

/** Shared Lua: Redis's clock, ring headers and the pruning of admissions that left the window. */
const RING_LUA = `local HEADER = 18
local MOD = 4294967296
local CHUNK = 16
local nowMs, nowMod
local function clock()
  if nowMs == nil then
    local t = redis.call('TIME')
    nowMs = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    nowMod = nowMs % MOD
  end
  return nowMs
end
-- Milliseconds since a stored time; a time ahead of the clock (it stepped back) reads 0.
local function age(stamp)
  local a = (nowMod - stamp) % MOD
  if a >= MOD / 2 then return 0 end
  return a
end
local function ahead(stamp)
  return (nowMod - stamp) % MOD >= MOD / 2
end
local function ring(key)
  local head = redis.call('GETRANGE', key, 0, HEADER - 1)
  if #head ~= HEADER or string.sub(head, 1, 2) ~= 'r1' then return {start = 0, n = 0, cap = 0, last = 0} end
  local start, n, cap, last = struct.unpack('>I4I4I4I4', head, 3)
  if cap == 0 or n > cap or start >= cap then return {start = 0, n = 0, cap = 0, last = 0} end
  return {start = start, n = n, cap = cap, last = last}
end
local function stampAt(key, r, j)
  local at = HEADER + 4 * ((r.start + j) % r.cap)
  return (struct.unpack('>I4', redis.call('GETRANGE', key, at, at + 3)))
end
-- Drops the admissions that left the window from the front of the ring; sets r.oldest, the time
-- of the oldest one left, and r.changed when any went.
local function prune(key, r, window)
  if r.n == 0 then return end
  if age(r.last) >= window then
    r.start, r.n, r.changed = 0, 0, true
    return
  end
  local run = math.min(r.n, r.cap - r.start, CHUNK)
  local at = HEADER + 4 * r.start
  local bytes = redis.call('GETRANGE', key, at, at + 4 * run - 1)
  for j = 0, run - 1 do
    local stamp = struct.unpack('>I4', bytes, 4 * j + 1)
    if age(stamp) < window then
      if j > 0 then r.start, r.n, r.changed = (r.start + j) % r.cap, r.n - j, true end
      r.oldest = stamp
      return
    end
  end
  local newest = run < r.n and stampAt(key, r, r.n - 1) or 0
  if run == r.n or age(newest) >= window then
    r.start, r.n, r.changed = 0, 0, true
    return
  end
  local lo, hi, found = run - 1, r.n - 1, newest
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    local stamp = stampAt(key, r, mid)
    if age(stamp) < window then hi, found = mid, stamp else lo = mid end
  end
  r.start, r.n, r.changed, r.oldest = (r.start + hi) % r.cap, r.n - hi, true, found
end
local function packHeader(r)
  return 'r1' .. struct.pack('>I4I4I4I4', r.start, r.n, r.cap, r.last)
end
-- Milliseconds until the count drops below limit: until its (n - limit + 1)th oldest admission
-- leaves; a whole window when the ring is empty.
local function ringTtl(key, r, window, limit)
  if r.n == 0 then return window end
  local index = r.n >= limit and r.n - limit or 0
  local stamp = r.oldest
  if index > 0 then stamp = stampAt(key, r, index) end
  -- A time ahead of the clock (it stepped back) leaves the window that much later.
  if ahead(stamp) then return window + (stamp - nowMod) % MOD end
  return window - age(stamp)
end
-- Drops the oldest admissions until fewer than limit are left: a ring needs only its newest limit
-- to know when it next has room under that limit.
local function dropOldest(key, r, limit)
  if r.n < limit then return end
  local drop = r.n - limit + 1
  r.start, r.n, r.changed = (r.start + drop) % r.cap, r.n - drop, true
  r.oldest = nil
  if r.n > 0 then r.oldest = stampAt(key, r, 0) end
end
-- Appends one admission at the clock's time (never before the newest), growing the ring by
-- doubling up to limit when it is full of admissions inside the window.
local function append(key, r, window, limit)
  local stamp = nowMod
  if r.n > 0 and ahead(r.last) then stamp = r.last end
  if r.oldest == nil then r.oldest = stamp end
  if r.n < r.cap then
    redis.call('SETRANGE', key, HEADER + 4 * ((r.start + r.n) % r.cap), struct.pack('>I4', stamp))
    r.n, r.last = r.n + 1, stamp
    redis.call('SETRANGE', key, 0, packHeader(r))
    redis.call('PEXPIRE', key, window)
    return
  end
  local body = ''
  if r.n > 0 then
    local slots = redis.call('GETRANGE', key, HEADER, HEADER + 4 * r.cap - 1)
    body = string.sub(slots, 4 * r.start + 1) .. string.sub(slots, 1, 4 * r.start)
  end
  local cap = math.max(math.min(limit, 2 * r.cap), r.n + 1)
  if cap < 4 and limit >= 4 then cap = 4 end
  body = body .. struct.pack('>I4', stamp) .. string.rep('\\0', 4 * (cap - r.n - 1))
  r.start, r.n, r.cap, r.last = 0, r.n + 1, cap, stamp
  redis.call('SET', key, packHeader(r) .. body, 'PX', window)
end
`;

/**
 * KEYS: the counters. ARGV: per key, its limit, window (ms) and flags. Reads every counter
 * first; when no enforced one is full, counts one in each that has room. Returns
 * `{refused, now, hits1, ttl1, hits2, ttl2, …}`: `refused` is the 1-based index of the enforced
 * counter that refused, or 0; `now` is Redis's clock in ms when a rolling counter was met, else 0;
 * `hits` is the count with this request, counted or not (above the limit: no room), or the count
 * as it was when another counter refused; `ttl` is the ms until the counter has room again
 * (rolling) or its window ends (fixed), negative when it has no window yet.
 */
export const ADMIT_SCRIPT = `${RING_LUA}
local reply = {0, 0}
local refused = 0
local rings = {}
for i = 1, #KEYS do
  local limit = tonumber(ARGV[3 * i - 2])
  local window = tonumber(ARGV[3 * i - 1])
  local flags = ARGV[3 * i]
  local count, ttl
  if string.find(flags, 'r', 1, true) then
    clock()
    local r = ring(KEYS[i])
    prune(KEYS[i], r, window)
    rings[i] = r
    count = r.n
    ttl = ringTtl(KEYS[i], r, window, limit)
  else
    ttl = redis.call('PTTL', KEYS[i])
    count = 0
    if ttl >= 0 then count = tonumber(redis.call('GET', KEYS[i])) or 0 end
  end
  if count >= limit then
    count = count + 1
    if refused == 0 and string.find(flags, 'e', 1, true) then refused = i end
  end
  reply[2 * i + 1] = count
  reply[2 * i + 2] = ttl
end
for i = 1, #KEYS do
  local r = rings[i]
  local limit = tonumber(ARGV[3 * i - 2])
  local window = tonumber(ARGV[3 * i - 1])
  if refused == 0 and reply[2 * i + 1] < limit then
    if r ~= nil then
      append(KEYS[i], r, window, limit)
      reply[2 * i + 2] = ringTtl(KEYS[i], r, window, limit)
    elseif reply[2 * i + 2] < 0 then
      redis.call('SET', KEYS[i], 1, 'PX', window)
      reply[2 * i + 2] = window
    else
      redis.call('INCR', KEYS[i])
    end
    reply[2 * i + 1] = reply[2 * i + 1] + 1
  elseif r ~= nil and string.find(ARGV[3 * i], 'a', 1, true) then
    -- Something that already happened: counted without room too, in place of the oldest.
    dropOldest(KEYS[i], r, limit)
    append(KEYS[i], r, window, limit)
    reply[2 * i + 2] = ringTtl(KEYS[i], r, window, limit)
    if reply[2 * i + 1] < limit then reply[2 * i + 1] = reply[2 * i + 1] + 1 end
  elseif r ~= nil and r.changed then
    redis.call('SETRANGE', KEYS[i], 0, packHeader(r))
  end
end
reply[1] = refused
if nowMs ~= nil then reply[2] = nowMs end
return reply`;

/**
 * KEYS: the counters. ARGV: per key, its window (ms) and flags. Returns `{count1, ttl1, …}`
 * without writing: the admissions inside the window (rolling) or the count (fixed), and the ms
 * until the oldest admission leaves the window or the window ends; -2 for an empty counter.
 */
export const READ_SCRIPT = `${RING_LUA}
local reply = {}
for i = 1, #KEYS do
  local window = tonumber(ARGV[2 * i - 1])
  local count, ttl = 0, -2
  if string.find(ARGV[2 * i], 'r', 1, true) then
    clock()
    local r = ring(KEYS[i])
    prune(KEYS[i], r, window)
    count = r.n
    if r.n > 0 then ttl = window - age(r.oldest) end
  else
    ttl = redis.call('PTTL', KEYS[i])
    if ttl >= 0 then count = tonumber(redis.call('GET', KEYS[i])) or 0 end
  end
  reply[2 * i - 1] = count
  reply[2 * i] = ttl
end
return reply`;

/**
 * KEYS[1]: one counter; ARGV[1]: its flags. Takes back one admission (a rolling window's newest)
 * while the counter lives, never below zero and never creating one; the expiry stays.
 * Returns the count after it.
 */
export const DECREMENT_SCRIPT = `${RING_LUA}
if string.find(ARGV[1], 'r', 1, true) then
  local r = ring(KEYS[1])
  if r.n == 0 then return 0 end
  r.n = r.n - 1
  redis.call('SETRANGE', KEYS[1], 0, packHeader(r))
  return r.n
end
local count = tonumber(redis.call('GET', KEYS[1]))
if count == nil or count <= 0 then return 0 end
return redis.call('DECR', KEYS[1])`;
