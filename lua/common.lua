-- Shared helpers, prepended by sluice to the algorithm scripts and the request driver
-- (crates/sluice-store/src/redis/scripts.rs), which together make one script: one call decides every hit of
-- a request (on a Cluster, every hit of one slot).
--
-- The call takes:
--   KEYS[i]  the key of hit i; after the hits' keys, those of their modifiers' parts
--   ARGV[1]  the mode: "all" (a request is charged only if no hit vetoes it), "every" (every
--            hit is charged, denied or not: envoyproxy/ratelimit's counting; a lease only by
--            a request that is not vetoed), "any" (every admitted hit is charged: one Cluster
--            slot's share of a request, sluice settles the rest), "every_part" ("every" for
--            one slot's share: a lease's acquire as "any"), or "refund" (the hits were
--            charged by an "any" or "every_part" call and are taken back), or "credit" (each
--            hit's state is given its cost back now: the admin API's credit), or "read" (each
--            hit's state read, nothing written: the admin API's read)
-- then, for each hit i in turn, 12 common arguments, the modifiers' (one each), then the
-- algorithm's own (as many as the
-- names its script lists in `params`, in that order: warm_up's warmup_us and cold_factor),
-- read into the hit's fields of those names (crates/sluice-store/src/redis/args.rs builds them, in this
-- order):
--   ARGV[+0]  algorithm  its name, as in YAML (a script of lua/ registers it)
--   ARGV[+1]  requests_per_unit  L
--   ARGV[+2]  period_us  W, the period in microseconds (unit x unit_multiplier)
--   ARGV[+3]  cost  h, the cost of this hit (0 only reads)
--   ARGV[+4]  capacity  the bucket capacity (burst) for the bucket algorithms; L for the others
--   ARGV[+5]  now_us  now in microseconds, or "" to read Redis TIME (one clock for every
--                     replica); for "refund", the time the charge was decided at
--   ARGV[+6]  nonce  a value unique to this hit (sliding_window_log members), or ""
--   ARGV[+7]  role  "enforced" (a denial denies the request), "shadow" (never denies),
--                   "quota" (denies only when every quota hit of the request is denied) or
--                   "passing_quota" (a quota hit that always counts as passing)
--   ARGV[+8]  debt  "1" when the limit takes debt (a hit that does not fit is charged), else "0"
--   ARGV[+9]  group  the hits of one descriptor (its several limits) share a group, and are
--                    charged together or not at all
--   ARGV[+10]  lease  on a lease limit: "+<token>" acquires leases, "-<token>" releases
--                     what the token holds (always charged, never denying); a modifier
--                     may read it too (a token's hold opened or settled); else ""
--   ARGV[+11]  headroom  what the hit must leave unused of the capacity (a modifier's share
--                        kept for other traffic: crates/sluice-core/src/modifier/): it is
--                        admitted only if a hit of cost + headroom would be, and told what
--                        remains above it; 0 for most
--   ARGV[+12...]  one argument per modifier with a script, in the order they register (the
--                 registry's, crates/sluice-core/src/modifier/mod.rs): the positions in KEYS
--                 of the keys of its parts (0 for a part the hit does not read), then its own
--                 numbers, space-separated; "" when the limit has no such modifier
-- and replies, for each hit, admitted (1 or 0), remaining, reset_after_us, retry_after_us,
-- released, expired, then the modifier that noted the decision (its place among the
-- modifiers, from 1; 0: none) and the 5 numbers it noted (the fields of sluice's Decision,
-- which crates/sluice-core/src/algorithm/ specifies), and, for "any", "every_part", "refund"
-- and "credit", the time it was decided at; for "read", what the state holds against the
-- limit (`used`, past the capacity included) and what the limit's modifiers hold of it
-- (`held`: what they set aside), then that time.
--
-- A modifier's script registers {name, parse(arg, KEYS), around(hit, own, ctx, inner)} in
-- `modifiers`, and where it needs them refund(hit, own) (true: it took the charge back
-- itself) and held(hit, own): parse reads its argument (nil: the hit has none); around
-- decides the hit around `inner()` (the limit's decision, with the modifiers after it), with
-- ctx.state (the limit's state), ctx.decide_as(hit, cost, charges, state),
-- ctx.kept(key, read) (a key's state as the call left it so far, else `read(key, now)`) and
-- ctx.leave(key, value, write, always) (a state to write with `write(key, value, now)`:
-- always, or only as the limit's charge stands).
--
-- An algorithm script registers {read, decide, force, write, refund} under its name:
--   read(hit) the key's state at hit.now (never nil); decide(hit, state) the decision and the state after
--   the hit (nil when unchanged); force(hit, state) the state after a hit that does not fit
--   (debt); write(hit, state) stores a state that decide or force returned; refund(hit)
--   takes back a charge of hit.cost decided at hit.now; and, where the algorithm takes
--   credit, credit(hit, state) the state with hit.cost given back; where a state can hold
--   more than the capacity (debt, a settle), used(hit, state) what it holds against the limit
--   in requests (else the driver takes the capacity less what a hit of cost 0 has left).
--
-- Lua numbers are doubles: every value stays an integer below 2^53, where doubles are exact
-- (e.g. L x W below 2^53: 100,000 per day, 1,000,000 per hour). Numbers sent back to Redis
-- are formatted with %d, never tostring (which would write 1e+15).

local algorithms = {}
-- The modifiers with a script, in registry order.
local modifiers = {}
-- The names of each algorithm's own arguments, by algorithm (none when absent).
local params = {}

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

-- The sum of `field` over the items of `list` (a key's leases, a budget's holds).
local function sum_of(list, field)
  local total = 0
  for _, item in ipairs(list) do
    total = total + item[field]
  end
  return total
end

-- `us` microseconds as a TTL in milliseconds: rounded up, plus one (a double's rounding can
-- only add a millisecond here, which a TTL can spare).
local function ttl_ms(us)
  return fmt(math.ceil(us / 1000) + 1)
end

-- Keeps `key` for `us` microseconds more.
local function expire_after(key, us)
  redis.call('PEXPIRE', key, ttl_ms(us))
end

-- A decision as the script replies it: admitted (1 or 0), remaining, reset_after_us,
-- retry_after_us, released and expired (a lease limit's leases; 0 when not given),
-- then the modifier that noted it and its 5 numbers (0 here: `noted` sets them); negative
-- values are 0.
local function decision(admitted, remaining, reset_after_us, retry_after_us, released, expired)
  if remaining < 0 then
    remaining = 0
  end
  if reset_after_us < 0 then
    reset_after_us = 0
  end
  if retry_after_us < 0 then
    retry_after_us = 0
  end
  return {admitted and 1 or 0, remaining, reset_after_us, retry_after_us, released or 0, expired or 0, 0, 0, 0,
    0, 0, 0}
end

-- The fields of a decision in a reply.
local DECISION_FIELDS = 12

-- Notes on `d` what modifier `index` did (`values`: up to 5 numbers); returns `d`.
local function noted(d, index, values)
  d[7] = index
  for i = 1, 5 do
    d[7 + i] = values[i] or 0
  end
  return d
end

-- The whole numbers of `text`, in order.
local function numbers_of(text)
  local n = {}
  for field in string.gmatch(text, '%d+') do
    n[#n + 1] = tonumber(field)
  end
  return n
end

-- A modifier's argument (its first part's position in KEYS first) as numbers; nil when the
-- hit has none, or does not read its first part.
local function modifier_numbers(arg)
  if arg == '' then
    return nil
  end
  local n = numbers_of(arg)
  if n[1] == 0 then
    return nil
  end
  return n
end

-- requests_per_unit 0 blocks everything, whatever the burst (crates/sluice-core/src/algorithm/mod.rs).
local function blocked(hit)
  if hit.cost == 0 then
    return decision(true, 0, 0, 0)
  end
  return decision(false, 0, 0, hit.period)
end
