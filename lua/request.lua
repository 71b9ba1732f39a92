-- The driver, appended after every algorithm script (see common.lua for the arguments).
--
-- Hits come in groups (the several limits of one descriptor), decided in order, each on the
-- state the hits before it left. A group is charged only if none of its hits is denied; a hit
-- of a limit that takes debt is charged even when it does not fit (it is denied all the
-- same, and told when a hit of cost 1 fits again); with "any", every admitted hit is. With
-- "all", a request that its hits veto
-- (an enforced hit denied, or every quota hit denied: src/limit.rs, `vetoed`) charges
-- nothing but its debt. An admitted hit left uncharged reports what remains without it.

local PER_HIT = 10
local REPLY_FIELDS = 5
local mode = ARGV[1]

local hits = {}
for i, key in ipairs(KEYS) do
  local at = 2 + PER_HIT * (i - 1)
  hits[i] = {
    key = key,
    algorithm = ARGV[at],
    limit = tonumber(ARGV[at + 1]),
    period = tonumber(ARGV[at + 2]),
    cost = tonumber(ARGV[at + 3]),
    capacity = tonumber(ARGV[at + 4]),
    now = now_us(ARGV[at + 5]),
    nonce = ARGV[at + 6],
    role = ARGV[at + 7],
    debt = ARGV[at + 8] == '1',
    group = ARGV[at + 9],
  }
end

local function with_cost(hit, cost)
  local copy = {}
  for field, value in pairs(hit) do
    copy[field] = value
  end
  copy.cost = cost
  return copy
end

-- The decision for `hit` on `state`, and the state after it (nil when unchanged).
local function decide(hit, state)
  local algorithm = algorithms[hit.algorithm]
  if hit.limit == 0 and not algorithm.blocks_zero_itself then
    return blocked(hit), nil
  end
  local d, changed = algorithm.decide(hit, state)
  if d[1] == 1 or not hit.debt or hit.cost == 0 or hit.limit == 0 then
    return d, changed
  end
  local in_debt = algorithm.force(hit, state)
  local next = algorithm.decide(with_cost(hit, 1), in_debt)
  return decision(false, next[2], next[3], next[4]), in_debt
end

local function append(replies, d, now)
  for _, field in ipairs(d) do
    replies[#replies + 1] = field
  end
  replies[#replies + 1] = now
end

if mode == 'refund' then
  -- Each hit's charge taken back, then what remains: the decision of cost 0 at the time
  -- the charge was decided.
  local replies = {}
  for _, hit in ipairs(hits) do
    local algorithm = algorithms[hit.algorithm]
    algorithm.refund(hit)
    append(replies, (decide(with_cost(hit, 0), algorithm.read(hit))), hit.now)
  end
  return replies
end

-- Per key: the state read, the charged states (in order) and the hit of each.
local original = {}
local charged = {}
local function state_of(hit, overlay)
  if overlay[hit.key] ~= nil then
    return overlay[hit.key].state
  end
  local list = charged[hit.key]
  if list and #list > 0 then
    return list[#list].state
  end
  if original[hit.key] == nil then
    original[hit.key] = {state = algorithms[hit.algorithm].read(hit)}
  end
  return original[hit.key].state
end

local decisions = {}
local changes = {}
local i = 1
while i <= #hits do
  local group = hits[i].group
  local overlay = {}
  local first = i
  local group_denied = false
  while i <= #hits and hits[i].group == group do
    local hit = hits[i]
    local d, changed = decide(hit, state_of(hit, overlay))
    decisions[i] = d
    if changed ~= nil then
      overlay[hit.key] = {state = changed}
      changes[i] = changed
    end
    group_denied = group_denied or d[1] == 0
    i = i + 1
  end
  for j = first, i - 1 do
    local hit = hits[j]
    -- "any" (one Cluster slot's share of a request) leaves the groups to sluice.
    if changes[j] ~= nil and (hit.debt or not group_denied or mode == 'any') then
      charged[hit.key] = charged[hit.key] or {}
      table.insert(charged[hit.key], {state = changes[j], hit = hit, index = j})
    elseif changes[j] ~= nil then
      changes[j] = nil
    end
  end
end

local enforced_denied, quota_hits, quota_denied = false, 0, 0
for j, hit in ipairs(hits) do
  if hit.role == 'enforced' and decisions[j][1] == 0 then
    enforced_denied = true
  elseif hit.role == 'quota' then
    quota_hits = quota_hits + 1
    if decisions[j][1] == 0 then
      quota_denied = quota_denied + 1
    end
  end
end
local vetoed = mode == 'all' and (enforced_denied or (quota_hits > 0 and quota_denied == quota_hits))

-- The charges that stand, and each key's final state.
local written = {}
local final = {}
for key, list in pairs(charged) do
  for _, change in ipairs(list) do
    if change.hit.debt or not vetoed then
      written[change.index] = true
      final[key] = change
    end
  end
end
for key, change in pairs(final) do
  algorithms[change.hit.algorithm].write(change.hit, change.state)
end

local replies = {}
for j, hit in ipairs(hits) do
  local d = decisions[j]
  if d[1] == 1 and hit.cost > 0 and not written[j] then
    local state = (final[hit.key] or original[hit.key]).state
    d = decide(with_cost(hit, 0), state)
  end
  append(replies, d, hit.now)
end
return replies
