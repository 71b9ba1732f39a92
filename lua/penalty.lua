-- Penalties (crates/sluice-core/src/modifier/penalty/mod.rs, whose rules this copies): a client its limit keeps denying is
-- blocked, for longer at each repeat offence. Appended after the algorithms, before the driver.
--
-- Record: one string under the penalty's key (crates/sluice-store/src/key.rs, `penalty_key`), with a TTL to
-- when the client is forgotten: "<offences> <last_block_ms> <blocked_until_us>
-- <remembered_until_us> <strike_us>...", the strikes since the last offence, oldest first.

-- The whole numbers of `text`, in order.
local function numbers_of(text)
  local n = {}
  for field in string.gmatch(text, '%d+') do
    n[#n + 1] = tonumber(field)
  end
  return n
end

-- A modifier's argument (its record's position in KEYS first) as numbers; nil when the hit
-- has none.
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

-- The hit's penalty, from its argument (common.lua, ARGV[+11]); nil without one.
local function penalty_of(arg, KEYS)
  local n = modifier_numbers(arg)
  if not n then
    return nil
  end
  return {key = KEYS[n[1]], after = n[2], within = n[3], block = n[4], factor = n[5],
    max = n[6], forget = n[7]}
end

-- The record under `key` as it reads at `now`: nil once forgotten.
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
  local d = decision(false, remaining, wait, wait)
  d[7], d[8], d[9] = record.blocked, record.offences, imposed and 1 or 0
  return d
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
