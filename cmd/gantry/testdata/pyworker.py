"""A worker in Python with the standard library only, speaking the protocol the runpod SDK
speaks: long-poll job-take, post the result to job-done with the bare token and the JSON body
sent as a form, every URL extended with a bare '&'. Gantry's tests run it through the process
pool's `images:` mapping to show that any command can be a worker."""
import json
import os
import urllib.request

take = os.environ["RUNPOD_WEBHOOK_GET_JOB"]
done = os.environ["RUNPOD_WEBHOOK_POST_OUTPUT"]
token = os.environ["RUNPOD_AI_API_KEY"]


def call(url, body=None):
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    req.add_header("Authorization", token)
    if body is not None:
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.status, resp.read()


while True:
    status, body = call(take + "&job_in_progress=0")
    if status != 200:
        continue
    job = json.loads(body)
    output = {"py": job["input"], "greeting": os.environ.get("GREETING", "")}
    call(done.replace("$ID", job["id"]) + "&isStream=false", json.dumps({"output": output}).encode())
