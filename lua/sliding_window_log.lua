-- sliding_window_log: one sorted-set member per admitted unit of cost, scored by its time
-- (crates/sluice-core/src/algorithm/sliding_window_log.rs). Members are `<nonce>:<i>`: the nonce is unique per hit.
-- Key: CACHE_KEY_PREFIX .. sliding_window_log_<L>per<W in s>s_domain_key_value_...
-- State: {count = live stored entries, skip = entries before them that left the window (read
-- only: kept where they cannot be dropped), added = {hits charged earlier in this call}}; an
-- entry stamped ts is in the window iff ts + W > now. At most the newest L + 1 entries are
-- kept: while L + 1 are live every hit is denied, and a decision only ever looks at the newest
-- L + 1 - h (a hit in debt adds at most L + 1).

-- The time of the entry of rank `rank` (0 = oldest) among the stored and the added ones.

-- Made once per call that uses it (the driver asks `algorithm(name)`): a script's top level
-- runs on every call, so what it defines there costs every call.
algorithms.sliding_window_log = function()
  -- Runs `command` (ZADD with `stamp` as each score, or ZREM without) on the members
  -- `<nonce>:1` .. `<nonce>:<count>` of `key`, at most 500 members a call.
  local function each_member(key, command, nonce, count, stamp)
    local arguments = {}
    for i = 1, count do
      if stamp then
        arguments[#arguments + 1] = stamp
      end
      arguments[#arguments + 1] = nonce .. ':' .. fmt(i)
      if #arguments >= 1000 or i == count then
        redis.call(command, key, unpack(arguments))
        arguments = {}
      end
    end
  end

  local function entry_at(hit, state, rank)
    if rank < state.count then
      local at = rank + (state.skip or 0)
      local entry = redis.call('ZRANGE', hit.key, at, at, 'WITHSCORES')
      return tonumber(entry[2])
    end
    rank = rank - state.count
    for _, added in ipairs(state.added) do
      if rank < added.cost then
        return added.now
      end
      rank = rank - added.cost
    end
    return hit.now
  end

  local function live(state)
    local count = state.count
    for _, added in ipairs(state.added) do
      count = count + added.cost
    end
    return count
  end

  local function until_empty(hit, state)
    local count = live(state)
    if count == 0 then
      return 0
    end
    return entry_at(hit, state, count - 1) + hit.period - hit.now
  end

  return {
    read = function(hit)
      local dead = fmt(hit.now - hit.period)
      if hit.read_only then
        -- Entries that left the window are skipped where they cannot be dropped.
        local skip = redis.call('ZCOUNT', hit.key, '-inf', dead)
        return {count = redis.call('ZCARD', hit.key) - skip, skip = skip, added = {}}
      end
      -- Entries that left the window matter to no one: dropping them changes no decision.
      redis.call('ZREMRANGEBYSCORE', hit.key, '-inf', dead)
      return {count = redis.call('ZCARD', hit.key), skip = 0, added = {}}
    end,
    decide = function(hit, state)
      local count = live(state)
      if count + hit.cost > hit.limit then
        local retry = hit.period
        if hit.cost <= hit.limit then
          -- The oldest (count + cost - L) entries must leave first.
          retry = entry_at(hit, state, count + hit.cost - hit.limit - 1) + hit.period - hit.now
        end
        return decision(false, hit.limit - count, until_empty(hit, state), retry), nil
      end
      local after = state
      if hit.cost > 0 then
        local added = {}
        for i, earlier in ipairs(state.added) do
          added[i] = earlier
        end
        added[#added + 1] = {cost = hit.cost, now = hit.now, nonce = hit.nonce}
        after = {count = state.count, skip = state.skip, added = added}
      end
      local changed = nil
      if hit.cost > 0 then
        changed = after
      end
      return decision(true, hit.limit - count - hit.cost, until_empty(hit, after), 0), changed
    end,
    force = function(hit, state)
      local added = {}
      for i, earlier in ipairs(state.added) do
        added[i] = earlier
      end
      added[#added + 1] = {cost = math.min(hit.cost, hit.limit + 1), now = hit.now, nonce = hit.nonce}
      return {count = state.count, skip = state.skip, added = added}
    end,
    write = function(hit, state)
      for _, added in ipairs(state.added) do
        each_member(hit.key, 'ZADD', added.nonce, added.cost, fmt(added.now))
      end
      redis.call('ZREMRANGEBYRANK', hit.key, 0, -(hit.limit + 2))
      expire_after(hit.key, until_empty(hit, {count = redis.call('ZCARD', hit.key), added = {}}))
    end,
    -- The entries in the window (at most L + 1 are kept).
    used = function(hit, state)
      return live(state)
    end,
    refund = function(hit)
      each_member(hit.key, 'ZREM', hit.nonce, hit.cost, nil)
    end,
  }
end
