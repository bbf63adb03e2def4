/* rscripts.c — see rscripts.h. */
#include "rscripts.h"
#include "rkeys.h"

#include <stddef.h>

/*
 * The Lua shared by the scripts that keep a sandbox's index entries in step
 * with its record: the tenant's set (quota and listing), the label sets of
 * its applied labels and the set of its node. The keys are built here from
 * the record's own tenant, id, labels and node (validated names: no '{' or
 * '}'), so the record and every index entry change in one script. The
 * spelling of those keys comes from rkeys.h.
 */
#define LUA_INDEX \
	"local function label_index(verb, tenant, id, labels)\n" \
	"  local ok, l = pcall(cjson.decode, labels or '{}')\n" \
	"  local n = 0\n" \
	"  if not ok or type(l) ~= 'table' then return 0 end\n" \
	"  for k, v in pairs(l) do\n" \
	"    if type(k) == 'string' and type(v) == 'string' then\n" \
	"      local key = '" RKEYS_TENANT_HEAD "' .. tenant .. '" RKEYS_LABEL_MID "' .. k .. '=' .. v\n" \
	"      if verb == 'ZADD' then n = n + redis.call('ZADD', key, 0, id)\n" \
	"      else n = n + redis.call('ZREM', key, id) end\n" \
	"    end\n" \
	"  end\n" \
	"  return n\n" \
	"end\n" \
	"local function node_set(verb, node, member)\n" \
	"  if not node or node == '' then return 0 end\n" \
	"  return redis.call(verb, '" RKEYS_NODE_HEAD "' .. node .. '" RKEYS_SANDBOXES_TAIL "', member)\n" \
	"end\n"

/*
 * The Lua shared by the scripts that change what a record commits on its
 * node: a running or starting record commits its resources' memoryMiB and
 * cpus (in thousandths, rounded: ceilings_resources_need() in fcgi/) to the
 * node it names, a sleeping or stopping one nothing. Each such script reads
 * commit_of() before and after its change and hands both to commit_move(),
 * which moves the record's share between the nodes' sums
 * (RKEYS_NODE_HEAD node RKEYS_COMMITTED_TAIL: count, memoryMiB, cpusMilli;
 * the hash goes when its count reaches 0). The node_sums script rebuilds a
 * node's sums from its records with the same commit_of().
 */
#define LUA_COMMIT \
	"local function commit_of(key)\n" \
	"  local r = redis.call('HMGET', key, 'node', 'state', 'resources')\n" \
	"  if not r[1] or r[1] == '' or (r[2] ~= 'running' and r[2] ~= 'starting') then\n" \
	"    return nil\n" \
	"  end\n" \
	"  local m, c = 0, 0\n" \
	"  local ok, res = pcall(cjson.decode, r[3] or '{}')\n" \
	"  if ok and type(res) == 'table' then\n" \
	"    local x, y = res.memoryMiB, res.cpus\n" \
	"    if type(x) == 'number' and x > 0 and x % 1 == 0 then m = x end\n" \
	"    if type(y) == 'number' and y > 0 and y < 1e9 then c = math.floor(y * 1000 + 0.5) end\n" \
	"  end\n" \
	"  return {r[1], m, c}\n" \
	"end\n" \
	"local function commit_add(node, n, m, c)\n" \
	"  local k = '" RKEYS_NODE_HEAD "' .. node .. '" RKEYS_COMMITTED_TAIL "'\n" \
	"  if redis.call('HINCRBY', k, 'count', n) <= 0 then\n" \
	"    redis.call('DEL', k)\n" \
	"    return\n" \
	"  end\n" \
	"  redis.call('HINCRBY', k, 'memoryMiB', m)\n" \
	"  redis.call('HINCRBY', k, 'cpusMilli', c)\n" \
	"end\n" \
	"local function commit_move(was, now)\n" \
	"  if was and now and was[1] == now[1] and was[2] == now[2] and was[3] == now[3] then\n" \
	"    return\n" \
	"  end\n" \
	"  if was then commit_add(was[1], -1, -was[2], -was[3]) end\n" \
	"  if now then commit_add(now[1], 1, now[2], now[3]) end\n" \
	"end\n"

