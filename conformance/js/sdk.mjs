// Drives a Gantry endpoint with RunPod's npm client, unchanged but for its base URL, and prints
// one JSON line per step for conformance/sdk_test.go to check.
// Env: BASE (e.g. http://127.0.0.1:8080), KEY, EP (a queue endpoint on gantry/echo).
import runpodSdk from "runpod-sdk";

const sdk = runpodSdk(process.env.KEY, { baseUrl: process.env.BASE + "/v2" });
const ep = sdk.endpoint(process.env.EP);
const out = (step, value) => console.log(JSON.stringify({ step, value }));

out("runSync", await ep.runSync({ input: { echo: "hello from runpod-sdk" } }, 60000));

const { id } = await ep.run({ input: { echo: { n: 7 } } });
let st = await ep.status(id);
for (let i = 0; i < 600 && !["COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"].includes(st.status); i++) {
  await new Promise((r) => setTimeout(r, 50));
  st = await ep.status(id);
}
out("runThenStatus", st);

const streamed = await ep.run({ input: { stream: ["a", "b", "c"] } });
const parts = [];
for await (const part of ep.stream(streamed.id)) parts.push(part);
out("stream", parts);

// The endpoint has one worker (workers.max 1): a slow job holds it, five more wait in the
// queue; purge-queue removes those, cancel stops the slow one.
const slow = await ep.run({ input: { echo: "slow", sleep_ms: 60000 } });
for (let st = await ep.status(slow.id); st.status === "IN_QUEUE"; st = await ep.status(slow.id)) {
  await new Promise((r) => setTimeout(r, 50));
}
for (let i = 0; i < 5; i++) await ep.run({ input: { sleep_ms: 60000 } });
out("purgeQueue", await ep.purgeQueue());
out("cancel", await ep.cancel(slow.id));
out("cancelledStatus", await ep.status(slow.id));

out("health", await ep.health());
