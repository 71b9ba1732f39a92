-- fixed_window: a counter per window [kW, (k+1)W) aligned to the epoch (crates/sluice-core/src/algorithm/fixed_window.rs).
-- Key: CACHE_KEY_PREFIX .. domain_key_value_..._<window start in seconds>, byte-identical to
--      envoyproxy/ratelimit's key, holding the same integer counter. The window is in the key,
--      so sluice computes it: now is always given.
--      A limit that takes debt carries its excess into the next windows, so its key cannot
--      name one window: CACHE_KEY_PREFIX .. fixed_window_<L>per<W in s>s_domain_key_value_..., a hash
--      s = window start (µs), c = count.
-- State: {s, c} as of the window holding hit.now. Admits when c + h <= L. Charged by the
--        reference's counting ("every"), c exceeds L within its window (its key) only.
-- A calendar window (a billing period in a time zone) is drawn by sluice and handed over as
-- window_start and window_end, in µs (both 0 for the epoch's windows); such a limit takes no
-- debt, so its key names its window and its count never carries.
-- Windows from each counter's first hit (first_hit = 1, Limitador's) are their state's: the key
-- names neither window nor time, CACHE_KEY_PREFIX .. fixed_window_<L>per<W in s>s_first_domain_key_value_...,
-- a hash as in debt (s = the first hit's time, c = count), read as empty from s + W on; such a
-- limit takes no debt.

params.fixed_window = { 'window_start', 'window_end', 'first_hit' }

-- Made once per call that uses it (the driver asks `algorithm(name)`): a script's top level
-- runs on every call, so what it defines there costs every call.
algorithms.fixed_window = function()
  local function start_of(hit)
    if hit.window_end > 0 then
      return hit.window_start
    end
    return hit.now - hit.now % hit.period
  end

  -- Time from now to the start of the `windows`-th window after the one starting at `s`; the
  -- first is the calendar's end when there is one (only the epoch's windows take debt).
  local function until_window(hit, s, windows)
    if windows <= 1 and hit.window_end > 0 then
      return hit.window_end - hit.now
    end
    return s + windows * hit.period - hit.now
  end

  -- Windows (1: the next) until `count` has drained at L per window; at least one. Without
  -- debt nothing carries (the reference's counting leaves its excess in its window's key).
  local function windows_to_drain(hit, count)
    if count <= hit.limit or hit.limit == 0 or not hit.debt then
      return 1
    end
    return div_ceil(count, hit.limit)
  end

  return {
    blocks_zero_itself = true,
    -- Without debt the count is its window's (the key names it): past L it is forgotten
    -- when the window ends, so a limit of 0 takes the reference's charges too.
    excess_ends_with_window = true,
    -- Without debt the state is the key's value: the driver may read the values of several
    -- hits with one MGET and hand each to `read` (false for a key that does not exist).
    plain = function(hit)
      return not hit.debt and hit.first_hit == 0
    end,
    read = function(hit, value)
      if hit.first_hit == 1 then
        local stored = redis.call('HMGET', hit.key, 's', 'c')
        local s = tonumber(stored[1] or '0')
        if not stored[1] or s + hit.period <= hit.now then
          -- No window, or it has ended: the next charge opens one now.
          return {s = hit.now, c = 0}
        end
        return {s = s, c = tonumber(stored[2])}
      end
      local start = start_of(hit)
      if not hit.debt then
        if value == nil then
          value = redis.call('GET', hit.key)
        end
        local count = tonumber(value or '0')
        -- `stored`: the count the key holds, so that `write` adds to it (INCRBY costs Redis
        -- a third of what SET with an expiry does) and sets the expiry only on a new key.
        return {s = start, c = count, stored = count}
      end
      local stored = redis.call('HMGET', hit.key, 's', 'c')
      if not stored[1] then
        return {s = start, c = 0}
      end
      local s, c = tonumber(stored[1]), tonumber(stored[2])
      if s >= start then
        -- The current window, or one ahead of the clock (it went back): never admit more.
        return {s = s, c = c}
      end
      local passed = div_floor(start - s, hit.period)
      return {s = start, c = math.max(0, c - hit.limit * passed)}
    end,
    decide = function(hit, window)
      local after = window.c
      local admitted = window.c + hit.cost <= hit.limit
      if admitted then
        after = window.c + hit.cost
      end
      local reset = until_window(hit, window.s, windows_to_drain(hit, after))
      if not admitted then
        local fits = 1
        if hit.cost <= hit.limit and hit.limit > 0 and hit.debt then
          fits = math.max(1, div_ceil(window.c + hit.cost - hit.limit, hit.limit))
        end
        return decision(false, hit.limit - window.c, reset, until_window(hit, window.s, fits)), nil
      end
      local changed = nil
      if hit.cost > 0 then
        changed = {s = window.s, c = after, stored = window.stored}
      end
      return decision(true, hit.limit - after, reset, 0), changed
    end,
    force = function(hit, window)
      return {s = window.s, c = window.c + hit.cost, stored = window.stored}
    end,
    write = function(hit, window)
      local expires = until_window(hit, window.s, windows_to_drain(hit, window.c))
      if hit.debt or hit.first_hit == 1 then
        redis.call('HSET', hit.key, 's', fmt(window.s), 'c', fmt(window.c))
        expire_after(hit.key, expires)
      elseif window.stored and window.stored > 0 then
        -- The key holds this window's count and expires at its end (the window is in the key).
        redis.call('INCRBY', hit.key, fmt(window.c - window.stored))
      else
        -- The count and its expiry in one command.
        redis.call('SET', hit.key, fmt(window.c), 'PX', ttl_ms(expires))
      end
    end,
    -- What the window holds against the limit: its count, past L in debt or after a settle.
    used = function(hit, window)
      return window.c
    end,
    -- A credit of hit.cost: the window's count down by it, never below 0.
    credit = function(hit, window)
      return {s = window.s, c = math.max(0, window.c - hit.cost), stored = window.stored}
    end,
    refund = function(hit)
      if hit.debt or hit.first_hit == 1 then
        -- The hash's count, down by the cost, never below 0.
        local c = redis.call('HGET', hit.key, 'c')
        if c then
          redis.call('HSET', hit.key, 'c', fmt(math.max(0, tonumber(c) - hit.cost)))
        end
      elseif redis.call('EXISTS', hit.key) == 1 then
        local left = redis.call('DECRBY', hit.key, fmt(hit.cost))
        if left < 0 then
          redis.call('INCRBY', hit.key, fmt(-left))
        end
      end
    end,
  }
end
