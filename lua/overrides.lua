-- Tenant overrides on Redis (crates/sluice-store/src/redis/admin.rs, docs/admin.md): each
-- override is a record (its id, its JSON) in one hash, and each change is appended to a
-- stream that every replica reads from where it left off, so a change reaches them all without
-- a reload and without a read per request. Both keys share one Cluster slot ({...} tag).
--
-- KEYS[1]  the hash of records (id -> JSON)
-- KEYS[2]  the stream of changes, one entry per put or delete: field `id`
-- ARGV[1]  the operation:
--   "put", id, JSON    sets the record; replies its previous JSON (nil: there was none)
--   "delete", id       removes it; replies its previous JSON (nil: there was none, and
--                      nothing is appended)
-- Replicas read the stream with XRANGE and the records with HMGET (no script: the poll is
-- plain reads).

-- How many changes the stream keeps (about): a replica further behind loads every record.
local KEPT_CHANGES = 100000

local records, changes = KEYS[1], KEYS[2]
local operation = ARGV[1]

local function appended(id)
  redis.call('XADD', changes, 'MAXLEN', '~', KEPT_CHANGES, '*', 'id', id)
end

if operation == 'put' then
  local before = redis.call('HGET', records, ARGV[2])
  redis.call('HSET', records, ARGV[2], ARGV[3])
  appended(ARGV[2])
  return before
end

if operation == 'delete' then
  local before = redis.call('HGET', records, ARGV[2])
  if before then
    redis.call('HDEL', records, ARGV[2])
    appended(ARGV[2])
  end
  return before
end

return redis.error_reply('unknown overrides operation: ' .. tostring(operation))
