-- The driver, appended after every algorithm script (see common.lua for the arguments).
--
-- Hits come in groups (the several limits of one descriptor), decided in order, each on the
-- state the hits before it left. A group is charged only if none of its hits is denied; a hit
-- of a limit that takes debt is charged even when it does not fit (it is denied all the
-- same, and told when a hit of cost 1 fits again), and so is a release of leases. With
-- "every" (the reference's counting),
-- every hit is charged so, denied or not, but a lease's acquire: a lease is taken only by a
-- request that is not vetoed, in both modes. With "all", a request that its hits veto
-- (an enforced hit denied, or every quota hit denied: crates/sluice-core/src/engine.rs, `vetoed`) charges
-- nothing but its debt. An admitted hit left uncharged reports what remains without it.
-- A hit's modifiers (common.lua, `modifiers`) decide around its limit's decision, in
-- registry order; what they leave is written with the hit's charge, or, when they say so,
-- whatever the request's fate.
--
-- Read-only (`request(KEYS, ARGV, true)`, the `_ro` function, for a Redis that refuses
-- writes: out of memory, a read-only replica): the hits are decided alike, nothing is
-- written, and one more reply field says whether the answer needed a write (1) or not (0).
-- The charge of a denied hit by the reference's counting ("every", not debt) is not such a
-- need: Redis could not keep it, and it changes only how far over its limit the key is.

-- The common arguments of a hit (one per modifier among them); the algorithm's own follow.
local COMMON = 12 + #modifiers
-- Each algorithm, made when a call first uses it: once per call for EVAL, once per load for
-- a function library, whose top level runs only when it is loaded.
local made = {}
local function algorithm(name)
  local made_one = made[name]
  if not made_one then
    made_one = algorithms[name]()
    made[name] = made_one
  end
  return made_one
end

local function with_cost(hit, cost)
  local copy = {}
  for field, value in pairs(hit) do
    copy[field] = value
  end
  copy.cost = cost
  return copy
end

-- The decision for `hit` on `state`, and the state after it (nil when unchanged), by its
-- algorithm alone.
local function decide_plain(hit, state)
  local rules = algorithm(hit.algorithm)
  if hit.limit == 0 and not rules.blocks_zero_itself then
    return blocked(hit), nil
  end
  local d, changed = rules.decide(hit, state)
  -- A limit of 0 never repays a debt; a window that forgets its count takes the charge.
  local never_repaid = hit.limit == 0 and not (rules.excess_ends_with_window and not hit.debt)
  if d[1] == 1 or not hit.charges_denied or hit.cost == 0 or never_repaid or rules.never_owes then
    return d, changed
  end
  -- Charged all the same: denied, reporting what remained before it (as every denial does).
  local in_debt = rules.force(hit, state)
  local next = rules.decide(with_cost(hit, 1), in_debt)
  return decision(false, d[2], next[3], next[4]), in_debt
end

-- `decide_plain` for a hit that must leave `hit.headroom` unused (a modifier's share kept for
-- other traffic): admitted only when a hit of cost + headroom would be, and told what remains
-- above the headroom. A denial is the decision of cost + headroom, charged (at the hit's own
-- cost) only as the hit charges what does not fit. A release leaves none. The other copy is
-- crates/sluice-core/src/algorithm/mod.rs, `decide_within`.
local function decide(hit, state)
  local headroom = hit.headroom
  if headroom == 0 or hit.releases then
    return decide_plain(hit, state)
  end
  local cost, charges = hit.cost, hit.charges_denied
  hit.cost, hit.charges_denied = cost + headroom, hit.debt
  local probe = decide_plain(hit, state)
  hit.cost, hit.charges_denied = cost, charges
  if probe[1] == 1 then
    local d, changed = decide_plain(hit, state)
    d[2] = math.max(0, d[2] - headroom)
    return d, changed
  end
  probe[2] = math.max(0, probe[2] - headroom)
  if charges and cost > 0 then
    local _, changed = decide_plain(hit, state)
    return probe, changed
  end
  return probe, nil
end

-- Whether a read-only answer may leave out the charge of `hit`, decided `d`: a denial
-- charged only by the reference's counting.
local function droppable(hit, d)
  return d[1] == 0 and not hit.debt and not hit.releases
end

local function append(replies, d, now)
  for _, field in ipairs(d) do
    replies[#replies + 1] = field
  end
  replies[#replies + 1] = now
end

-- A call's hits from KEYS and ARGV (see common.lua): their keys come first in KEYS, the keys
-- of their modifiers' parts after them. `now_of` reads a hit's time (Redis TIME when not
-- given). `hit.mods` holds each modifier's parsed argument by its place (`hit.modified`:
-- there is one).
local function parse_hits(KEYS, ARGV, read_only, every, now_of)
  local hits = {}
  local at = 2
  local i = 0
  while at <= #ARGV do
    i = i + 1
    hits[i] = {
      key = KEYS[i],
      algorithm = ARGV[at],
      limit = tonumber(ARGV[at + 1]),
      period = tonumber(ARGV[at + 2]),
      cost = tonumber(ARGV[at + 3]),
      capacity = tonumber(ARGV[at + 4]),
      now = now_of(ARGV[at + 5]),
      nonce = ARGV[at + 6],
      role = ARGV[at + 7],
      debt = ARGV[at + 8] == '1',
      charges_denied = ARGV[at + 8] == '1' or every,
      group = ARGV[at + 9],
      lease = ARGV[at + 10],
      releases = string.sub(ARGV[at + 10], 1, 1) == '-',
      acquires = string.sub(ARGV[at + 10], 1, 1) == '+',
      headroom = tonumber(ARGV[at + 11]),
      read_only = read_only,
      mods = {},
      modified = false,
    }
    for m, modifier in ipairs(modifiers) do
      local arg = ARGV[at + 11 + m]
      if arg ~= '' then
        local own = modifier.parse(arg, KEYS)
        if own then
          hits[i].mods[m] = own
          hits[i].modified = true
        end
      end
    end
    local own = params[hits[i].algorithm] or {}
    for j, field in ipairs(own) do
      hits[i][field] = tonumber(ARGV[at + COMMON + j - 1])
    end
    at = at + COMMON + #own
  end
  return hits
end

-- "refund": each hit's charge taken back, then what remains: the decision of cost 0 at the
-- time the charge was decided.
local function refund(hits)
  local replies = {}
  for _, hit in ipairs(hits) do
    local rules = algorithm(hit.algorithm)
    -- A modifier may have charged something else in the limit's place (its own state).
    local taken = false
    for m, own in pairs(hit.mods) do
      local refund_own = modifiers[m].refund
      if refund_own and refund_own(hit, own) then
        taken = true
      end
    end
    if not taken then
      rules.refund(hit)
    end
    append(replies, (decide(with_cost(hit, 0), rules.read(hit))), hit.now)
  end
  return replies
end

-- "credit": each hit's state given its cost back now, then what remains: the decision of
-- cost 0 (sluice sends only the hits of algorithms that take credit).
local function credit(hits)
  local replies = {}
  for _, hit in ipairs(hits) do
    -- The admin API reads the whole limit: no share is kept for other traffic.
    hit.headroom = 0
    local rules = algorithm(hit.algorithm)
    rules.write(hit, rules.credit(hit, rules.read(hit)))
    append(replies, (decide(with_cost(hit, 0), rules.read(hit))), hit.now)
  end
  return replies
end

-- "read": each hit's state as a hit of cost 0 finds it, with neither its modifiers nor a
-- write, what the state holds against the limit (the algorithm's `used`, else the capacity
-- less what remains), and what its modifiers hold of it (`held`).
local function read(hits)
  local replies = {}
  for _, hit in ipairs(hits) do
    hit.headroom = 0
    local rules = algorithm(hit.algorithm)
    local state = rules.read(hit)
    local d = decide(with_cost(hit, 0), state)
    local used
    if rules.used and (hit.limit > 0 or rules.blocks_zero_itself) then
      used = rules.used(hit, state)
    else
      used = math.max(0, hit.capacity - d[2])
    end
    local held = 0
    for m, own in pairs(hit.mods) do
      if modifiers[m].held then
        held = held + modifiers[m].held(hit, own)
      end
    end
    append(replies, d, used)
    replies[#replies + 1] = held
    replies[#replies + 1] = hit.now
  end
  return replies
end

-- The values of the hits' keys whose state is a plain value, read with one MGET (when more
-- than one), by key.
local function fetch_plain(hits)
  local fetched = {}
  local plain_keys = {}
  for _, hit in ipairs(hits) do
    local rules = algorithm(hit.algorithm)
    if rules.plain and rules.plain(hit) then
      plain_keys[#plain_keys + 1] = hit.key
    end
  end
  if #plain_keys > 1 then
    local values = redis.call('MGET', unpack(plain_keys))
    for k, key in ipairs(plain_keys) do
      fetched[key] = values[k]
    end
  end
  return fetched
end

-- A state this call left under `at` (its hit's group's `overlay`, then the standing ones),
-- else what was read there (`original`); nil when nothing was read there yet.
local function state_at(s, overlay, at)
  local found = overlay and overlay[at]
  if found == nil then
    found = s.latest[at]
  end
  if found == nil then
    found = s.original[at]
  end
  return found
end

-- `state_at`, else what `read(at, now)` reads there (kept as read, once per call; nothing
-- read is kept as false and returned as nil).
local function state_or_read(s, overlay, at, read, now)
  local found = state_at(s, overlay, at)
  if found == nil then
    found = read(at, now)
    if found == nil then
      found = false
    end
    s.original[at] = found
  end
  if found == false then
    return nil
  end
  return found
end

-- The decision for `hit` as if it cost `cost` and charged what does not fit when `charges`,
-- on `state`, and the state after it; the hit is left as it was (no copy is made).
local function decide_as(hit, cost, charges, state)
  local was_cost, was_charges = hit.cost, hit.charges_denied
  hit.cost, hit.charges_denied = cost, charges
  local d, changed = decide(hit, state)
  hit.cost, hit.charges_denied = was_cost, was_charges
  return d, changed
end

-- Writes the states a hit's modifiers left to stand with its charge (`extras`: {key, value,
-- write}).
local function write_extras(hit, extras)
  for _, e in ipairs(extras or {}) do
    e[3](e[1], e[2], hit.now)
  end
end

-- The reply of a call of one hit: its decision, the time it was decided at for a Cluster's
-- calls, and, read only, whether it needed a write.
local function one_reply(d, hit, needed, read_only, with_time, fields)
  if with_time then
    d[DECISION_FIELDS + 1] = hit.now
  end
  if read_only then
    d[fields + 1] = needed
  end
  return d
end

-- One hit without modifiers (most requests): every mode charges it alike. It is charged when
-- its decision changed the state, which a denial does only in debt or with "every".
local function one_hit(hit, read_only, with_time, fields)
  local d, changed = decide(hit, algorithm(hit.algorithm).read(hit))
  local needed = 0
  if changed ~= nil then
    if not read_only then
      algorithm(hit.algorithm).write(hit, changed)
    elseif not droppable(hit, d) then
      needed = 1
    end
  end
  return one_reply(d, hit, needed, read_only, with_time, fields)
end

-- Decides `hit` through its modifiers from place `from` on (each around those after it),
-- the limit's own decision innermost.
local function through(hit, from, ctx)
  for m = from, #modifiers do
    local own = hit.mods[m]
    if own then
      return modifiers[m].around(hit, own, ctx, function()
        return through(hit, m + 1, ctx)
      end)
    end
  end
  return decide(hit, ctx.state)
end

-- Decides `hit` on `state` through its modifiers: the decision, the limit's state after it
-- (nil when unchanged), and the states its modifiers left to stand with its charge
-- ({key, value, write}; nil: none). Those left whatever the request's fate go to
-- `s.always` (by key: {value, write, time}), which later hits read first.
local function modified(hit, state, s, overlay)
  if not hit.modified then
    local d, changed = decide(hit, state)
    return d, changed, nil
  end
  local extras = nil
  local ctx = {state = state, decide_as = decide_as}
  function ctx.kept(key, read)
    local always = s.always[key]
    if always ~= nil then
      return always[1]
    end
    return state_or_read(s, overlay, key, read, hit.now)
  end
  function ctx.leave(key, value, write, always)
    if always then
      s.always[key] = {value, write, hit.now}
    else
      extras = extras or {}
      extras[#extras + 1] = {key, value, write}
    end
  end
  local d, changed = through(hit, 1, ctx)
  return d, changed, extras
end

-- Decides the hits group by group, each on the state the hits before it left. A group stands
-- whole or not at all; a hit that `always_stands` stands alone; `leaves_groups` ("any" and
-- "every_part": one Cluster slot's share of a request) leaves the groups to sluice. Returns
-- the call's `s`: decisions, changes and stands by hit, the states read (`original`), the
-- states the standing charges left (`latest`), and those the modifiers left to stand
-- whatever the request's fate (`always`).
local function decide_groups(hits, always_stands, leaves_groups)
  local fetched = fetch_plain(hits)
  local s = {decisions = {}, changes = {}, extras = {}, stands = {}, original = {}, latest = {},
    always = {}}
  local n = #hits
  local i = 1
  while i <= n do
    local group, first = hits[i].group, i
    -- The states this group's hits changed so far (only a group of several limits has any).
    local overlay = nil
    local denied = false
    while i <= n and hits[i].group == group do
      local hit = hits[i]
      local key = hit.key
      local state = state_at(s, overlay, key)
      if state == nil then
        state = algorithm(hit.algorithm).read(hit, fetched[key])
        s.original[key] = state
      end
      local d, changed, extra = modified(hit, state, s, overlay)
      s.decisions[i] = d
      s.extras[i] = extra
      if changed ~= nil then
        s.changes[i] = changed
      end
      if (changed ~= nil or extra ~= nil) and i < n and hits[i + 1].group == group then
        overlay = overlay or {}
        if changed ~= nil then
          overlay[key] = changed
        end
        for _, e in ipairs(extra or {}) do
          overlay[e[1]] = e[2]
        end
      end
      denied = denied or d[1] == 0
      i = i + 1
    end
    for j = first, i - 1 do
      local change = s.changes[j]
      local extras = s.extras[j]
      if (change ~= nil or extras ~= nil) and (always_stands(hits[j]) or not denied or leaves_groups) then
        s.stands[j] = true
        if change ~= nil then
          s.latest[hits[j].key] = change
        end
        for _, e in ipairs(extras or {}) do
          s.latest[e[1]] = e[2]
        end
      end
    end
  end
  return s
end

-- Whether the hits veto their request: an enforced hit denied, or every quota hit denied
-- (crates/sluice-core/src/engine.rs, `vetoed`; a quota hit in shadow mode always passes).
local function vetoed(hits, decisions)
  local enforced_denied, quota_hits, quota_denied = false, 0, 0
  for j = 1, #hits do
    local role, admitted = hits[j].role, decisions[j][1] == 1
    if role == 'enforced' and not admitted then
      enforced_denied = true
    elseif role == 'quota' then
      quota_hits = quota_hits + 1
      if not admitted then
        quota_denied = quota_denied + 1
      end
    elseif role == 'passing_quota' then
      quota_hits = quota_hits + 1
    end
  end
  return enforced_denied or (quota_hits > 0 and quota_denied == quota_hits)
end

-- Writes the charges that stand, each key's last, and what the modifiers left to stand
-- whatever the request's fate; read
-- only, writes nothing and says whether the answer needed a write (1) or not (0). Returns
-- each key's last standing hit (none when nothing was written) and that need.
local function write_standing(hits, s, read_only)
  local last = {}
  for j = 1, #hits do
    if s.stands[j] and s.changes[j] ~= nil then
      last[hits[j].key] = j
    end
  end
  if read_only then
    local needed = 0
    for j = 1, #hits do
      if s.stands[j] and not droppable(hits[j], s.decisions[j]) then
        needed = 1
      end
    end
    if next(s.always) ~= nil then
      needed = 1
    end
    for j = 1, #hits do
      if s.stands[j] and s.extras[j] ~= nil and #s.extras[j] > 0 then
        needed = 1
      end
    end
    -- Nothing was written: what remains is what the keys hold.
    return {}, needed
  end
  for j = 1, #hits do
    local hit = hits[j]
    if last[hit.key] == j then
      algorithm(hit.algorithm).write(hit, s.changes[j])
    end
  end
  for key, left in pairs(s.always) do
    left[2](key, left[1], left[3])
  end
  for j = 1, #hits do
    if s.stands[j] then
      write_extras(hits[j], s.extras[j])
    end
  end
  return last, 0
end

-- The reply: each hit's decision (an admitted hit left uncharged stays admitted and reports
-- what remains without it, as its key stays: other hits of the request may have charged the
-- key past the limit, which never turns its admission into a denial), with the time it was
-- decided at when `with_time`.
local function replies_of(hits, s, last, fields, with_time)
  local replies = {}
  for j = 1, #hits do
    local hit = hits[j]
    local d = s.decisions[j]
    if d[1] == 1 and hit.cost > 0 and not s.stands[j] and not hit.releases then
      local final = last[hit.key]
      local state
      if final then
        state = s.changes[final]
      else
        state = s.original[hit.key]
      end
      d = decide(with_cost(hit, 0), state)
      d[1] = 1
      d[4] = 0
    end
    local at = fields * (j - 1)
    for k = 1, DECISION_FIELDS do
      replies[at + k] = d[k]
    end
    if with_time then
      replies[at + DECISION_FIELDS + 1] = hit.now
    end
  end
  return replies
end

-- One call: decides the hits of KEYS and ARGV (see common.lua). scripts.rs ends the script
-- with `return request(KEYS, ARGV)`, or registers `request` as a function of a library.
local function request(KEYS, ARGV, read_only)
  local mode = ARGV[1]
  -- Whether a hit's charge stands whatever its request's fate: debt, a release, and with
  -- "every" every hit but a lease's acquire (a lease is taken only by an admitted request,
  -- the only one that gets its token).
  local every = mode == 'every' or mode == 'every_part'
  local function always_stands(hit)
    return hit.debt or hit.releases or (every and not hit.acquires)
  end
  -- The calls of a Cluster ("any", "every_part", "refund") and a credit also reply the time
  -- each hit was decided at.
  local with_time = mode == 'any' or mode == 'every_part' or mode == 'refund' or mode == 'credit'
  local fields = with_time and DECISION_FIELDS + 1 or DECISION_FIELDS

  -- Redis TIME, read once per call when some hit needs it.
  local redis_now = nil
  local function now_of(given)
    if given ~= '' then
      return tonumber(given)
    end
    if redis_now == nil then
      redis_now = now_us('')
    end
    return redis_now
  end

  if mode == 'read' then
    local replies = read(parse_hits(KEYS, ARGV, true, every, now_of))
    if read_only then
      -- A read needs no write.
      replies[#replies + 1] = 0
    end
    return replies
  end
  local hits = parse_hits(KEYS, ARGV, read_only, every, now_of)
  if mode == 'refund' then
    return refund(hits)
  end
  if mode == 'credit' then
    return credit(hits)
  end
  if #hits == 1 and not hits[1].modified then
    return one_hit(hits[1], read_only, with_time, fields)
  end
  local s = decide_groups(hits, always_stands, mode == 'any' or mode == 'every_part')
  -- A vetoed request keeps only the charges that always stand.
  if (mode == 'all' or mode == 'every') and vetoed(hits, s.decisions) then
    for j = 1, #hits do
      if not always_stands(hits[j]) then
        s.stands[j] = nil
      end
    end
  end
  local last, needed = write_standing(hits, s, read_only)
  local replies = replies_of(hits, s, last, fields, with_time)
  if read_only then
    replies[#replies + 1] = needed
  end
  return replies
end
