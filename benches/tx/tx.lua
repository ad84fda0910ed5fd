-- W-TX engine side: client transactions of BENCH_WRITES creates each, over REST.
-- One transaction = POST /api/v1/tx {"ttl":30000} -> BENCH_WRITES x POST /api/v1/records with
-- X-Transaction-Id -> POST /api/v1/tx/{id}/commit; one HTTP request per step, keep-alive.
--
-- wrk's Lua state is per thread, not per connection, so run with -tC -cC (one connection per
-- thread): the thread's state is the connection's state machine. Each thread begins new
-- transactions until BENCH_SECONDS after the run's start, then finishes the one it has open
-- (commit) and stops itself; run wrk with -d a few seconds longer than BENCH_SECONDS so every
-- thread drains (the `done` line reports threads that did not: `unfinished`).
-- Counted: commits answered 200 (in the window [start, start + BENCH_SECONDS] for the rate; all
-- of them for the row-count check), 409 conflicts, other answers per step. Transaction latency:
-- from sending the begin request to reading the commit answer (CLOCK_MONOTONIC via LuaJIT FFI),
-- for every committed transaction.
-- Env: BENCH_TOKEN, BENCH_SECONDS, BENCH_WRITES [10], BENCH_LAT_OUT (file for the latencies, us).
local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
  int clock_gettime(int clk_id, bench_timespec *tp);
]]
local ts = ffi.new("bench_timespec")
local function now_us()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC: one clock for every thread
  return tonumber(ts.tv_sec) * 1000000 + tonumber(ts.tv_nsec) / 1000
end

local token = os.getenv("BENCH_TOKEN") or "dev-token"
local seconds = tonumber(os.getenv("BENCH_SECONDS") or "10")
local nwrites = tonumber(os.getenv("BENCH_WRITES") or "10")
local body = '{"label":"ORDER","data":{"status":"paid","total":12.5,"city":"Oslo","createdAt":"2026-01-01T10:00:00Z"}}'
local h_begin = { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json" }
local h_commit = { ["Authorization"] = "Bearer " .. token }

-- ------------------------------------------------------------ main state: threads and report
local threads = {}
function setup(thread)
  if #threads == 0 then start_us = now_us() end
  thread:set("start_us", start_us)
  threads[#threads + 1] = thread
end

-- ------------------------------------------------------------ thread state: the transaction
-- state: "begin" | "write" | "commit" | "rollback" | "stopped"
state, txid, nw, t_begin = "begin", nil, 0, 0
commits, commits_window, conflicts, aborted, finished = 0, 0, 0, 0, 0
err_begin, err_write, err_commit, err_rollback, odd = 0, 0, 0, 0, ""
lats = {}
local h_write

function request()
  if state == "begin" then
    t_begin = now_us()
    return wrk.format("POST", "/api/v1/tx", h_begin, '{"ttl":30000}')
  elseif state == "write" then
    return wrk.format("POST", "/api/v1/records", h_write, body)
  elseif state == "commit" then
    return wrk.format("POST", "/api/v1/tx/" .. txid .. "/commit", h_commit, nil)
  else -- rollback (or stopped: a last harmless request, should not happen)
    return wrk.format("POST", "/api/v1/tx/" .. (txid or "none") .. "/rollback", h_commit, nil)
  end
end

local function note(step, status, resp)
  -- keep the first odd answer of each thread for the report
  if odd == "" then odd = step .. " " .. status .. " " .. string.sub(resp or "", 1, 300) end
end

local function next_tx()
  txid, nw = nil, 0
  if now_us() >= start_us + seconds * 1e6 then
    state, finished = "stopped", 1
    wrk.thread:stop()
  else
    state = "begin"
  end
end

function response(status, headers, resp)
  if state == "begin" then
    local id = status == 200 and resp:match('"id":"([0-9a-fA-F%-]+)"')
    if id then
      txid, nw, state = id, 0, "write"
      h_write = { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json",
                  ["X-Transaction-Id"] = id }
    else
      err_begin = err_begin + 1; note("begin", status, resp)
      next_tx()
    end
  elseif state == "write" then
    if status == 201 then
      nw = nw + 1
      if nw >= nwrites then state = "commit" end
    else
      -- not staged: roll the transaction back so no partial transaction can commit
      err_write = err_write + 1; note("write", status, resp)
      state = "rollback"
    end
  elseif state == "commit" then
    local t = now_us()
    if status == 200 then
      commits = commits + 1
      if t <= start_us + seconds * 1e6 then commits_window = commits_window + 1 end
      lats[#lats + 1] = math.floor(t - t_begin)
    elseif status == 409 then
      conflicts = conflicts + 1
    else
      err_commit = err_commit + 1; note("commit", status, resp)
    end
    next_tx()
  elseif state == "rollback" then
    if status == 200 then aborted = aborted + 1 else err_rollback = err_rollback + 1; note("rollback", status, resp) end
    next_tx()
  end
end

-- ------------------------------------------------------------ main state: report
function done(summary, latency, requests)
  local t = { commits = 0, commits_window = 0, conflicts = 0, aborted = 0, unfinished = 0,
              err_begin = 0, err_write = 0, err_commit = 0, err_rollback = 0, open_tx = 0 }
  local out = assert(io.open(os.getenv("BENCH_LAT_OUT"), "w"))
  local odds = {}
  for _, th in ipairs(threads) do
    for _, k in ipairs({ "commits", "commits_window", "conflicts", "aborted", "err_begin",
                         "err_write", "err_commit", "err_rollback" }) do
      t[k] = t[k] + th:get(k)
    end
    if th:get("finished") ~= 1 then
      t.unfinished = t.unfinished + 1
      if th:get("state") ~= "begin" then t.open_tx = t.open_tx + 1 end
    end
    local o = th:get("odd")
    if o ~= "" and #odds < 5 then odds[#odds + 1] = o end
    for _, v in ipairs(th:get("lats")) do out:write(v, "\n") end
  end
  out:close()
  local e = summary.errors
  io.write(string.format(
    'TXJSON {"commits":%d,"commits_window":%d,"conflicts":%d,"aborted":%d,"unfinished":%d,' ..
    '"open_tx":%d,"err_begin":%d,"err_write":%d,"err_commit":%d,"err_rollback":%d,' ..
    '"requests":%d,"duration_us":%d,"err_connect":%d,"err_read":%d,"err_write_sock":%d,' ..
    '"err_status":%d,"err_timeout":%d,"req_p50_us":%d,"req_p99_us":%d,"threads":%d}\n',
    t.commits, t.commits_window, t.conflicts, t.aborted, t.unfinished, t.open_tx, t.err_begin,
    t.err_write, t.err_commit, t.err_rollback, summary.requests, summary.duration, e.connect,
    e.read, e.write, e.status, e.timeout, latency:percentile(50), latency:percentile(99), #threads))
  for _, o in ipairs(odds) do io.write("ODD ", (o:gsub("\n", " ")), "\n") end
end
