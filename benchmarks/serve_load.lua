-- wrk's script for benchmarks/serve_load.py: the bodies of a file in turn (BODIES_FILE is
-- replaced by its path), and the result as one JSON line at the end.
local bodies = {}
for line in io.lines("BODIES_FILE") do bodies[#bodies + 1] = line end
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  i = i + 1
  return wrk.format(nil, nil, nil, bodies[(i % #bodies) + 1])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK_JSON {"requests": %d, "duration_us": %d, "connect": %d, ' ..
    '"read": %d, "write": %d, "status": %d, "timeout": %d, "p50_us": %d, "p90_us": %d, ' ..
    '"p99_us": %d, "mean_us": %.1f}\n', summary.requests, summary.duration, e.connect,
    e.read, e.write, e.status, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean))
end
