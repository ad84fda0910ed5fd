-- Loader: creates records until BENCH_N of them were acknowledged (201) and appends their
-- ids to BENCH_IDS_OUT, then exits wrk. Run with one wrk thread (-t1) so the count is exact.
local body = '{"label":"ORDER","data":{"status":"paid","total":12.5,"city":"Oslo","createdAt":"2026-01-01T10:00:00Z"}}'
wrk.method = "POST"
wrk.path = "/api/v1/records"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("BENCH_TOKEN") or "dev-token")

local target = tonumber(os.getenv("BENCH_N") or "100000")
local n, out = 0, nil

function init(args)
  out = assert(io.open(os.getenv("BENCH_IDS_OUT"), "w"))
  out:setvbuf("full")
end

function response(status, headers, resp)
  if status == 201 then
    local id = resp:match('"id":"([0-9a-fA-F%-]+)"')
    if id and n < target then
      out:write(id, "\n")
      n = n + 1
      if n % 1000 == 0 then out:flush() end
    end
  end
  if n >= target then
    out:flush()
    out:close()
    -- wrk.thread:stop() would leave wrk waiting out -d; the loader is done, so leave now.
    os.exit(0)
  end
end
