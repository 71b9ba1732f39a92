-- The plain counter: one call of one hit whose limit's whole state is one count in a key that
-- names its window (a fixed window without debt, without modifiers that keep state or leave
-- headroom), alone in its request. Most calls are such a call, and the driver's general path
-- (parsing 14 arguments, tables per hit, the modifiers' walk) costs Redis twice what the
-- count does; this call reads and charges the count and nothing else. sluice decides on the
-- count it replies, as the memory store decides on its own (crates/sluice-core/src/engine.rs,
-- `decide_hit`), and the store contract test holds both to the same answers.
--
-- The call takes KEYS[1], the window's key (byte-identical to envoyproxy/ratelimit's), and
--   ARGV[1]  cost  h (0 only reads)
--   ARGV[2]  requests_per_unit  L
--   ARGV[3]  ttl_ms  the key's time to live when the call makes it: to the window's end
--   ARGV[4]  every  "1" when a hit that does not fit is charged all the same (the
--                   reference's counting), else "0"
-- and replies {count}, what the key held before the hit. A hit is charged when it fits
-- (count + h <= L) or with "every"; a key the call makes expires at its window's end.

local function counter(KEYS, ARGV)
  local key, cost = KEYS[1], tonumber(ARGV[1])
  if cost > 0 and ARGV[4] == '1' then
    local after = redis.call('INCRBY', key, ARGV[1])
    if after == cost then
      redis.call('PEXPIRE', key, ARGV[3])
    end
    return {after - cost}
  end
  local count = tonumber(redis.call('GET', key) or '0')
  if cost > 0 and count + cost <= tonumber(ARGV[2]) then
    if count == 0 then
      redis.call('SET', key, ARGV[1], 'PX', ARGV[3])
    else
      redis.call('INCRBY', key, ARGV[1])
    end
  end
  return {count}
end
