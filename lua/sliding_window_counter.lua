-- sliding_window_counter: counts of the current and previous aligned windows; the previous one
-- weighs what the sliding window still covers of it (src/algorithm/sliding_window_counter.rs).
-- KEYS[1]: CACHE_KEY_PREFIX .. sliding_window_counter_domain_key_value_..., a hash:
--          s = current window start (µs), p = previous count, c = current count.
-- ARGV, reply: see common.lua. Admits when p x (W - elapsed) + (c + h) x W <= L x W.

if limit == 0 then
  return blocked()
end
local start = now - now % period
local s, p, c = start, 0, 0
local stored = redis.call('HMGET', key, 's', 'p', 'c')
if stored[1] then
  local ss, sp, sc = tonumber(stored[1]), tonumber(stored[2]), tonumber(stored[3])
  if ss == start or ss > start then
    -- The current window, or one ahead of the clock (it went back): kept as it is.
    s, p, c = ss, sp, sc
  elseif ss + period == start then
    p = sc
  end
end
local elapsed = math.max(0, now - s)

local function weighted(previous, current)
  return previous * math.max(0, period - elapsed) + current * period
end

-- The smallest e in [0, W) with decaying x (W - e) <= room x W, or nil.
local function first_fit(decaying, room)
  if room < 0 then
    return nil
  end
  if decaying == 0 then
    return 0
  end
  local e = math.max(0, period - div_floor(room * period, decaying))
  if e < period then
    return e
  end
  return nil
end

local function until_empty(current)
  if current > 0 then
    return s + 2 * period - now
  elseif p > 0 then
    return s + period - now
  end
  return 0
end

local admitted = weighted(p, c + cost) <= limit * period
if not admitted then
  local retry = period
  if cost <= limit then
    local e = first_fit(p, limit - c - cost)
    if e then
      retry = s + e - now
    else
      retry = s + period + (first_fit(c, limit - cost) or period) - now
    end
  end
  local remaining = div_floor(math.max(0, limit * period - weighted(p, c)), period)
  return reply(false, remaining, until_empty(c), retry)
end
local after = c + cost
if cost > 0 then
  redis.call('HSET', key, 's', fmt(s), 'p', fmt(p), 'c', fmt(after))
  expire_after(key, s + 2 * period - now)
end
local remaining = div_floor(math.max(0, limit * period - weighted(p, after)), period)
return reply(true, remaining, until_empty(after), 0)
