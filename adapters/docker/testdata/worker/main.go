// Command worker is the Docker adapter tests' worker image: a static binary run FROM scratch
// whose first argument says how it behaves (the adaptertest behaviours, and a few more).
//
//	serves   print the environment, serve HTTP on $PORT when set, exit 0 on SIGTERM
//	ignores  ignore SIGTERM, print the environment, run until killed
//	crashes  exit with status 37 at once
//	talks    print "out 1..3" to stdout and "err 1..3" to stderr, then exit with status 3
//	volume   copy /runpod-volume/$READ to /runpod-volume/$WRITE, add "path=$GANTRY_VOLUME_PATH",
//	         exit 0 (status 5 when it cannot)
//
// The environment is printed as one line, "GANTRY_TEST_ENV <JSON object>", once the worker is
// ready (its signal handling set up, its HTTP port listening).
package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "serves":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		serveHTTP()
		printEnv()
		<-term
		fmt.Println("bye")
		os.Exit(0)
	case "ignores":
		signal.Ignore(syscall.SIGTERM)
		printEnv()
		for { // not select {}: with no other goroutine the runtime would call it a deadlock
			time.Sleep(time.Hour)
		}
	case "crashes":
		os.Exit(37)
	case "volume":
		dir := "/runpod-volume/"
		b, err := os.ReadFile(dir + os.Getenv("READ"))
		if err == nil {
			b = append(b, "path="+os.Getenv("GANTRY_VOLUME_PATH")+"\n"...)
			err = os.WriteFile(dir+os.Getenv("WRITE"), b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(5)
		}
		os.Exit(0)
	case "talks":
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(os.Stdout, "out %d\n", i)
			fmt.Fprintf(os.Stderr, "err %d\n", i)
		}
		os.Exit(3)
	}
	fmt.Fprintf(os.Stderr, "unknown mode %q (serves, ignores, crashes, talks, volume)\n", mode)
	os.Exit(2)
}

// serveHTTP answers "ok WORKER" on $PORT (every interface) when PORT is set.
func serveHTTP() {
	port := os.Getenv("PORT")
	if port == "" {
		return
	}
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(4)
	}
	id := os.Getenv("RUNPOD_POD_ID")
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok %s\n", id)
	}))
}

func printEnv() {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	b, _ := json.Marshal(env)
	fmt.Printf("GANTRY_TEST_ENV %s\n", b)
}
