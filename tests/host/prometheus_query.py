"""Polls a Prometheus server's HTTP API until an instant query's result satisfies a condition.

    prometheus_query.py URL QUERY CONDITION SECONDS

CONDITION is a Python expression over `r`, the query's result vector (a list of
{"metric": {...}, "value": [time, "text"]}), e.g. 'len(r) == 1 and float(r[0]["value"][1]) > 0'.
Prints the last result, and exits 1 if the condition never held within SECONDS.
"""
import json
import sys
import time
import urllib.parse
import urllib.request

url, query, condition, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
deadline = time.monotonic() + seconds
last = None
while True:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": query}), timeout=5) as answer:
            body = json.load(answer)
        last = body["data"]["result"]
        if eval(condition, {"r": last}):
            print(json.dumps(last))
            sys.exit(0)
    except (OSError, ValueError, KeyError) as e:
        last = f"error: {e}"
    if time.monotonic() > deadline:
        print(f"{query}: {condition} never held within {seconds} s; last result: {json.dumps(last)}")
        sys.exit(1)
    time.sleep(0.25)
