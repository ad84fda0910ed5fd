-- W8: one durable single-record create per request (POST /api/v1/records).
-- Env: BENCH_TOKEN (bearer token), BENCH_LUA_DIR (this directory, for report.lua).
dofile((os.getenv("BENCH_LUA_DIR") or ".") .. "/report.lua")
wrk.method = "POST"
wrk.path = "/api/v1/records"
wrk.body = '{"label":"ORDER","data":{"status":"paid","total":12.5,"city":"Oslo","createdAt":"2026-01-01T10:00:00Z"}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("BENCH_TOKEN") or "dev-token")

function done(summary, latency, requests) wrk_report(summary, latency, requests) end
