-- leaky_bucket: GCRA (crates/sluice-core/src/algorithm/leaky_bucket.rs). The bucket drains one request every
-- T = W / L; a hit fits when the bucket's level plus h x T stays within capacity x T.
-- Key: CACHE_KEY_PREFIX .. leaky_bucket_<L>per<W in s>s_b<burst>_domain_key_value_..., a hash holding the time the
--      bucket is empty again, in units of 1/L µs, as a = whole µs and r = remainder (0..L-1),
--      so that only differences from now are ever multiplied by L.
-- A missing key is an empty bucket; it expires when empty again. State: the level at hit.now
-- (in units of 1/L µs).

-- Made once per call that uses it (the driver asks `algorithm(name)`): a script's top level
-- runs on every call, so what it defines there costs every call.
algorithms.leaky_bucket = function()
  return {
    read = function(hit)
      local stored = redis.call('HMGET', hit.key, 'a', 'r')
      if stored[1] then
        return math.max(0, (tonumber(stored[1]) - hit.now) * hit.limit + tonumber(stored[2]))
      end
      return 0
    end,
    decide = function(hit, level)
      local limit, period, cost = hit.limit, hit.period, hit.cost
      local tolerance = hit.capacity * period
      local after_hit = level + cost * period
      if after_hit > tolerance then
        local retry = period
        if cost * period <= tolerance then
          retry = div_ceil(after_hit - tolerance, limit)
        end
        return decision(false, div_floor(math.max(0, tolerance - level), period), div_ceil(level, limit), retry), nil
      end
      local changed = nil
      if cost > 0 then
        changed = after_hit
      end
      return decision(true, div_floor(tolerance - after_hit, period), div_ceil(after_hit, limit), 0), changed
    end,
    force = function(hit, level)
      return level + hit.cost * hit.period
    end,
    write = function(hit, level)
      local whole = div_floor(level, hit.limit)
      redis.call('HSET', hit.key, 'a', fmt(hit.now + whole), 'r', fmt(level - whole * hit.limit))
      expire_after(hit.key, div_ceil(level, hit.limit))
    end,
    -- The bucket's level in requests, rounded up: past the capacity in debt.
    used = function(hit, level)
      return div_ceil(level, hit.period)
    end,
    -- A credit of hit.cost: the level down by it, never below empty.
    credit = function(hit, level)
      return math.max(0, level - hit.cost * hit.period)
    end,
    refund = function(hit)
      local stored = redis.call('HMGET', hit.key, 'a', 'r')
      if stored[1] then
        -- The empty-at time, less cost x T; a bucket that empties before now is empty.
        local a, r = tonumber(stored[1]), tonumber(stored[2]) - hit.cost * hit.period
        local whole = div_floor(math.max(0, -r) + hit.limit - 1, hit.limit)
        a, r = a - whole, r + whole * hit.limit
        redis.call('HSET', hit.key, 'a', fmt(a), 'r', fmt(r))
      end
    end,
  }
end