static const char *const sources[RSCRIPT__COUNT] = {
	[RSCRIPT_CREATE] = LUA_INDEX LUA_COMMIT
		"if redis.call('EXISTS', KEYS[1]) == 1 then\n"
		"  local c = redis.call('HMGET', KEYS[1], 'epoch', 'generation')\n"
		"  return {0, c[1] or '0', c[2] or '0'}\n"
		"end\n"
		"if not redis.call('ZSCORE', KEYS[2], ARGV[2]) and\n"
		"   redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[12]) then return {-1, '', ''} end\n"
		"local t = redis.call('TIME')\n"
		"local epoch = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))\n"
		"redis.call('HSET', KEYS[1], 'id', ARGV[2], 'tenant', ARGV[1], 'state', 'starting',\n"
		"  'node', ARGV[3], 'epoch', epoch, 'generation', '1', 'sleepAfter', ARGV[4],\n"
		"  'keepAlive', ARGV[5], 'labels', ARGV[6], 'resources', ARGV[7], 'network', ARGV[8],\n"
		"  'image', ARGV[9], 'env', ARGV[10], 'pending', '{}', 'createdAt', ARGV[11],\n"
		"  'startedAt', '', 'lastActiveAt', ARGV[11], 'restoreFrom', ARGV[13] or '',\n"
		"  'persist', ARGV[14] or '')\n"
		"redis.call('ZADD', KEYS[2], 0, ARGV[2])\n"
		"label_index('ZADD', ARGV[1], ARGV[2], ARGV[6])\n"
		"node_set('SADD', ARGV[3], ARGV[1] .. '/' .. ARGV[2])\n"
		"commit_move(nil, commit_of(KEYS[1]))\n"
		"return {1, epoch, '1'}\n",
	[RSCRIPT_START] = LUA_INDEX LUA_COMMIT
		"local cur = redis.call('HMGET', KEYS[1], 'epoch', 'generation', 'pending', 'labels',\n"
		"  'node', 'tenant', 'id')\n"
		"if not cur[1] then return {-1} end\n"
		"if cur[1] ~= ARGV[1] then return {-2} end\n"
		"local was = commit_of(KEYS[1])\n"
		"local t = redis.call('TIME')\n"
		"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
		"local epoch = math.max(tonumber(cur[1]) + 1, now)\n"
		"local gen = tonumber(cur[2]) + 1\n"
		"if ARGV[3] == '1' and cur[3] and cur[3] ~= '{}' and cur[3] ~= '' then\n"
		"  local p = cjson.decode(cur[3])\n"
		"  for _, f in ipairs({'labels', 'resources', 'env'}) do\n"
		"    if p[f] ~= nil then redis.call('HSET', KEYS[1], f, cjson.encode(p[f])) end\n"
		"  end\n"
		"  for _, f in ipairs({'image', 'network'}) do\n"
		"    if p[f] ~= nil then redis.call('HSET', KEYS[1], f, p[f]) end\n"
		"  end\n"
		"  redis.call('HSET', KEYS[1], 'pending', '{}')\n"
		"end\n"
		"local e = string.format('%d', epoch)\n"
		"local g = string.format('%d', gen)\n"
		"redis.call('HSET', KEYS[1], 'state', 'starting', 'node', ARGV[2], 'epoch', e,\n"
		"  'generation', g, 'lastActiveAt', ARGV[4])\n"
		"if cur[6] and cur[7] then\n"
		"  local labels = redis.call('HGET', KEYS[1], 'labels')\n"
		"  local member = cur[6] .. '/' .. cur[7]\n"
		"  if (cur[4] or '{}') ~= labels then\n"
		"    label_index('ZREM', cur[6], cur[7], cur[4])\n"
		"    label_index('ZADD', cur[6], cur[7], labels)\n"
		"  end\n"
		"  if cur[5] ~= ARGV[2] then node_set('SREM', cur[5], member) end\n"
		"  node_set('SADD', ARGV[2], member)\n"
		"end\n"
		"commit_move(was, commit_of(KEYS[1]))\n"
		"return {e, g}\n",
	[RSCRIPT_SET_STATE] = LUA_COMMIT
		"local ep = redis.call('HGET', KEYS[1], 'epoch')\n"
		"if not ep then return -1 end\n"
		"if ep ~= ARGV[1] then return 0 end\n"
		"local was = commit_of(KEYS[1])\n"
		"redis.call('HSET', KEYS[1], 'state', ARGV[2], unpack(ARGV, 3))\n"
		"commit_move(was, commit_of(KEYS[1]))\n"
		"return 1\n",
	[RSCRIPT_UPDATE] =
		"local cur = redis.call('HMGET', KEYS[1], 'pending', 'generation')\n"
		"if not cur[2] then return -1 end\n"
		"if (cur[1] or '{}') ~= ARGV[1] or cur[2] ~= ARGV[2] then return 0 end\n"
		"redis.call('HSET', KEYS[1], 'pending', ARGV[3])\n"
		"if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'sleepAfter', ARGV[4]) end\n"
		"if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'keepAlive', ARGV[5]) end\n"
		"return 1\n",
	[RSCRIPT_DESTROY] = LUA_INDEX LUA_COMMIT
		"local cur = redis.call('HMGET', KEYS[1], 'epoch', 'labels', 'node', 'generation')\n"
		"if not cur[1] then return {-1} end\n"
		"if cur[1] ~= ARGV[1] then return {0} end\n"
		"commit_move(commit_of(KEYS[1]), nil)\n"
		"redis.call('DEL', KEYS[1])\n"
		"redis.call('ZREM', KEYS[2], ARGV[3])\n"
		"redis.call('HDEL', '" RKEYS_TENANT_HEAD "' .. ARGV[2] .. '" RKEYS_USAGE_TAIL "', ARGV[3])\n"
		"label_index('ZREM', ARGV[2], ARGV[3], cur[2])\n"
		"node_set('SREM', cur[3], ARGV[2] .. '/' .. ARGV[3])\n"
		"return {1, cur[3] or '', cur[4] or ''}\n",
	[RSCRIPT_REPAIR] = LUA_INDEX
		"local cur = redis.call('HMGET', KEYS[1], 'state', 'epoch', 'labels', 'node')\n"
		"if not cur[1] or not cur[2] then\n"
		"  redis.call('HDEL', '" RKEYS_TENANT_HEAD "' .. ARGV[1] .. '" RKEYS_USAGE_TAIL "', ARGV[2])\n"
		"  return -redis.call('ZREM', KEYS[2], ARGV[2])\n"
		"end\n"
		"local n = redis.call('ZADD', KEYS[2], 0, ARGV[2])\n"
		"n = n + label_index('ZADD', ARGV[1], ARGV[2], cur[3])\n"
		"return n + node_set('SADD', cur[4], ARGV[1] .. '/' .. ARGV[2])\n",
	[RSCRIPT_PRUNE] =
		"local cur = redis.call('HMGET', KEYS[2], 'epoch', 'labels', 'node')\n"
		"if cur[1] then\n"
		"  if ARGV[1] == 'node' and cur[3] == ARGV[3] then return 0 end\n"
		"  if ARGV[1] == 'label' then\n"
		"    local ok, l = pcall(cjson.decode, cur[2] or '{}')\n"
		"    if ok and type(l) == 'table' then\n"
		"      for k, v in pairs(l) do\n"
		"        if type(k) == 'string' and type(v) == 'string' and k .. '=' .. v == ARGV[3] then\n"
		"          return 0\n"
		"        end\n"
		"      end\n"
		"    end\n"
		"  end\n"
		"end\n"
		"if ARGV[1] == 'node' then return redis.call('SREM', KEYS[1], ARGV[2]) end\n"
		"return redis.call('ZREM', KEYS[1], ARGV[2])\n",
	[RSCRIPT_NODE_SUMS] = LUA_COMMIT
		"if ARGV[2] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
		"local n, m, c = 0, 0, 0\n"
		"for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do\n"
		"  if not string.find(member, '[{}]') then\n"
		"    local x = commit_of('" RKEYS_SANDBOX_HEAD "' .. member .. '}')\n"
		"    if x and x[1] == ARGV[1] then n, m, c = n + 1, m + x[2], c + x[3] end\n"
		"  end\n"
		"end\n"
		"local cur = redis.call('HMGET', KEYS[2], 'count', 'memoryMiB', 'cpusMilli')\n"
		"if tonumber(cur[1] or '0') == n and tonumber(cur[2] or '0') == m and\n"
		"   tonumber(cur[3] or '0') == c then return 0 end\n"
		"redis.call('DEL', KEYS[2])\n"
		"if n > 0 then\n"
		"  redis.call('HSET', KEYS[2], 'count', n, 'memoryMiB', m, 'cpusMilli', c)\n"
		"end\n"
		"return 1\n",
	[RSCRIPT_CAD] =
		"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
		"return 0\n",
	[RSCRIPT_HCAD] =
		"if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then\n"
		"  return redis.call('HDEL', KEYS[1], ARGV[1])\n"
		"end\n"
		"return 0\n",
	[RSCRIPT_PREVIEW_CLAIM] =
		"local v = redis.call('GET', KEYS[1])\n"
		"if not v then redis.call('SET', KEYS[1], ARGV[1]) return 1 end\n"
		"if v == ARGV[1] then return 1 end\n"
		"return 0\n",
	[RSCRIPT_TUNNEL_CLAIM] =
		"local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
		"local dead = ''\n"
		"if v then\n"
		"  local ok, t = pcall(cjson.decode, v)\n"
		"  if ok and type(t) == 'table' and t.generation == tonumber(ARGV[2])\n"
		"     and t.incarnation == ARGV[3] then return {1, v} end\n"
		"  redis.call('HDEL', KEYS[1], ARGV[1])\n"
		"  if ok and type(t) == 'table' and type(t.id) == 'string' then dead = t.id end\n"
		"elseif redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[6]) then\n"
		"  return {-1, dead}\n"
		"end\n"
		"if redis.call('SET', KEYS[2], ARGV[4], 'NX', 'PX', ARGV[5]) then return {2, dead} end\n"
		"return {0, dead}\n",
	[RSCRIPT_TUNNEL_COMMIT] =
		"if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end\n"
		"redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])\n"
		"redis.call('DEL', KEYS[2])\n"
		"return 1\n",
	[RSCRIPT_TENANT_USAGE] =
		"local um, uc = 0, 0\n"
		"local all = redis.call('HGETALL', KEYS[2])\n"
		"for i = 1, #all, 2 do\n"
		"  if not redis.call('ZSCORE', KEYS[1], all[i]) then\n"
		"    redis.call('HDEL', KEYS[2], all[i])\n"
		"  elseif all[i] ~= ARGV[1] then\n"
		"    local m, c = string.match(all[i + 1], '^(%d+) (%d+)$')\n"
		"    um = um + (tonumber(m) or 0)\n"
		"    uc = uc + (tonumber(c) or 0)\n"
		"  end\n"
		"end\n"
		"local n = redis.call('ZCARD', KEYS[1])\n"
		"if ARGV[1] == '' then return {2, um, uc, n} end\n"
		"if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {0, um, uc, n} end\n"
		"local m, c = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
		"local om, oc = string.match(redis.call('HGET', KEYS[2], ARGV[1]) or '', '^(%d+) (%d+)$')\n"
		"local grows = ARGV[6] ~= '1' or not om or m > tonumber(om) or c > tonumber(oc)\n"
		"if grows and um + m > tonumber(ARGV[4]) then return {-2, um, uc, n} end\n"
		"if grows and uc + c > tonumber(ARGV[5]) then return {-3, um, uc, n} end\n"
		"redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])\n"
		"return {1, um, uc, n}\n",
	[RSCRIPT_AUTH_RATE] =
		"local tenant, admin = ARGV[1], ARGV[2]\n"
		"if tenant == '' then\n"
		"  local k = redis.call('HMGET', KEYS[1], 'tenant', 'admin')\n"
		"  if not k[1] or #k[1] > 63 or not string.find(k[1], '^[a-z0-9][a-z0-9-]*$') then\n"
		"    return {0, '', '0', 0, 0, 0, 0, 0}\n"
		"  end\n"
		"  tenant, admin = k[1], k[2] or '0'\n"
		"end\n"
		"local head = '" RKEYS_TENANT_HEAD "' .. tenant\n"
		"local o = redis.call('HMGET', head .. '" RKEYS_LIMITS_TAIL "', 'requestsPerSecond',\n"
		"  'requestsBurst', 'createsPerMinute')\n"
		"local function pick(v, d)\n"
		"  local n = tonumber(v)\n"
		"  if n and n >= 0 and n <= 1000000 then return math.floor(n) end\n"
		"  return tonumber(d)\n"
		"end\n"
		"local rps, burst, cpm = pick(o[1], ARGV[3]), pick(o[2], ARGV[4]), pick(o[3], ARGV[5])\n"
		"if burst == 0 then burst = rps end\n"
		"local b = {}\n"
		"if rps > 0 then b[#b + 1] = {head .. '" RKEYS_RATE_REQUESTS_TAIL "', 1000000 / rps, burst} end\n"
		"if ARGV[6] == '1' and cpm > 0 then\n"
		"  b[#b + 1] = {head .. '" RKEYS_RATE_CREATES_TAIL "', 60000000 / cpm, cpm}\n"
		"end\n"
		"local limited = (rps > 0 or cpm > 0) and 1 or 0\n"
		"if #b == 0 then return {1, tenant, admin, 0, 0, 0, 0, limited} end\n"
		"local t = redis.call('TIME')\n"
		"local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
		"local pick_i, refused, news = 0, false, {}\n"
		"for i, x in ipairs(b) do\n"
		"  local tat = tonumber(redis.call('GET', x[1]) or '0') or 0\n"
		"  if tat < now then tat = now end\n"
		"  local new, tol = tat + x[2], x[2] * x[3]\n"
		"  local over = new - now - tol\n"
		"  if over > 0 then\n"
		"    x.rem, x.reset, x.retry = 0, tat - now, over\n"
		"  else\n"
		"    x.rem, x.reset, x.retry = math.floor((tol - (new - now)) / x[2]), new - now, 0\n"
		"  end\n"
		"  news[i] = new\n"
		"  local p = b[pick_i]\n"
		"  if not p or x.retry > p.retry or (p.retry == 0 and x.retry == 0 and x.rem < p.rem) then\n"
		"    pick_i = i\n"
		"  end\n"
		"  if over > 0 then refused = true end\n"
		"end\n"
		"local p = b[pick_i]\n"
		"local reply = {refused and -1 or 1, tenant, admin, p[3], p.rem,\n"
		"  math.ceil(p.reset / 1000), math.ceil(p.retry / 1000), 1}\n"
		"if refused then return reply end\n"
		"for i, x in ipairs(b) do\n"
		"  redis.call('SET', x[1], string.format('%d', news[i]), 'PX',\n"
		"    math.ceil((news[i] - now) / 1000) + 1)\n"
		"end\n"
		"return reply\n",
	[RSCRIPT_AGENT_SLEEP] = LUA_COMMIT
		"local r = redis.call('HMGET', KEYS[1], 'node', 'epoch', 'state', 'lastActiveAt')\n"
		"if not r[2] then return -1 end\n"
		"if r[1] ~= ARGV[1] or r[2] ~= ARGV[2] then return 0 end\n"
		"if r[3] ~= 'running' and r[3] ~= 'starting' then return 0 end\n"
		"commit_move(commit_of(KEYS[1]), nil)\n"
		"redis.call('HSET', KEYS[1], 'state', 'sleeping')\n"
		"if ARGV[3] ~= '' and (r[4] or '') < ARGV[3] then\n"
		"  redis.call('HSET', KEYS[1], 'lastActiveAt', ARGV[3])\n"
		"end\n"
		"return 1\n",
	[RSCRIPT_AGENT_LOST] = LUA_COMMIT
		"local r = redis.call('HMGET', KEYS[1], 'node', 'epoch', 'state', 'generation')\n"
		"if not r[2] then return -1 end\n"
		"if r[1] ~= ARGV[1] then return 0 end\n"
		"if r[3] ~= 'running' and r[3] ~= 'starting' then return 0 end\n"
		"commit_move(commit_of(KEYS[1]), nil)\n"
		"redis.call('HSET', KEYS[1], 'state', 'sleeping')\n"
		"return {r[4] or '0', r[2]}\n",
	[RSCRIPT_TUNNEL_EVICT] =
		"local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
		"if not v then return {0, ''} end\n"
		"local ok, t = pcall(cjson.decode, v)\n"
		"if ok and type(t) == 'table' and t.url == ARGV[2] then\n"
		"  redis.call('HDEL', KEYS[1], ARGV[1])\n"
		"  return {1, type(t.id) == 'string' and t.id or ''}\n"
		"end\n"
		"return {0, ''}\n",
	[RSCRIPT_SNAPSHOT_ADD] =
		"local used = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
		"if used + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return {0, used} end\n"
		"redis.call('INCRBY', KEYS[1], ARGV[1])\n"
		"redis.call('HSET', KEYS[2], unpack(ARGV, 5))\n"
		"redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])\n"
		"return {1, used}\n",
	[RSCRIPT_SNAPSHOT_DEL] =
		"local v = redis.call('HMGET', KEYS[2], 'location', 'size')\n"
		"if not v[1] then return false end\n"
		"redis.call('DEL', KEYS[2])\n"
		"redis.call('ZREM', KEYS[3], ARGV[1])\n"
		"if tonumber(redis.call('DECRBY', KEYS[1], tonumber(v[2]) or 0)) < 0 then\n"
		"  redis.call('SET', KEYS[1], 0)\n"
		"end\n"
		"return v[1]\n",
	[RSCRIPT_SNAPSHOT_PERSIST] =
		"local cur = redis.call('HMGET', KEYS[4], 'epoch', 'restoreFrom')\n"
		"if cur[1] ~= ARGV[5] then return {-1, ''} end\n"
		"local used = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
		"local oldkey, oldloc, oldsize = nil, '', 0\n"
		"if cur[2] and cur[2] ~= '' then\n"
		"  oldkey = string.sub(KEYS[2], 1, #KEYS[2] - #ARGV[4]) .. cur[2]\n"
		"  local o = redis.call('HMGET', oldkey, 'name', 'sandbox', 'location', 'size')\n"
		"  if o[1] == 'persist' and o[2] == ARGV[6] then\n"
		"    oldloc = o[3]; oldsize = tonumber(o[4]) or 0\n"
		"  else oldkey = nil end\n"
		"end\n"
		"if used - oldsize + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return {0, ''} end\n"
		"if oldkey then\n"
		"  redis.call('DEL', oldkey)\n"
		"  redis.call('ZREM', KEYS[3], cur[2])\n"
		"end\n"
		"redis.call('SET', KEYS[1], used - oldsize + tonumber(ARGV[1]))\n"
		"redis.call('HSET', KEYS[2], unpack(ARGV, 7))\n"
		"redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])\n"
		"redis.call('HSET', KEYS[4], 'restoreFrom', ARGV[4], 'persistedAt', ARGV[3])\n"
		"return {1, oldloc}\n",
};

