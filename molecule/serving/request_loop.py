# Copyright: (c) 2026, gpufleet.deepep contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A bounded request loop through the router (Molecule serving and realvm, the rolling update): one chat completion
after another (--interval seconds apart) until the stop file appears or --max-seconds pass; between requests it
reads /workers and keeps the fewest healthy decode and prefill workers seen. Writes a JSON summary to --out;
touches --started after the first answer. Standard library only (it runs on the router's node)."""
import argparse
import json
import os
import time
import urllib.error
import urllib.request


def call(url, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, json.loads(resp.read().decode() or "null")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router", default="http://127.0.0.1:30080")
    ap.add_argument("--model", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--started", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-seconds", type=float, default=900)
    # Seconds between requests: on a guest under software emulation the loop shares one emulated CPU with the
    # router and the module runs of the rolling update, and must not starve them.
    ap.add_argument("--interval", type=float, default=0.05)
    args = ap.parse_args()
    t0 = time.monotonic()
    sent = failed = 0
    failures = []
    fewest = {"prefill": None, "decode": None}
    while not os.path.exists(args.stop_file) and time.monotonic() - t0 < args.max_seconds:
        sent += 1
        try:
            status, answer = call(args.router + "/v1/chat/completions",
                                  {"model": args.model, "max_tokens": 8,
                                   "messages": [{"role": "user", "content": "request %d" % sent}]})
            if status != 200 or not answer.get("choices"):
                raise ValueError("HTTP %s: %s" % (status, str(answer)[:200]))
            if sent == 1 or not os.path.exists(args.started):
                open(args.started, "w").close()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            failed += 1
            if len(failures) < 10:
                body = exc.read().decode(errors="replace")[:200] if isinstance(exc, urllib.error.HTTPError) else ""
                failures.append("request %d: %s %s" % (sent, exc, body))
        try:
            workers = call(args.router + "/workers", timeout=10)[1]
            for role in fewest:
                healthy = sum(1 for w in workers.get("workers", []) if w.get("worker_type") == role
                              and w.get("is_healthy"))
                fewest[role] = healthy if fewest[role] is None else min(fewest[role], healthy)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            if len(failures) < 10:
                failures.append("/workers: %s" % exc)
        time.sleep(args.interval)
    summary = {"sent": sent, "failed": failed, "failures": failures, "seconds": round(time.monotonic() - t0, 1),
               "stopped": os.path.exists(args.stop_file), "fewest_healthy": fewest}
    with open(args.out + ".tmp", "w") as out:
        json.dump(summary, out)
    os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
