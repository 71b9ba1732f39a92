-- RLQS budget (crates/sluice-store/src/quota_budget.rs; quota_budget/in_redis.rs calls it): one bucket's claims,
-- a hash of client -> "demand:assigned:expires_at_us", shared by every sluice replica.
-- KEYS[1]  the bucket's budget key
-- ARGV[1]  the client; ARGV[2] "claim" or "release"
-- for "claim": ARGV[3] demand, ARGV[4] limit, ARGV[5] now_us, ARGV[6] expires_at_us
-- Replies {share, clients}: the client's max-min fair share, capped so that the assignments in
-- force never add up to more than the limit, and the clients holding a claim. Integers below
-- 2^53 only, as the Rust budget computes them (the same order: demand, then client).
local key, client = KEYS[1], ARGV[1]
if ARGV[2] == 'release' then
  redis.call('HDEL', key, client)
  return {0, 0}
end
local demand, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local now, expires = tonumber(ARGV[5]), tonumber(ARGV[6])
local claims, own_assigned = {}, 0
local flat = redis.call('HGETALL', key)
for i = 1, #flat, 2 do
  local d, a, e = string.match(flat[i + 1], '^(%d+):(%d+):(%d+)$')
  if flat[i] == client then
    own_assigned = tonumber(a) or 0
  elseif e and tonumber(e) > now then
    claims[#claims + 1] = {flat[i], tonumber(d), tonumber(a)}
  else
    redis.call('HDEL', key, flat[i])
  end
end
claims[#claims + 1] = {client, demand, own_assigned}
table.sort(claims, function(x, y)
  if x[2] ~= y[2] then
    return x[2] < y[2]
  end
  return x[1] < y[1]
end)
local left, n, target, others = limit, #claims, 0, 0
for i, claim in ipairs(claims) do
  local waiting = n - i + 1
  local equal = math.floor(left / waiting)
  local extra = 0
  if left - equal * waiting > 0 and claim[2] > equal then
    extra = 1
  end
  local share = math.min(claim[2], equal + extra)
  left = left - share
  if claim[1] == client then
    target = share
  else
    others = others + claim[3]
  end
end
local share = math.min(target, math.max(0, limit - others))
redis.call('HSET', key, client, string.format('%d:%d:%d', demand, share, expires))
local ttl_ms = math.ceil((expires - now) / 1000) + 1000
if redis.call('PTTL', key) < ttl_ms then
  redis.call('PEXPIRE', key, string.format('%d', ttl_ms))
end
return {share, n}
