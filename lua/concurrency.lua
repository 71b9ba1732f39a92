-- concurrency: at most L leases held at once, each freed by its release or W after it was
-- taken (crates/sluice-core/src/algorithm/concurrency.rs, whose decisions this one repeats field by field).
-- Key: CACHE_KEY_PREFIX .. concurrency_<L>per<W in s>s_domain_key_value_..., a hash: one field
--      per token holding leases (16 hex digits, from the hit's `lease`), valued
--      "<units>:<expires_at_us>", and `_until`, when the state stops mattering (its last lease's
--      end plus one life, as the memory store's state expires): from then on it reads as absent,
--      whatever the key's TTL (which a clock given by sluice may outrun); the key expires then.
-- State: {live = {{token, units, expires}...}, expired = units that ended within the last W}
--        (older ones are forgotten; the key lives one W after its last lease, for them).
-- A hit's lease is "+<token>" (acquire `cost` leases) or "-<token>" (release what the token
-- holds); anything else only reads.

algorithms.concurrency = function()
  local function held(live)
    return sum_of(live, 'units')
  end

  local function copy(live)
    local out = {}
    for i, lease in ipairs(live) do
      out[i] = {token = lease.token, units = lease.units, expires = lease.expires}
    end
    return out
  end

  -- Time until enough of `live` has expired for `cost` more to fit; nil when it never can.
  local function until_fits(hit, live, units)
    if hit.cost > hit.limit then
      return nil
    end
    local ends = copy(live)
    table.sort(ends, function(a, b) return a.expires < b.expires end)
    for _, lease in ipairs(ends) do
      units = units - lease.units
      if units + hit.cost <= hit.limit then
        return lease.expires - hit.now
      end
    end
    return nil
  end

  return {
    blocks_zero_itself = true,
    never_owes = true,
    read = function(hit)
      local fields = redis.call('HGETALL', hit.key)
      local live, expired = {}, 0
      for i = 1, #fields, 2 do
        if fields[i] == '_until' and tonumber(fields[i + 1]) <= hit.now then
          return {live = {}, expired = 0}
        end
      end
      for i = 1, #fields, 2 do
        local units, expires = string.match(fields[i + 1], '^(%d+):(%d+)$')
        if units then
          units, expires = tonumber(units), tonumber(expires)
          if expires > hit.now then
            live[#live + 1] = {token = fields[i], units = units, expires = expires}
          elseif expires + hit.period > hit.now then
            expired = expired + units
          end
        end
      end
      return {live = live, expired = expired}
    end,
    decide = function(hit, state)
      local live = copy(state.live)
      local before = held(live)
      local op, token = string.sub(hit.lease, 1, 1), string.sub(hit.lease, 2)
      local admitted, retry, released = true, 0, 0
      if op == '-' then
        for i, lease in ipairs(live) do
          if lease.token == token then
            released = lease.units
            table.remove(live, i)
            break
          end
        end
      elseif op == '+' and hit.cost > 0 then
        if before + hit.cost <= hit.limit then
          local expires = hit.now + hit.period
          local found = false
          for _, lease in ipairs(live) do
            if lease.token == token then
              lease.units = lease.units + hit.cost
              lease.expires = expires
              found = true
            end
          end
          if not found then
            live[#live + 1] = {token = token, units = hit.cost, expires = expires}
          end
        else
          admitted = false
          retry = until_fits(hit, live, before) or hit.period
        end
      end
      local after = held(live)
      -- Only a lease taken and a release write (pruning what expired, reported then, once).
      local taken = admitted and hit.cost > 0 and op == '+'
      local writes = taken or (op == '-' and (released > 0 or state.expired > 0))
      local reset = 0
      for _, lease in ipairs(live) do
        reset = math.max(reset, lease.expires - hit.now)
      end
      local expired = 0
      if writes then
        expired = state.expired
      end
      local d = decision(admitted, hit.limit - after, reset, retry, released, expired)
      if not writes then
        return d, nil
      end
      return d, {live = live, expired = 0}
    end,
    force = function(hit, state)
      return {live = copy(state.live), expired = 0}
    end,
    write = function(hit, state)
      redis.call('DEL', hit.key)
      local last = 0
      local fields = {}
      for _, lease in ipairs(state.live) do
        fields[#fields + 1] = lease.token
        fields[#fields + 1] = fmt(lease.units) .. ':' .. fmt(lease.expires)
        last = math.max(last, lease.expires)
      end
      -- At most 500 leases a command: unpack has a bounded stack.
      for from = 1, #fields, 1000 do
        redis.call('HSET', hit.key, unpack(fields, from, math.min(from + 999, #fields)))
      end
      -- Kept one life after the last lease ends, to report its expiry.
      if #fields > 0 then
        redis.call('HSET', hit.key, '_until', fmt(last + hit.period))
        expire_after(hit.key, last + hit.period - hit.now)
      end
    end,
    refund = function(hit)
      if string.sub(hit.lease, 1, 1) == '+' then
        redis.call('HDEL', hit.key, string.sub(hit.lease, 2))
      end
    end,
  }
end
