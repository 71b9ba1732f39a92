-- sliding_window_counter: counts of the current and previous aligned windows; the previous one
-- weighs what the sliding window still covers of it (crates/sluice-core/src/algorithm/sliding_window_counter.rs).
-- Key: CACHE_KEY_PREFIX .. sliding_window_counter_<L>per<W in s>s_domain_key_value_..., a hash:
--      s = current window start (µs), p = previous count, c = current count.
-- Admits when p x (W - elapsed) + (c + h) x W <= L x W. In debt c exceeds L; each window that
-- passes takes at most L of it as its own and carries the rest.

-- The counts `windows` (>= 1) windows after `counts`.

-- Made once per call that uses it (the driver asks `algorithm(name)`): a script's top level
-- runs on every call, so what it defines there costs every call.
algorithms.sliding_window_counter = function()
  local function passed(hit, counts, windows)
    return {
      s = counts.s + windows * hit.period,
      p = math.min(hit.limit, math.max(0, counts.c - hit.limit * (windows - 1))),
      c = math.max(0, counts.c - hit.limit * windows),
    }
  end

  -- The counts as of the window holding hit.now.
  local function rolled(hit, stored)
    local start = hit.now - hit.now % hit.period
    if not stored then
      return {s = start, p = 0, c = 0}
    end
    if stored.s >= start then
      -- The current window, or one ahead of the clock (it went back): kept as it is.
      return {s = stored.s, p = stored.p, c = stored.c}
    end
    return passed(hit, stored, div_floor(start - stored.s, hit.period))
  end

  -- Windows after `counts`' until the estimate is 0.
  local function windows_to_empty(hit, counts)
    if counts.c > 0 then
      return div_ceil(counts.c, math.max(1, hit.limit)) + 1
    elseif counts.p > 0 then
      return 1
    end
    return 0
  end

  return {
    read = function(hit)
      local stored = redis.call('HMGET', hit.key, 's', 'p', 'c')
      if stored[1] then
        return rolled(hit, {s = tonumber(stored[1]), p = tonumber(stored[2]), c = tonumber(stored[3])})
      end
      return rolled(hit, nil)
    end,
    decide = function(hit, counts)
      local limit, period, cost, now = hit.limit, hit.period, hit.cost, hit.now
      local elapsed = math.max(0, now - counts.s)

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

      local function until_empty(c)
        local windows = windows_to_empty(hit, c)
        if windows == 0 then
          return 0
        end
        return c.s + windows * period - now
      end

      if weighted(counts.p, counts.c + cost) > limit * period then
        local retry = period
        if cost <= limit then
          local e = first_fit(counts.p, limit - counts.c - cost)
          if e then
            retry = counts.s + e - now
          else
            local first = math.max(1, div_ceil(counts.c + cost - limit, math.max(1, limit)))
            for windows = first, first + 2 do
              local later = passed(hit, counts, windows)
              local fit = first_fit(later.p, limit - later.c - cost)
              if fit then
                retry = later.s + fit - now
                break
              end
            end
          end
        end
        local remaining = div_floor(math.max(0, limit * period - weighted(counts.p, counts.c)), period)
        return decision(false, remaining, until_empty(counts), retry), nil
      end
      local after = {s = counts.s, p = counts.p, c = counts.c + cost}
      local remaining = div_floor(math.max(0, limit * period - weighted(after.p, after.c)), period)
      local changed = nil
      if cost > 0 then
        changed = after
      end
      return decision(true, remaining, until_empty(after), 0), changed
    end,
    force = function(hit, counts)
      return {s = counts.s, p = counts.p, c = counts.c + hit.cost}
    end,
    write = function(hit, counts)
      redis.call('HSET', hit.key, 's', fmt(counts.s), 'p', fmt(counts.p), 'c', fmt(counts.c))
      local windows = math.max(2, windows_to_empty(hit, counts))
      expire_after(hit.key, counts.s + windows * hit.period - hit.now)
    end,
    -- The estimate, rounded up: past L in debt.
    used = function(hit, counts)
      local weighted = counts.p * math.max(0, hit.period - math.max(0, hit.now - counts.s)) + counts.c * hit.period
      return div_ceil(weighted, hit.period)
    end,
    -- A credit of hit.cost: the current window's count down by it, never below 0.
    credit = function(hit, counts)
      return {s = counts.s, p = counts.p, c = math.max(0, counts.c - hit.cost)}
    end,
    refund = function(hit)
      local stored = redis.call('HMGET', hit.key, 's', 'p', 'c')
      if not stored[1] then
        return
      end
      local s, p, c = tonumber(stored[1]), tonumber(stored[2]), tonumber(stored[3])
      local start = hit.now - hit.now % hit.period
      if s == start then
        redis.call('HSET', hit.key, 'c', fmt(math.max(0, c - hit.cost)))
      elseif s == start + hit.period then
        redis.call('HSET', hit.key, 'p', fmt(math.max(0, p - hit.cost)))
      end
    end,
  }
end
