// Package worker is Gantry's Go worker SDK: it runs a [Handler] against a Gantry (or RunPod)
// endpoint by speaking the RunPod worker protocol from the worker's side, as the runpod Python
// SDK's runpod.serverless.start does.
//
// A worker process reads its configuration from the environment the platform sets
// ([ConfigFromEnv]) and calls [Run]:
//
//	func main() {
//		cfg, err := worker.ConfigFromEnv()
//		if err != nil {
//			log.Fatal(err)
//		}
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//		defer stop()
//		if err := worker.Run(ctx, cfg, handle); err != nil {
//			log.Fatal(err)
//		}
//	}
//
// Run keeps [Config.Concurrency] long-polls open on job-take, runs the handler for each job it
// is given, and posts the handler's result to job-done: {"output": x} on success,
// {"error": "msg"} when the handler returns an error or panics. While a handler runs it may post
// progress updates and stream parts (with metrics, as a [Chunk]) and store files it produced
// ([Responder.PutFile], Gantry only) through its [Responder]. Alongside, Run long-polls job-stop
// and cancels the context of any job the server names there (nothing is posted for such a job),
// and pings the server every [Config.PingInterval] with the ids of the jobs in progress.
//
// Environment (see [ConfigFromEnv]):
//
//	RUNPOD_WEBHOOK_GET_JOB      job-take URL (job-stop is derived from it)
//	RUNPOD_WEBHOOK_POST_OUTPUT  job-done URL template; $ID is the job id
//	RUNPOD_WEBHOOK_POST_STREAM  job-stream URL template; $ID is the job id
//	RUNPOD_WEBHOOK_PING         ping URL
//	RUNPOD_AI_API_KEY           the worker token, sent as "Authorization: <token>"
//	RUNPOD_POD_ID               the worker id
//	RUNPOD_PING_INTERVAL        ping interval in milliseconds (default 10000)
//
// Transport failures are retried: job-take and job-stop back off exponentially from 100 ms to
// 5 s (a 429 from job-take waits 5 s), and every POST is tried up to 3 times on a 5xx or a
// connection error. A 4xx answer to a POST is final: the post is dropped and logged, as the
// Python SDK does.
package worker
