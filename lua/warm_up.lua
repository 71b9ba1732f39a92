-- warm_up: Guava's SmoothWarmingUp (crates/sluice-core/src/algorithm/warm_up.rs). One permit every S = W / L
-- (rounded up to a microsecond) once warm; permits stored while idle are handed out slower,
-- from cold_factor x S at the coldest down to S at the threshold, along the trapezoid that
-- takes the warm-up period (N whole intervals S) to cross. A hit is admitted when the next
-- permit is free, and its permits' time moves that on; more than L permits never fit.
-- Key: CACHE_KEY_PREFIX .. warm_up_<L>per<W in s>s_w<warmup µs>c<cold_factor>_domain_key_value_..., a hash:
--      f = when the next permit is free (µs), s = permits stored as of then, in units of
--      1 / (2 (1 + cold_factor)) permit, d = 1 when f was pushed on by a hit that did not
--      fit (debt: until f, even cost 0 is denied).
-- A missing key is free and fully cold; it expires when it would read so again. State: a
-- table {f, s, d} at hit.now.

-- Made once per call that uses it (the driver asks `algorithm(name)`): a script's top level
-- runs on every call, so what it defines there costs every call.
-- Its own arguments: the warm-up period (µs) and the cold factor.
params.warm_up = { 'warmup', 'cold_factor' }

algorithms.warm_up = function()
  -- ceil(s x n / d) without forming s x n.
  local function scaled_ceil(s, n, d)
    local q = div_floor(n, d)
    return s * q + div_ceil(s * (n - q * d), d)
  end

  -- The integer constants of the hit's warm-up (Shape in warm_up.rs).
  local function shape(hit)
    local stable = math.max(1, div_ceil(hit.period, math.max(1, hit.limit)))
    local cold = math.max(1, hit.cold_factor)
    local n = math.max(1, div_floor(hit.warmup, stable))
    return {
      stable = stable,
      cold = cold,
      n = n,
      unit = 2 * (1 + cold),
      threshold = n * (1 + cold),
      max = n * (cold + 5),
    }
  end

  -- The time the next `units` permits take when `stored` are stored.
  local function time_us(sh, stored, units)
    local above = math.max(0, stored - sh.threshold)
    local taken = math.min(above, units)
    local rest = units - taken
    local a1, a2 = above, above - taken
    local numerator = 8 * sh.n * taken + (sh.cold - 1) * taken * (a1 + a2)
    return scaled_ceil(sh.stable, numerator, 16 * (1 + sh.cold) * sh.n)
      + scaled_ceil(sh.stable, rest, sh.unit)
  end

  local function cold_again(sh, ramp)
    return ramp.f + scaled_ceil(sh.stable, sh.max - math.min(ramp.s, sh.max), sh.cold + 5)
  end

  local function charged(sh, ramp, cost, in_debt)
    local units = cost * sh.unit
    return {f = ramp.f + time_us(sh, ramp.s, units), s = ramp.s - math.min(ramp.s, units), d = in_debt}
  end

  return {
    read = function(hit)
      local sh = shape(hit)
      local stored = redis.call('HMGET', hit.key, 'f', 's', 'd')
      if not stored[1] then
        return {f = hit.now, s = sh.max, d = false}
      end
      local f, s = tonumber(stored[1]), tonumber(stored[2])
      if f < hit.now then
        local idle = math.min(hit.now - f, sh.n * sh.stable)
        return {f = hit.now, s = math.min(sh.max, s + div_floor(idle * (sh.cold + 5), sh.stable)), d = false}
      end
      return {f = f, s = s, d = stored[3] == '1'}
    end,
    decide = function(hit, ramp)
      local sh = shape(hit)
      -- More than a period's worth at the stable rate can never fit.
      local fits = hit.cost <= hit.limit
      -- Cost 0 reads: admitted unless the limit is in debt.
      local admitted = fits and (ramp.f <= hit.now or (hit.cost == 0 and not ramp.d))
      local after = ramp
      local changed = nil
      if admitted and hit.cost > 0 then
        after = charged(sh, ramp, hit.cost, false)
        changed = after
      end
      local remaining = 0
      if after.f <= hit.now then
        remaining = 1
      end
      local retry = 0
      if not fits then
        retry = hit.period
      elseif not admitted then
        retry = ramp.f - hit.now
      end
      return decision(admitted, remaining, cold_again(sh, after) - hit.now, retry), changed
    end,
    force = function(hit, ramp)
      return charged(shape(hit), ramp, hit.cost, true)
    end,
    write = function(hit, ramp)
      local debt = '0'
      if ramp.d then
        debt = '1'
      end
      redis.call('HSET', hit.key, 'f', fmt(ramp.f), 's', fmt(ramp.s), 'd', debt)
      expire_after(hit.key, cold_again(shape(hit), ramp) - hit.now)
    end,
    refund = function(hit)
      local stored = redis.call('HMGET', hit.key, 'f', 's')
      if stored[1] then
        -- The permits back in store, and their time taken off the next free permit.
        local sh = shape(hit)
        local units = hit.cost * sh.unit
        local s = math.min(sh.max, tonumber(stored[2]) + units)
        local f = tonumber(stored[1]) - time_us(sh, s, units)
        redis.call('HSET', hit.key, 'f', fmt(f), 's', fmt(s))
      end
    end,
  }
end
