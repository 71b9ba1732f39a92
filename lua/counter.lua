-- The plain counter: one call of a request whose every hit is a limit's whole state in one
-- count, under a key that names its window (a fixed window without debt, without modifiers
-- that keep state or leave headroom), each hit its descriptor's only limit. Most requests are
-- such a request, and the driver's general path (parsing 14 arguments, tables per hit, the
-- modifiers' walk, the groups) costs Redis several times what the counts do; this call reads
-- and charges the counts and nothing else. sluice decides each hit on the count it replies, as
-- the memory store decides on its own (crates/sluice-core/src/engine.rs, `decide_hit`), and
-- the store contract test holds both to the same answers.
--
-- The call takes KEYS[i], hit i's key (byte-identical to envoyproxy/ratelimit's), ARGV[1]
-- "1" when every hit is charged, fitting or not (the reference's counting, "every"), else "0"
-- (all or nothing, "all"), then for each hit i in turn:
--   ARGV[+0]  cost  h (0 only reads)
--   ARGV[+1]  requests_per_unit  L
--   ARGV[+2]  ttl_ms  the key's time to live when the call makes it: to the window's end;
--             for a window from the first hit, `f<W in µs>@<now in µs>` instead
--   ARGV[+3]  role  as lua/common.lua's: how the hit's denial weighs on its request
-- A window from the first hit (lua/fixed_window.lua: a hash of its start s and count c, read
-- as empty from s + W on) is read and charged as its script does; a charge that finds no live
-- window opens one at now.
-- It replies, for each hit, the count it was decided on (what its key held after the hits
-- before it that stand), then 1 when the hits' charges stand, or 0 when the request vetoed
-- itself (common.lua: an enforced hit denied, or every quota hit) and nothing was written,
-- then for each hit of a window from the first hit, in order, its window's start (now for a
-- window not yet open).
-- With "every", each hit is charged; with "all", a hit that fits (count + h <= L) is, unless
-- the request is vetoed. A key the call makes expires when the window of its last hit ends.

local COUNTER_ARGS = 4

-- One hit (most calls), without a table: its count, read and charged. A request of one hit is
-- vetoed only by that hit's denial, which charges nothing anyway (but with "every").
local function count_one(key, ARGV)
  local cost = tonumber(ARGV[2])
  if cost > 0 and ARGV[1] == '1' then
    local after = redis.call('INCRBY', key, ARGV[2])
    if after == cost then
      redis.call('PEXPIRE', key, ARGV[4])
    end
    return {after - cost, 1}
  end
  local count = tonumber(redis.call('GET', key) or '0')
  if cost > 0 and count + cost <= tonumber(ARGV[3]) then
    if count == 0 then
      redis.call('SET', key, ARGV[2], 'PX', ARGV[4])
    else
      redis.call('INCRBY', key, ARGV[2])
    end
  end
  return {count, 1}
end

-- The first-hit window `hit` names (hit.first), as its script reads it: its start and count,
-- and whether it is live (a window not yet open, or ended, starts at now with nothing).
local function read_first(hit)
  local stored = redis.call('HMGET', hit.key, 's', 'c')
  local s = tonumber(stored[1] or '0')
  if not stored[1] or s + hit.period <= hit.now then
    return hit.now, 0, false
  end
  return s, tonumber(stored[2]), true
end

-- Writes `count` to the first-hit window of `hit` that was read as `window` ({s, c, live}):
-- what it adds to a live one, or a new window from now.
local function write_first(hit, window, count)
  if window.live then
    redis.call('HINCRBY', hit.key, 'c', string.format('%d', count - window.c))
  else
    redis.call('HSET', hit.key, 's', string.format('%d', hit.now), 'c', string.format('%d', count))
    redis.call('PEXPIRE', hit.key, string.format('%d', math.ceil(hit.period / 1000) + 1))
  end
end

-- Several hits: each read once per key, charged in `held` on what the hits before it left
-- (every hit with `every`; with all or nothing, one that fits), written at the end unless
-- the request vetoed itself; replies the counts, whether they stood, then the windows' starts.
local function count_many(hits, every)
  -- `windows`: the first-hit windows read, made for the first of them.
  local counts, held, read, decisions, charged, windows = {}, {}, {}, {}, {}, nil
  for i, hit in ipairs(hits) do
    local count = held[hit.key]
    if count == nil then
      if hit.first then
        local s, c, live = read_first(hit)
        windows = windows or {}
        windows[hit.key] = {s = s, c = c, live = live}
        count = c
      else
        count = tonumber(redis.call('GET', hit.key) or '0')
      end
      read[hit.key] = count
    end
    counts[i] = count
    local fits = count + hit.cost <= hit.limit
    decisions[i] = {fits and 1 or 0}
    held[hit.key] = count
    if (fits or every) and hit.cost > 0 then
      held[hit.key] = count + hit.cost
      charged[hit.key] = hit
    end
  end
  local stood = 1
  if not every and vetoed(hits, decisions) then
    stood = 0
  else
    for key, hit in pairs(charged) do
      if hit.first then
        write_first(hit, windows[key], held[key])
      elseif read[key] == 0 then
        redis.call('SET', key, string.format('%d', held[key]), 'PX', hit.ttl)
      else
        redis.call('INCRBY', key, string.format('%d', held[key] - read[key]))
      end
    end
  end
  counts[#hits + 1] = stood
  for _, hit in ipairs(hits) do
    if hit.first then
      counts[#counts + 1] = windows[hit.key].s
    end
  end
  return counts
end

-- One hit on a window from the first hit, without the tables of several: vetoed only by its
-- own denial, as `count_one`.
local function first_one(key, ARGV)
  local cost = tonumber(ARGV[2])
  local period, now = string.match(ARGV[4], '^f(%d+)@(%d+)$')
  local hit = {key = key, period = tonumber(period), now = tonumber(now)}
  local s, c, live = read_first(hit)
  if cost > 0 and (ARGV[1] == '1' or c + cost <= tonumber(ARGV[3])) then
    write_first(hit, {s = s, c = c, live = live}, c + cost)
  end
  return {c, 1, s}
end

local function counter(KEYS, ARGV)
  if #KEYS == 1 then
    -- 102: `f`, a window from the first hit.
    if string.byte(ARGV[4]) == 102 then
      return first_one(KEYS[1], ARGV)
    end
    return count_one(KEYS[1], ARGV)
  end
  local hits = {}
  for i = 1, #KEYS do
    local at = 2 + (i - 1) * COUNTER_ARGS
    hits[i] = {key = KEYS[i], cost = tonumber(ARGV[at]), limit = tonumber(ARGV[at + 1]),
      ttl = ARGV[at + 2], role = ARGV[at + 3]}
    if string.byte(ARGV[at + 2]) == 102 then
      local period, now = string.match(ARGV[at + 2], '^f(%d+)@(%d+)$')
      hits[i].first, hits[i].period, hits[i].now = true, tonumber(period), tonumber(now)
    end
  end
  return count_many(hits, ARGV[1] == '1')
end
