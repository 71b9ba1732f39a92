-- A global limit's window at home (docs/regions.md): one hash per limit key and window, a
-- field `t:<region>` for what each region was granted and `a:<region>` for what it admitted
-- past its grants while cut off from home. Every region's call reports and asks at once:
--
-- KEYS[1]  the window's hash
-- ARGV[1]  region    the region's name
-- ARGV[2]  known     what the region knows it was granted (a grant whose reply was lost is
--                    more than that: it counts as given, and is not granted twice)
-- ARGV[3]  count     what the region has admitted in the window, as its own Redis counts
-- ARGV[4]  want      how much more the region asks for
-- ARGV[5]  limit     the limit of the window
-- ARGV[6]  ttl_ms    how long the hash lives: past the window's end
--
-- Replies {granted, alone, used}: what the region was granted in all, what it admitted alone
-- (the most it ever admitted past its grants, so a report sent twice adds nothing), and what
-- every region together was granted or admitted alone. A region is granted only from what
-- remains of the limit after that.

local key, region = KEYS[1], ARGV[1]
local known, count = tonumber(ARGV[2]), tonumber(ARGV[3])
local want, limit = tonumber(ARGV[4]), tonumber(ARGV[5])
local granted_field, alone_field = 't:' .. region, 'a:' .. region
local granted = tonumber(redis.call('HGET', key, granted_field) or '0')
local alone = tonumber(redis.call('HGET', key, alone_field) or '0')
if count - granted > alone then
  alone = count - granted
  redis.call('HSET', key, alone_field, alone)
end
-- A grant the region never heard of is what it asks for again.
want = want - math.max(0, granted - known)
local used = 0
local fields = redis.call('HGETALL', key)
for i = 2, #fields, 2 do
  used = used + tonumber(fields[i])
end
local grant = math.max(0, math.min(want, limit - used))
if grant > 0 then
  granted = granted + grant
  used = used + grant
  redis.call('HSET', key, granted_field, granted)
end
redis.call('PEXPIRE', key, ARGV[6])
return {granted, alone, used}
