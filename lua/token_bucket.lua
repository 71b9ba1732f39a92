-- token_bucket: `capacity` tokens refilled continuously at L per W (crates/sluice-core/src/algorithm/token_bucket.rs).
-- Key: CACHE_KEY_PREFIX .. token_bucket_<L>per<W in s>s_b<burst>_domain_key_value_..., a hash:
--      t = tokens x W (scaled so the refill, L per microsecond, is an integer), u = time (µs).
-- A missing key is a full bucket; it expires when full again. State: the tokens at hit.now,
-- below 0 in debt.

-- Made once per call that uses it (the driver asks `algorithm(name)`): a script's top level
-- runs on every call, so what it defines there costs every call.
algorithms.token_bucket = function()
  return {
    read = function(hit)
      local full = hit.capacity * hit.period
      local stored = redis.call('HMGET', hit.key, 't', 'u')
      if stored[1] then
        local elapsed = math.max(0, hit.now - tonumber(stored[2]))
        return math.min(full, tonumber(stored[1]) + hit.limit * elapsed)
      end
      return full
    end,
    decide = function(hit, tokens)
      local full = hit.capacity * hit.period
      local needed = hit.cost * hit.period
      if needed > tokens then
        local retry = hit.period
        if needed <= full then
          retry = div_ceil(needed - tokens, hit.limit)
        end
        return decision(false, div_floor(tokens, hit.period), div_ceil(full - tokens, hit.limit), retry), nil
      end
      local after = tokens - needed
      local changed = nil
      if hit.cost > 0 then
        changed = after
      end
      return decision(true, div_floor(after, hit.period), div_ceil(full - after, hit.limit), 0), changed
    end,
    force = function(hit, tokens)
      return tokens - hit.cost * hit.period
    end,
    write = function(hit, tokens)
      redis.call('HSET', hit.key, 't', fmt(tokens), 'u', fmt(hit.now))
      expire_after(hit.key, div_ceil(hit.capacity * hit.period - tokens, hit.limit))
    end,
    -- What the bucket lacks of full, in requests rounded up: past the capacity in debt.
    used = function(hit, tokens)
      return div_ceil(hit.capacity * hit.period - tokens, hit.period)
    end,
    -- A credit of hit.cost: the tokens up by it, never past full.
    credit = function(hit, tokens)
      return math.min(hit.capacity * hit.period, tokens + hit.cost * hit.period)
    end,
    refund = function(hit)
      local stored = redis.call('HMGET', hit.key, 't', 'u')
      if stored[1] then
        local full = hit.capacity * hit.period
        local tokens = math.min(full, tonumber(stored[1]) + hit.cost * hit.period)
        redis.call('HSET', hit.key, 't', fmt(tokens))
      end
    end,
  }
end
