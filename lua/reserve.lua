-- Reserved budgets (crates/sluice-core/src/modifier/reserve/mod.rs, whose rules this copies): a
-- request holds an estimate against its limit while it runs and settles the actual cost when
-- it ends. Appended after the algorithms, before the driver.
--
-- Holds: one string under the key of the part `holds` (crates/sluice-store/src/key.rs, `kept_key`):
-- "<until_us> <token>:<estimate>:<lapses_at_us> ...", the live holds after `until_us`, when
-- the last of them lapses: from then on it reads as empty whatever the key's TTL (which a
-- clock given by sluice may outrun); the key expires then. One GET reads it and one SET
-- writes it. A settled token: a string under the part `settled`'s key, "<actual it charged>:
-- <forgotten_at_us>", read alike.

-- This modifier's place among the modifiers with a script.
local RESERVE = #modifiers + 1

-- The hit's reservation, from its argument (common.lua, ARGV[+12...]); nil without one.
local function reserve_of(arg, KEYS)
  local n = modifier_numbers(arg)
  if not n then
    return nil
  end
  local settled_key = nil
  if n[2] > 0 then
    settled_key = KEYS[n[2]]
  end
  return {key = KEYS[n[1]], settled_key = settled_key, max_hold = n[3], window_end = n[4],
    max_holds = n[5]}
end

