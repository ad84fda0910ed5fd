-- W3/W4 loader: sends the lines of BENCH_ROWS (one `POST /api/v1/records` body per line, as
-- written by w3w4.py gen) over wrk's keep-alive connections, and exits wrk once every line is
-- out and the creates have stopped coming back. Run with one wrk thread (-t1).
--
-- wrk calls request() once at start-up only to count the requests in what it returns (its
-- pipelining check) and never sends that one: the first call returns a read, not a row.
-- Should a row still go missing, w3w4.py export finds it and creates it afterwards. A create
-- answered with anything but 201 is counted and printed.
--
-- Env: BENCH_TOKEN (bearer token), BENCH_ROWS (the rows file).
-- Prints `LOADED requested=N created=N failed=N`; exit status 0 when failed=0, else 1.
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("BENCH_TOKEN") or "dev-token")

local rows = nil
local requested, created, failed = 0, 0, 0
local exhausted, last_create = false, os.time()

function init(args)
  rows = assert(io.open(os.getenv("BENCH_ROWS"), "r"))
end

local verified = false

function request()
  if not verified then  -- wrk's start-up check: not sent
    verified = true
    return wrk.format("GET", "/api/v1/settings", nil, nil)
  end
  local line = (not exhausted) and rows:read("*l") or nil
  if line and line ~= "" then
    requested = requested + 1
    return wrk.format("POST", "/api/v1/records", nil, line)
  end
  exhausted = true
  -- Every row is out: poll with a harmless read (slowed by delay()) until the last creates
  -- are answered.
  return wrk.format("GET", "/api/v1/settings", nil, nil)
end

function delay()
  return exhausted and 20 or 0
end

function response(status, headers, body)
  if status == 201 then
    created = created + 1
    last_create = os.time()
  elseif status ~= 200 then
    failed = failed + 1
    last_create = os.time()
    if failed <= 5 then
      io.stderr:write("create failed: HTTP ", status, " ", tostring(body):sub(1, 300), "\n")
    end
  end
  if exhausted and os.time() - last_create >= 2 then
    io.stdout:write(string.format("LOADED requested=%d created=%d failed=%d\n", requested, created, failed))
    io.stdout:flush()
    os.exit(failed == 0 and 0 or 1)
  end
end
