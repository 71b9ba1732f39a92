-- Reserved budgets (crates/sluice-core/src/modifier/reserve/mod.rs, whose rules this copies): a
-- request holds an estimate against its limit while it runs and settles the actual cost when
-- it ends. Appended after the algorithms, before the driver.
--
-- Holds: a hash under the reservation's key (crates/sluice-store/src/key.rs, `holds_key`), one
-- field per token (16 hex digits) valued "<amount>:<lapses_at_us>", and `_until`, when its
-- last hold lapses: from then on it reads as empty whatever the key's TTL (which a clock given
-- by sluice may outrun); the key expires then. A settled token: a string under `settled_key`,
-- "<actual it charged>:<forgotten_at_us>", read alike.

-- The hit's reservation, from its argument (common.lua, ARGV[+12]); nil without one.
local function reserve_of(arg, KEYS)
  if arg == '' then
    return nil
  end
  local n = numbers_of(arg)
  if n[1] == 0 then
    return nil
  end
  local settled_key = nil
  if n[2] > 0 then
    settled_key = KEYS[n[2]]
  end
  return {key = KEYS[n[1]], settled_key = settled_key, max_hold = n[3], window_end = n[4]}
end

-- The holds under `key` at `now`: the live ones ({token, amount, lapses}, in no order) and how
-- many had lapsed.
local function reserve_read(key, now)
  local fields = redis.call('HGETALL', key)
  local state = {live = {}, lapsed = 0}
  for i = 1, #fields, 2 do
    if fields[i] == '_until' and tonumber(fields[i + 1]) <= now then
      return state
    end
  end
  for i = 1, #fields, 2 do
    local amount, lapses = string.match(fields[i + 1], '^(%d+):(%d+)$')
    if amount then
      if tonumber(lapses) > now then
        state.live[#state.live + 1] = {token = fields[i], amount = tonumber(amount), lapses = tonumber(lapses)}
      else
        state.lapsed = state.lapsed + 1
      end
    end
  end
  return state
end

local function reserve_total(live)
  local total = 0
  for _, hold in ipairs(live) do
    total = total + hold.amount
  end
  return total
end

-- Writes the live holds of `state` whole (the lapsed ones go), expiring with the last.
local function reserve_write(key, state, now)
  redis.call('DEL', key)
  local last = 0
  local fields = {}
  for _, hold in ipairs(state.live) do
    fields[#fields + 1] = hold.token
    fields[#fields + 1] = fmt(hold.amount) .. ':' .. fmt(hold.lapses)
    last = math.max(last, hold.lapses)
  end
  if #fields > 0 then
    fields[#fields + 1] = '_until'
    fields[#fields + 1] = fmt(last)
    redis.call('HSET', key, unpack(fields))
    expire_after(key, last - now)
  end
end

-- The mark of a settled token under `key` at `now` ({actual, until}), or false.
local function settled_read(key, now)
  local value = redis.call('GET', key)
  if not value then
    return false
  end
  local actual, until_us = string.match(value, '^(%d+):(%d+)$')
  if not actual or tonumber(until_us) <= now then
    return false
  end
  return {tonumber(actual), tonumber(until_us)}
end

local function settled_write(key, mark, now)
  redis.call('SET', key, fmt(mark[1]) .. ':' .. fmt(mark[2]), 'PX', ttl_ms(mark[2] - now))
end

-- What remains net of what is held.
local function net(remaining, held)
  return math.max(0, remaining - held)
end

-- A settle's answer, from the limit's decision of cost 0 after it: admitted, with what
-- remains net of `held`.
local function settled_answer(d, held)
  d[1], d[2], d[4] = 1, net(d[2], held), 0
  return d
end

-- The reservation's part of a reply: call (1 opened, 2 settled, 3 duplicate, 4 unknown),
-- held, estimate, lapsed.
local function reserve_mark(d, call, held, estimate, lapsed)
  d[10], d[11], d[12], d[13] = call, held, estimate, lapsed
  return d
end

-- An opening: admitted when the limit admits the holds plus the estimate (hit.cost); returns
-- the decision, and the holds after it when admitted. `ask(cost)` is the limit's decision of
-- `cost` on its state, nothing charged.
local function reserve_open(hit, holds, ask)
  local held = reserve_total(holds.live)
  local d = ask(held + hit.cost)
  if d[1] == 0 then
    d[2] = net(d[2], held)
    return d, nil
  end
  local lapses = hit.now + hit.reserve.max_hold
  if hit.reserve.window_end > 0 then
    lapses = math.min(lapses, hit.reserve.window_end)
  end
  local token = string.sub(hit.lease, 2)
  local live, added = {}, false
  for i, hold in ipairs(holds.live) do
    if hold.token == token then
      -- A token holds once per key: a second opening adds to its hold.
      live[i] = {token = token, amount = hold.amount + hit.cost, lapses = math.max(hold.lapses, lapses)}
      added = true
    else
      live[i] = hold
    end
  end
  if not added then
    live[#live + 1] = {token = token, amount = hit.cost, lapses = lapses}
  end
  return reserve_mark(d, 1, held + hit.cost, hit.cost, holds.lapsed), {live = live, lapsed = 0}
end

-- A settle of the hit's token with the actual cost (hit.cost), never denied: returns the
-- decision, the holds after it (nil when unchanged), and the settled mark ({value, until})
-- to write (nil for a duplicate). `settled`: the token's mark as read (nil: none); `charge(cost)`
-- the limit's state after charging `cost` past the limit if need be (nil when unchanged), and
-- `report(state)` the limit's decision of cost 0 on a state (nil: the one read).
local function reserve_settle(hit, holds, settled, charge, report)
  local held = reserve_total(holds.live)
  if settled then
    local d = settled_answer(report(nil), held)
    return reserve_mark(d, 3, held, 0, 0), nil, nil, nil
  end
  local token = string.sub(hit.lease, 2)
  local live, found = {}, nil
  for _, hold in ipairs(holds.live) do
    if hold.token == token and not found then
      found = hold
    else
      live[#live + 1] = hold
    end
  end
  local changed = charge(hit.cost)
  local left = reserve_total(live)
  local d = settled_answer(report(changed), left)
  local remembered = hit.now + hit.reserve.max_hold
  local call, estimate = 4, 0
  if found then
    call, estimate = 2, found.amount
    remembered = math.max(found.lapses, hit.now + 1)
  end
  local after = nil
  if found or holds.lapsed > 0 then
    after = {live = live, lapsed = 0}
  end
  return reserve_mark(d, call, left, estimate, holds.lapsed), after, {hit.cost, remembered}, changed
end