-- The holds under `key` at `now`: the live ones ({token, amount, lapses}) and how many had
-- lapsed.
local function reserve_read(key, now)
  local state = {live = {}, lapsed = 0, lapsed_amount = 0}
  local value = redis.call('GET', key)
  if not value then
    return state
  end
  local until_us = tonumber(string.match(value, '^(%d+)'))
  if not until_us or until_us <= now then
    return state
  end
  -- Each hold after a space: the pattern cannot start inside the leading number (a match
  -- tried at every digit of it cost a tenth of the call).
  for token, amount, lapses in string.gmatch(value, ' (%x+):(%d+):(%d+)') do
    if tonumber(lapses) > now then
      state.live[#state.live + 1] = {token = token, amount = tonumber(amount), lapses = tonumber(lapses)}
    else
      state.lapsed = state.lapsed + 1
      state.lapsed_amount = state.lapsed_amount + tonumber(amount)
    end
  end
  return state
end

local function reserve_total(live)
  return sum_of(live, 'amount')
end

-- Writes the live holds of `state` whole (the lapsed ones go), expiring with the last; none
-- left, the key goes.
local function reserve_write(key, state, now)
  local last = 0
  local parts = {''}
  for _, hold in ipairs(state.live) do
    parts[#parts + 1] = hold.token .. ':' .. fmt(hold.amount) .. ':' .. fmt(hold.lapses)
    last = math.max(last, hold.lapses)
  end
  if #parts == 1 then
    redis.call('DEL', key)
    return
  end
  parts[1] = fmt(last)
  redis.call('SET', key, table.concat(parts, ' '), 'PX', ttl_ms(last - now))
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
-- held, estimate, and the holds found lapsed (how many, holding how much) in `holds`.
local function reserve_mark(d, call, held, estimate, holds)
  return noted(d, RESERVE, {call, held, estimate, holds.lapsed, holds.lapsed_amount})
end

-- Takes back an opening (`hit`, decided at hit.now) of a request that turned out vetoed (one
-- Cluster slot's share of it): its estimate leaves its token's hold, and the hold goes when
-- nothing is left of it.
local function reserve_refund(hit, r)
  local holds = reserve_read(r.key, hit.now)
  local token = string.sub(hit.lease, 2)
  local live = {}
  for _, hold in ipairs(holds.live) do
    if hold.token ~= token then
      live[#live + 1] = hold
    elseif hold.amount > hit.cost then
      live[#live + 1] = {token = token, amount = hold.amount - hit.cost, lapses = hold.lapses}
    end
  end
  reserve_write(r.key, {live = live}, hit.now)
  return true
end

-- An opening: admitted when the limit admits the holds plus the estimate (hit.cost) on its
-- `state`; returns the decision, and the holds after it when admitted. `decide_as(hit, cost,
-- charges, state)` is the driver's decision of the limit at another cost.
local function reserve_open(hit, r, holds, state, decide_as)
  local held = reserve_total(holds.live)
  local token = string.sub(hit.lease, 2)
  local holding, first_lapse = false, nil
  for _, hold in ipairs(holds.live) do
    holding = holding or hold.token == token
    if first_lapse == nil or hold.lapses < first_lapse then
      first_lapse = hold.lapses
    end
  end
  if not holding and #holds.live >= r.max_holds then
    -- As many holds as a key may have: denied until the first lapses (or one settles).
    local d = decide_as(hit, 0, hit.debt, state)
    d[1], d[2], d[4] = 0, net(d[2], held), math.max(0, (first_lapse or hit.now) - hit.now)
    return d, nil
  end
  local d = decide_as(hit, held + hit.cost, hit.debt, state)
  if d[1] == 0 then
    d[2] = net(d[2], held)
    return d, nil
  end
  local lapses = hit.now + r.max_hold
  if r.window_end > 0 then
    lapses = math.min(lapses, r.window_end)
  elseif hit.first_hit == 1 then
    -- A window from the first hit ends where its counter's does: the decision's reset.
    lapses = math.min(lapses, hit.now + d[3])
  end
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
  return reserve_mark(d, 1, held + hit.cost, hit.cost, holds), {live = live, lapsed = 0, lapsed_amount = 0}
end

-- A settle of the hit's token with the actual cost (hit.cost), never denied, on the limit's
-- `state`: returns the decision, the holds after it (nil when unchanged), the settled mark
-- ({value, until}) to write (nil for a duplicate), and the limit's state after the charge
-- (nil when unchanged). `settled`: the token's mark as read (false: none).
local function reserve_settle(hit, r, holds, settled, state, decide_as)
  local held = reserve_total(holds.live)
  if settled then
    local d = settled_answer(decide_as(hit, 0, hit.debt, state), held)
    return reserve_mark(d, 3, held, 0, {lapsed = 0, lapsed_amount = 0}), nil, nil, nil
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
  local _, changed = decide_as(hit, hit.cost, true, state)
  local left = reserve_total(live)
  local d = settled_answer(decide_as(hit, 0, hit.debt, changed or state), left)
  local remembered = hit.now + r.max_hold
  local call, estimate = 4, 0
  if found then
    call, estimate = 2, found.amount
    remembered = math.max(found.lapses, hit.now + 1)
  end
  local after = nil
  if found or holds.lapsed > 0 then
    after = {live = live, lapsed = 0, lapsed_amount = 0}
  end
  return reserve_mark(d, call, left, estimate, holds), after, {hit.cost, remembered}, changed
end

-- Decides `hit`: an opening ("+" lease) or a settle ("-") of its token, in place of the
-- limit's own decision (`inner`, for a hit of neither); what it leaves stands as the limit's
-- charge does.
local function reserve_around(hit, r, ctx, inner)
  if not (hit.acquires or hit.releases) then
    return inner()
  end
  local holds = ctx.kept(r.key, reserve_read)
  if hit.acquires then
    local d, after = reserve_open(hit, r, holds, ctx.state, ctx.decide_as)
    if after then
      ctx.leave(r.key, after, reserve_write, false)
    end
    return d, nil
  end
  local settled = ctx.kept(r.settled_key, settled_read)
  local d, after, mark, changed = reserve_settle(hit, r, holds, settled, ctx.state, ctx.decide_as)
  if after then
    ctx.leave(r.key, after, reserve_write, false)
  end
  if mark then
    ctx.leave(r.settled_key, mark, settled_write, false)
  end
  return d, changed
end

-- What the budget's live holds hold now (the admin API's read).
local function reserve_held(hit, r)
  return reserve_total(reserve_read(r.key, hit.now).live)
end

modifiers[RESERVE] = {name = 'reserve', parse = reserve_of, around = reserve_around,
  refund = reserve_refund, held = reserve_held}
