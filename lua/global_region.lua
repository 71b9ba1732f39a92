-- A global limit's window in one region (docs/regions.md): what the region was granted by
-- home (`t`) and admitted alone past its grants (`a`), which every replica of the region
-- admits up to. A replica that heard home writes what it heard; each only rises, so a slower
-- reply never lowers what a faster one wrote.
--
-- KEYS[1]  the window's hash in the region
-- ARGV[1]  granted   as home replied
-- ARGV[2]  alone     as home replied
-- ARGV[3]  ttl_ms    how long the hash lives: past the window's end
--
-- Replies {granted, alone} as the hash holds them now.

local key = KEYS[1]
local granted = math.max(tonumber(redis.call('HGET', key, 't') or '0'), tonumber(ARGV[1]))
local alone = math.max(tonumber(redis.call('HGET', key, 'a') or '0'), tonumber(ARGV[2]))
redis.call('HSET', key, 't', granted, 'a', alone)
redis.call('PEXPIRE', key, ARGV[3])
return {granted, alone}
