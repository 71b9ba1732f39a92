-- fixed_window: a counter per window [kW, (k+1)W) aligned to the epoch (src/algorithm/fixed_window.rs).
-- KEYS[1]: CACHE_KEY_PREFIX .. domain_key_value_..._<window start in seconds>, byte-identical to
--          envoyproxy/ratelimit's key, holding the same integer counter. The window is in the
--          key, so sluice computes it: ARGV[5] (now) is always given.
-- ARGV, reply: see common.lua. Admits when count + h <= L; a denial and h = 0 write nothing.

local start = now - now % period
local until_next_window = start + period - now
local count = tonumber(redis.call('GET', key) or '0')
if count + cost > limit then
  return reply(false, limit - count, until_next_window, until_next_window)
end
if cost > 0 then
  count = redis.call('INCRBY', key, fmt(cost))
  expire_after(key, until_next_window)
end
return reply(true, limit - count, until_next_window, 0)
