-- The driver, appended after every algorithm script: decides every hit of the call in order,
-- each on the state the hits before it left, then writes as the mode says (see common.lua).
-- With "all", a call whose hits veto it writes nothing: an enforced hit denied, or every
-- quota hit denied (src/store/mod.rs, `vetoed`).

local PER_HIT = 8
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
  }
end

-- The decision of cost 0 for `hit` on `state`: what remains when the hit is not charged.
local function uncharged(hit, state)
  local reading = {}
  for field, value in pairs(hit) do
    reading[field] = value
  end
  reading.cost = 0
  local algorithm = algorithms[hit.algorithm]
  if hit.limit == 0 and not algorithm.blocks_zero_itself then
    return blocked(reading)
  end
  local d = algorithm.decide(reading, state)
  return d
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
    append(replies, uncharged(hit, algorithm.read(hit)), hit.now)
  end
  return replies
end

-- The state each key holds after the hits decided so far, and the last hit that changed it.
local original = {}
local pending = {}
local last_change = {}
local order = {}
local replies = {}
local enforced_denied, quota_hits, quota_denied = false, 0, 0
for i, hit in ipairs(hits) do
  local algorithm = algorithms[hit.algorithm]
  local d, changed
  if hit.limit == 0 and not algorithm.blocks_zero_itself then
    d = blocked(hit)
  else
    local state = pending[hit.key]
    if state == nil then
      if original[hit.key] == nil then
        original[hit.key] = {algorithm.read(hit)}
      end
      state = original[hit.key][1]
    end
    d, changed = algorithm.decide(hit, state)
  end
  if changed ~= nil then
    if last_change[hit.key] == nil then
      order[#order + 1] = hit.key
    end
    pending[hit.key] = changed
    last_change[hit.key] = hit
  end
  if hit.role == 'enforced' and d[1] == 0 then
    enforced_denied = true
  elseif hit.role == 'quota' then
    quota_hits = quota_hits + 1
    if d[1] == 0 then
      quota_denied = quota_denied + 1
    end
  end
  append(replies, d, hit.now)
end

local vetoed = enforced_denied or (quota_hits > 0 and quota_denied == quota_hits)
if mode == 'each' or not vetoed then
  for _, key in ipairs(order) do
    local hit = last_change[key]
    algorithms[hit.algorithm].write(hit, pending[key])
  end
  return replies
end
-- Vetoed: nothing was written; an admitted hit reports what remains without its charge.
for i, hit in ipairs(hits) do
  local at = REPLY_FIELDS * (i - 1)
  if replies[at + 1] == 1 and hit.cost > 0 then
    local state = original[hit.key] and original[hit.key][1]
    local d = uncharged(hit, state)
    for field = 1, 4 do
      replies[at + field] = d[field]
    end
  end
end
return replies
