# Gantry's interface: `make help` lists the targets.
GO        ?= go
BIN       ?= bin/gantry
FUZZTIME  ?=

.PHONY: help run build test test-kubernetes fuzz lint generate check-generated bench conformance console images

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# The first build compiles about 1,200 packages (client-go among them): minutes on a small
# machine. It says so first, then counts the packages compiled (go build -v names each one it
# compiles, none when the build cache has them). The server runs in place of the recipe's
# shell (exec): on Ctrl-C it stops gracefully, prints "Gantry stopped" and exits 0, so make
# prints no error (make itself, interrupted too, then ends as an interrupted command does).
run: ## build bin/gantry (the first build: ~1,200 packages, minutes) and run it on 127.0.0.1:8080 with embedded defaults (state in ./gantry-data; SERVE_FLAGS="--listen ..." adds flags)
	@echo "Building $(BIN): the first build compiles about 1,200 packages (several minutes on 2 cores); later ones take seconds."
	@{ CGO_ENABLED=0 $(GO) build -v -o $(BIN) ./cmd/gantry 2>&1; echo "go build exit $$?"; } | awk ' \
	  /^go build exit [0-9]+$$/ { code = $$4; next } \
	  /^[^ :]+$$/ { n++; printf "\r  packages compiled: %d", n; fflush(); next } \
	  { if (n) { print ""; n = 0 } print } \
	  END { if (n) print ""; exit code }'
	@exec $(BIN) serve $(SERVE_FLAGS)

build: ## build the gantry binary into bin/
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/gantry

test: ## run every test (race detector on), then the fuzz targets briefly
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...
	$(GO) test -count=1 -run '^TestRunSync(HoldsOneCopy|PeakMemory)$$' ./api # they measure memory: skipped under -race
	$(MAKE) test-kubernetes
	$(MAKE) fuzz

# Its own module (k8s.io/kubernetes needs a replace per staging module); no -race: the race
# detector doubles the build of kube-apiserver and slows its start several times on 2 cores.
test-kubernetes: ## the Kubernetes pool and the Helm chart (deploy/helm) against kube-apiserver and kube-scheduler started in process (nested module)
	cd adapters/kubernetes/kubecluster && $(GO) vet ./... && $(GO) test -count=1 -timeout 30m ./...

# Counts, not durations: go1.26's fuzz coordinator can fail a clean run with "context deadline
# exceeded" when a -fuzztime duration expires mid-execution (go.dev/issue/75804).
fuzz: ## run each fuzz target for an execution count (~10 s each on 2 cores), or for FUZZTIME (e.g. 30s, 1000000x)
	$(GO) test ./api -run '^$$' -fuzz '^FuzzCreateEndpoint$$' -fuzztime $(or $(FUZZTIME),40000x)
	$(GO) test ./api -run '^$$' -fuzz '^FuzzUpdateEndpoint$$' -fuzztime $(or $(FUZZTIME),40000x)
	$(GO) test ./lbproxy -run '^$$' -fuzz '^FuzzHead$$' -fuzztime $(or $(FUZZTIME),60000x)
	$(GO) test ./lbproxy -run '^$$' -fuzz '^FuzzAnswer$$' -fuzztime $(or $(FUZZTIME),40000x)
	$(GO) test ./api -run '^$$' -fuzz '^FuzzBodyText$$' -fuzztime $(or $(FUZZTIME),100000x)
	$(GO) test ./worker -run '^$$' -fuzz '^FuzzDecodeJob$$' -fuzztime $(or $(FUZZTIME),150000x)
	$(GO) test ./worker/echo -run '^$$' -fuzz '^FuzzHandler$$' -fuzztime $(or $(FUZZTIME),300000x)
	$(GO) test ./models -run '^$$' -fuzz '^FuzzReadGIFInfo$$' -fuzztime $(or $(FUZZTIME),150000x)
	$(GO) test ./models -run '^$$' -fuzz '^FuzzReadWAVInfo$$' -fuzztime $(or $(FUZZTIME),250000x)
	$(GO) test ./worker/httpecho -run '^$$' -fuzz '^FuzzReadFrame$$' -fuzztime $(or $(FUZZTIME),200000x)
	$(GO) test ./adapters/runpod -run '^$$' -fuzz '^FuzzResetAfter$$' -fuzztime $(or $(FUZZTIME),100000x)
	$(GO) test ./adapters/runpod/runpodfake -run '^$$' -fuzz '^FuzzPodStateMachine$$' -fuzztime $(or $(FUZZTIME),2000x)

# golangci-lint is pinned and built from the Go module proxy (the first run compiles it: about
# two minutes on 2 cores); .golangci.yml says which linters run and why. The nested Kubernetes
# module is vetted by test-kubernetes; linting it would type-check kube-apiserver.
GOLANGCI_LINT ?= github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

lint: ## gofmt, go vet, golangci-lint (.golangci.yml) and systemd-analyze verify on deploy/systemd
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v -e '^oas/' -e '^adapters/runpod/rpapi/'))" || (gofmt -l $$(git ls-files '*.go' | grep -v -e '^oas/' -e '^adapters/runpod/rpapi/'); exit 1)
	$(GO) vet ./...
	$(GO) run $(GOLANGCI_LINT) run --timeout 20m ./...
	deploy/systemd/verify.sh

generate: ## regenerate oas/ from openapi.yaml and adapters/runpod/rpapi/ from its subset (pinned ogen)
	$(GO) generate ./...

check-generated: generate ## fail if oas/ or adapters/runpod/rpapi/ is not what its spec generates, or a go.mod is untidy
	cd adapters/kubernetes/kubecluster && $(GO) mod tidy
	git diff --exit-code -- oas/ adapters/runpod/rpapi/ go.mod go.sum adapters/kubernetes/kubecluster/go.mod adapters/kubernetes/kubecluster/go.sum
	@test -z "$$(git status --porcelain -- oas/ adapters/runpod/rpapi/)" || (git status --porcelain -- oas/ adapters/runpod/rpapi/; exit 1)

bench: ## Gantry vs a bare net/http handler, the /run tail with 0, 100k and 1M jobs queued, the scheduler simulation, cold starts (process and docker pools) and the LB proxy vs its worker, about 22 min (BENCHFLAGS="-only run,runsync"; see BENCHMARKS.md)
	@command -v wrk >/dev/null || apt-get install -y wrk || (apt-get update && apt-get install -y wrk)
	$(GO) run ./bench -out bench/results.md $(BENCHFLAGS)

conformance: ## the black-box suite alone (needs a Docker engine and npm; see README)
	GANTRY_REQUIRE_DOCKER=1 $(GO) test -count=1 -v ./conformance

console: ## the web console's browser test alone (Debian's chromium, npm; screenshots in console/e2e/artifacts)
	GANTRY_REQUIRE_CHROMIUM=1 $(GO) test -count=1 -v -run TestConsoleInChromium ./console

images: ## build the gantry image and the built-in worker images (gantry/echo, gantry/http-echo, ...) into the local Docker engine
	mkdir -p bin/image
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/image/gantry ./cmd/gantry
	docker build -q -t gantry:latest -f build/gantry.Dockerfile bin/image
	for w in echo http-echo image video speech text; do docker build -q -t gantry/$$w:latest --build-arg WORKER=$$w -f build/worker.Dockerfile bin/image; done