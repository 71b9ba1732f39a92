-- token_bucket: `capacity` tokens refilled continuously at L per W (src/algorithm/token_bucket.rs).
-- KEYS[1]: CACHE_KEY_PREFIX .. token_bucket_domain_key_value_..., a hash:
--          t = tokens x W (scaled so the refill, L per microsecond, is an integer), u = time (µs).
-- ARGV, reply: see common.lua. A missing key is a full bucket; it expires when full again.

if limit == 0 then
  return blocked()
end
local full = capacity * period
local tokens = full
local stored = redis.call('HMGET', key, 't', 'u')
if stored[1] then
  tokens = math.min(full, tonumber(stored[1]) + limit * math.max(0, now - tonumber(stored[2])))
end
local needed = cost * period
if needed > tokens then
  local retry = period
  if needed <= full then
    retry = div_ceil(needed - tokens, limit)
  end
  return reply(false, div_floor(tokens, period), div_ceil(full - tokens, limit), retry)
end
local after = tokens - needed
local reset_after = div_ceil(full - after, limit)
if cost > 0 then
  redis.call('HSET', key, 't', fmt(after), 'u', fmt(now))
  expire_after(key, reset_after)
end
return reply(true, div_floor(after, period), reset_after, 0)