static const char *const names[RSCRIPT__COUNT] = {
	[RSCRIPT_CREATE] = "create", [RSCRIPT_START] = "start", [RSCRIPT_SET_STATE] = "set_state",
	[RSCRIPT_UPDATE] = "update", [RSCRIPT_DESTROY] = "destroy", [RSCRIPT_REPAIR] = "repair",
	[RSCRIPT_PRUNE] = "prune", [RSCRIPT_NODE_SUMS] = "node_sums", [RSCRIPT_CAD] = "cad",
	[RSCRIPT_HCAD] = "hcad",
	[RSCRIPT_PREVIEW_CLAIM] = "preview_claim", [RSCRIPT_TUNNEL_CLAIM] = "tunnel_claim",
	[RSCRIPT_TUNNEL_COMMIT] = "tunnel_commit", [RSCRIPT_TENANT_USAGE] = "tenant_usage",
	[RSCRIPT_AUTH_RATE] = "auth_rate",
	[RSCRIPT_AGENT_SLEEP] = "agent_sleep", [RSCRIPT_AGENT_LOST] = "agent_lost",
	[RSCRIPT_TUNNEL_EVICT] = "tunnel_evict", [RSCRIPT_SNAPSHOT_ADD] = "snapshot_add",
	[RSCRIPT_SNAPSHOT_DEL] = "snapshot_del", [RSCRIPT_SNAPSHOT_PERSIST] = "snapshot_persist",
};

const char *rscripts_source(enum rscript_id id)
{
	return (unsigned)id < RSCRIPT__COUNT ? sources[id] : NULL;
}

const char *rscripts_name(enum rscript_id id)
{
	return (unsigned)id < RSCRIPT__COUNT ? names[id] : NULL;
}
