-- Shared helpers, prepended by sluice to every algorithm script below (src/store/redis/scripts.rs).
--
-- Every algorithm script takes (src/store/redis/args.rs builds them, in this order):
--   KEYS[1]  the one key it reads and writes
--   ARGV[1]  requests_per_unit  L
--   ARGV[2]  period_us  W, the period in microseconds (unit x unit_multiplier)
--   ARGV[3]  cost  h, the cost of this hit (0 only reads)
--   ARGV[4]  capacity  the bucket capacity (burst) for the bucket algorithms; L for the others
--   ARGV[5]  now_us  now in microseconds, or "" to read Redis TIME (one clock for every replica)
--   ARGV[6]  nonce  a value unique to this hit (sliding_window_log members), or ""
-- and replies {admitted (1 or 0), remaining, reset_after_us, retry_after_us}: the fields of
-- sluice's Decision, which src/algorithm/ specifies.
--
-- Lua numbers are doubles: every value stays an integer below 2^53, where doubles are exact
-- (e.g. L x W below 2^53: 100,000 per day, 1,000,000 per hour). Numbers sent back to Redis
-- are formatted with %d, never tostring (which would write 1e+15).

local function now_us(given)
  local now = tonumber(given)
  if now then
    return now
  end
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- floor(a / b) for integers a >= 0, b > 0, corrected for the rounding of the division.
local function div_floor(a, b)
  local q = math.floor(a / b)
  while q * b > a do
    q = q - 1
  end
  while (q + 1) * b <= a do
    q = q + 1
  end
  return q
end

local function div_ceil(a, b)
  if a <= 0 then
    return 0
  end
  return div_floor(a + b - 1, b)
end

local function fmt(x)
  return string.format('%d', x)
end

-- Keeps `key` for `us` microseconds more (rounded up to milliseconds, plus one).
local function expire_after(key, us)
  redis.call('PEXPIRE', key, fmt(div_ceil(us, 1000) + 1))
end

local function reply(admitted, remaining, reset_after_us, retry_after_us)
  return {admitted and 1 or 0, math.max(0, remaining), math.max(0, reset_after_us), math.max(0, retry_after_us)}
end

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local period = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local capacity = tonumber(ARGV[4])
local now = now_us(ARGV[5])

-- requests_per_unit 0 blocks everything, whatever the burst (src/algorithm/mod.rs).
local function blocked()
  if cost == 0 then
    return reply(true, 0, 0, 0)
  end
  return reply(false, 0, 0, period)
end

