-- sliding_window_counter: counts of the current and previous aligned windows; the previous one
-- weighs what the sliding window still covers of it (src/algorithm/sliding_window_counter.rs).
-- Key: CACHE_KEY_PREFIX .. sliding_window_counter_domain_key_value_..., a hash:
--      s = current window start (µs), p = previous count, c = current count.
-- Admits when p x (W - elapsed) + (c + h) x W <= L x W.

-- The counts as of the window holding hit.now.
local function rolled(hit, stored)
  local start = hit.now - hit.now % hit.period
  if stored and (stored.s == start or stored.s > start) then
    -- The current window, or one ahead of the clock (it went back): kept as it is.
    return {s = stored.s, p = stored.p, c = stored.c}
  elseif stored and stored.s + hit.period == start then
    return {s = start, p = stored.c, c = 0}
  end
  return {s = start, p = 0, c = 0}
end

algorithms.sliding_window_counter = {
  read = function(hit)
    local stored = redis.call('HMGET', hit.key, 's', 'p', 'c')
    if stored[1] then
      return {s = tonumber(stored[1]), p = tonumber(stored[2]), c = tonumber(stored[3])}
    end
    return nil
  end,
  decide = function(hit, stored)
    local limit, period, cost, now = hit.limit, hit.period, hit.cost, hit.now
    local counts = rolled(hit, stored)
    local s, p, c = counts.s, counts.p, counts.c
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

    if weighted(p, c + cost) > limit * period then
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
      return decision(false, remaining, until_empty(c), retry), nil
    end
    local after = c + cost
    local remaining = div_floor(math.max(0, limit * period - weighted(p, after)), period)
    local changed = nil
    if cost > 0 then
      changed = {s = s, p = p, c = after}
    end
    return decision(true, remaining, until_empty(after), 0), changed
  end,
  write = function(hit, counts)
    redis.call('HSET', hit.key, 's', fmt(counts.s), 'p', fmt(counts.p), 'c', fmt(counts.c))
    expire_after(hit.key, counts.s + 2 * hit.period - hit.now)
  end,
  refund = function(hit)
    local stored = algorithms.sliding_window_counter.read(hit)
    if not stored then
      return
    end
    local start = hit.now - hit.now % hit.period
    if stored.s == start then
      redis.call('HSET', hit.key, 'c', fmt(math.max(0, stored.c - hit.cost)))
    elseif stored.s == start + hit.period then
      redis.call('HSET', hit.key, 'p', fmt(math.max(0, stored.p - hit.cost)))
    end
  end,
}
