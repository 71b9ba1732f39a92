-- fixed_window: a counter per window [kW, (k+1)W) aligned to the epoch (src/algorithm/fixed_window.rs).
-- Key: CACHE_KEY_PREFIX .. domain_key_value_..._<window start in seconds>, byte-identical to
--      envoyproxy/ratelimit's key, holding the same integer counter. The window is in the key,
--      so sluice computes it: now is always given. State: the count.
-- Admits when count + h <= L; requests_per_unit 0 is this rule too (the window's end resets).

algorithms.fixed_window = {
  blocks_zero_itself = true,
  read = function(hit)
    return tonumber(redis.call('GET', hit.key) or '0')
  end,
  decide = function(hit, count)
    local start = hit.now - hit.now % hit.period
    local until_next_window = start + hit.period - hit.now
    if count + hit.cost > hit.limit then
      return decision(false, hit.limit - count, until_next_window, until_next_window), nil
    end
    local after = count + hit.cost
    local changed = nil
    if hit.cost > 0 then
      changed = after
    end
    return decision(true, hit.limit - after, until_next_window, 0), changed
  end,
  write = function(hit, count)
    local start = hit.now - hit.now % hit.period
    redis.call('SET', hit.key, fmt(count))
    expire_after(hit.key, start + hit.period - hit.now)
  end,
  refund = function(hit)
    if redis.call('EXISTS', hit.key) == 1 then
      local left = redis.call('DECRBY', hit.key, fmt(hit.cost))
      if left < 0 then
        redis.call('INCRBY', hit.key, fmt(-left))
      end
    end
  end,
}
