-- sliding_window_log: one sorted-set member per admitted unit of cost, scored by its time
-- (src/algorithm/sliding_window_log.rs). Members are `<nonce>:<i>`: the nonce is unique per hit.
-- KEYS[1]: CACHE_KEY_PREFIX .. sliding_window_log_domain_key_value_...
-- ARGV, reply: see common.lua. An entry stamped ts is in the window iff ts + W > now.

if limit == 0 then
  return blocked()
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - period))
local count = redis.call('ZCARD', key)

local function until_empty()
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #newest == 0 then
    return 0
  end
  return tonumber(newest[2]) + period - now
end

if count + cost > limit then
  local retry = period
  if cost <= limit then
    -- The oldest (count + cost - L) entries must leave first.
    local must_leave = count + cost - limit
    local entry = redis.call('ZRANGE', key, must_leave - 1, must_leave - 1, 'WITHSCORES')
    retry = tonumber(entry[2]) + period - now
  end
  return reply(false, limit - count, until_empty(), retry)
end
if cost > 0 then
  local stamp = fmt(now)
  local members = {}
  for i = 1, cost do
    members[#members + 1] = stamp
    members[#members + 1] = ARGV[6] .. ':' .. fmt(i)
    if #members >= 1000 or i == cost then
      redis.call('ZADD', key, unpack(members))
      members = {}
    end
  end
  expire_after(key, until_empty())
end
return reply(true, limit - count - cost, until_empty(), 0)
