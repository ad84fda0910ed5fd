-- W2: read one record by id (GET /api/v1/records/{id}), ids drawn uniformly at random from
-- the file BENCH_IDS (one id a line). Env: BENCH_TOKEN, BENCH_IDS, BENCH_LUA_DIR.
-- W5 point expansion reuses it: BENCH_PATH_SUFFIX (e.g. `/relationships`) is appended to the
-- path, and a non-empty BENCH_BODY makes the request a POST with that JSON body.
dofile((os.getenv("BENCH_LUA_DIR") or ".") .. "/report.lua")
local ids = {}
local headers = { ["Authorization"] = "Bearer " .. (os.getenv("BENCH_TOKEN") or "dev-token") }
local suffix = os.getenv("BENCH_PATH_SUFFIX") or ""
local body = os.getenv("BENCH_BODY") or ""
local method = "GET"
if body ~= "" then
  method = "POST"
  headers["Content-Type"] = "application/json"
else
  body = nil
end

function init(args)
  for line in io.lines(os.getenv("BENCH_IDS")) do
    if #line > 0 then ids[#ids + 1] = line end
  end
  assert(#ids > 0, "no ids in " .. tostring(os.getenv("BENCH_IDS")))
  math.randomseed(os.time() + tonumber(tostring(ids):match("0x(%x+)") or "0", 16) % 100000)
end

function request()
  return wrk.format(method, "/api/v1/records/" .. ids[math.random(#ids)] .. suffix, headers, body)
end

function done(summary, latency, requests) wrk_report(summary, latency, requests) end
