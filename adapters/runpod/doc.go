// Package runpod is Gantry's cloud GPU pool on RunPod Pods: a pool.Pool that rents each
// worker as a pod through RunPod's public REST API v2. It is a pool.Elastic pool: its
// capacity follows the stock RunPod's GPU catalog reports, within its count and cost guard. openapi.yaml describes the operations it
// uses; rpapi/ is the client (and the server interface) that ogen generates from it, and
// runpodfake/ is a fake RunPod that implements that server for tests.
package runpod
