-- wrk script: one message per request to a random one of PARTS partitions
-- (default 100) of queue QUEUE (default wrkq); for example:
--   PARTS=100 wrk -t2 -c50 -d15s -s benches/wrk/push.lua http://127.0.0.1:6632
-- TXID=1 gives each message its own client transaction id (as the official
-- clients do), so the push takes the duplicate check and the dedup cache.
local parts = tonumber(os.getenv("PARTS") or "100")
local queue = os.getenv("QUEUE") or "wrkq"
local txid = os.getenv("TXID") == "1"
local counter = 0
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tag", "t" .. threads .. "-" .. os.time())
end
request = function()
  counter = counter + 1
  local p = math.random(0, parts - 1)
  local id = ""
  if txid then id = ',"transactionId":"' .. tag .. "-" .. counter .. '"' end
  local body = '{"items":[{"queue":"' .. queue .. '","partition":"p' .. p .. '"' .. id .. ',"payload":{"n":' .. counter .. ',"data":"hello world"}}]}'
  return wrk.format("POST", "/api/v1/push", {["Content-Type"]="application/json"}, body)
end
response = function(status, headers, body)
  if status ~= 200 and status ~= 201 then
    if not errs then errs = 0 end
    errs = errs + 1
    if errs < 5 then print(status, body) end
  end
end
