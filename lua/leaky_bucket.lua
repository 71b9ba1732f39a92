-- leaky_bucket: GCRA (src/algorithm/leaky_bucket.rs). The bucket drains one request every
-- T = W / L; a hit fits when the bucket's level plus h x T stays within capacity x T.
-- KEYS[1]: CACHE_KEY_PREFIX .. leaky_bucket_domain_key_value_..., a hash holding the time the
--          bucket is empty again, in units of 1/L µs, as a = whole µs and r = remainder (0..L-1),
--          so that only differences from now are ever multiplied by L.
-- ARGV, reply: see common.lua. A missing key is an empty bucket; it expires when empty again.

if limit == 0 then
  return blocked()
end
local tolerance = capacity * period
local level = 0
local stored = redis.call('HMGET', key, 'a', 'r')
if stored[1] then
  level = math.max(0, (tonumber(stored[1]) - now) * limit + tonumber(stored[2]))
end
local after_hit = level + cost * period
if after_hit > tolerance then
  local retry = period
  if cost * period <= tolerance then
    retry = div_ceil(after_hit - tolerance, limit)
  end
  return reply(false, div_floor(math.max(0, tolerance - level), period), div_ceil(level, limit), retry)
end
local reset_after = div_ceil(after_hit, limit)
if cost > 0 then
  local whole = div_floor(after_hit, limit)
  redis.call('HSET', key, 'a', fmt(now + whole), 'r', fmt(after_hit - whole * limit))
  expire_after(key, reset_after)
end
return reply(true, div_floor(tolerance - after_hit, period), reset_after, 0)
