-- Penalties (crates/sluice-core/src/modifier/penalty/mod.rs, whose rules this copies): a client its limit keeps denying is
-- blocked, for longer at each repeat offence. Appended after the algorithms, before the driver.
--
-- Record: one string under the key of the penalty's part (crates/sluice-store/src/key.rs, `kept_key`), with a TTL to
-- when the client is forgotten: "<offences> <last_block_ms> <blocked_until_us>
-- <remembered_until_us> <strike_us>...", the strikes since the last offence, oldest first.

-- This modifier's place among the modifiers with a script.
local PENALTY = #modifiers + 1

-- The hit's penalty, from its argument (common.lua, ARGV[+12...]); nil without one.
local function penalty_of(arg, KEYS)
  local n = modifier_numbers(arg)
  if not n then
    return nil
  end
  return {key = KEYS[n[1]], after = n[2], within = n[3], block = n[4], factor = n[5],
    max = n[6], forget = n[7]}
end

-- The record under `key` as it reads at `now`: nil once forgotten (or never written).
local function penalty_read(key, now)
  local value = redis.call('GET', key)
  if not value then
    return nil
  end
  local n = numbers_of(value)
  local record = {offences = n[1], last = n[2], blocked = n[3], remembered = n[4], strikes = {}}
  for i = 5, #n do
    record.strikes[#record.strikes + 1] = n[i]
  end
  if record.remembered <= now then
    return nil
  end
  return record
end

local function penalty_write(key, record, now)
  local parts = {fmt(record.offences), fmt(record.last), fmt(record.blocked), fmt(record.remembered)}
  for _, at in ipairs(record.strikes) do
    parts[#parts + 1] = fmt(at)
  end
  redis.call('SET', key, table.concat(parts, ' '), 'PX', ttl_ms(record.remembered - now))
end

-- The denial of a block: nothing remains, a retry waits for its end.
local function penalty_denial(record, now, imposed, remaining)
  local wait = record.blocked - now
  return noted(decision(false, remaining, wait, wait), PENALTY,
    {record.blocked, record.offences, imposed and 1 or 0})
end

-- A strike is a denial, unless the hit was charged while something remained (a report
-- landing in debt).
local function penalty_strikes(d, changed)
  return d[1] == 0 and not (changed ~= nil and d[2] > 0)
end

-- The record after a strike at `now` (`record` as read: nil when forgotten), and whether it
-- imposed a block.
local function penalty_strike(p, record, now)
  local next = {offences = 0, last = 0, blocked = 0, remembered = 0, strikes = {}}
  if record then
    next.offences, next.last, next.blocked = record.offences, record.last, record.blocked
    for _, at in ipairs(record.strikes) do
      if now - at < p.within then
        next.strikes[#next.strikes + 1] = at
      end
    end
  end
  next.strikes[#next.strikes + 1] = now
  if #next.strikes >= p.after then
    next.offences = next.offences + 1
    local block = p.block
    if next.offences > 1 then
      block = math.min(div_floor(next.last * p.factor, 1000), p.max)
    end
    next.last = block
    next.blocked = now + block * 1000
    next.remembered = next.blocked + p.forget
    next.strikes = {}
    return next, true
  end
  while #next.strikes > p.after - 1 do
    table.remove(next.strikes, 1)
  end
  if next.offences > 0 then
    next.remembered = now + p.forget
  else
    next.remembered = now + p.within
  end
  return next, false
end

-- Decides `hit` around the limit's decision (`inner`): blocked, or the limit's decision with
-- a strike counted when it is one (the record left to be written whatever the request's
-- fate). A release of leases is never blocked.
local function penalty_around(hit, p, ctx, inner)
  if hit.releases then
    return inner()
  end
  local record = ctx.kept(p.key, penalty_read)
  if record and record.remembered <= hit.now then
    record = nil
  end
  if record and record.blocked > hit.now then
    return penalty_denial(record, hit.now, false, 0), nil
  end
  local d, changed = inner()
  if penalty_strikes(d, changed) then
    local next, imposed = penalty_strike(p, record, hit.now)
    ctx.leave(p.key, next, penalty_write, true)
    if imposed then
      d = penalty_denial(next, hit.now, true, d[2])
    end
  end
  return d, changed
end

modifiers[PENALTY] = {name = 'penalty', parse = penalty_of, around = penalty_around}
