package runpod

// What the external tests (package runpod_test) share with this package's TestMain, which
// runs the pods' containers.
const (
	TestKey       = testKey
	TestKeyEnv    = keyEnv
	TestEchoImage = echoImage
	WorkerModeEnv = envWorkerMode
)
