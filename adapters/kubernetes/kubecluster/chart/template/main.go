// Command template prints what Gantry's Helm chart renders, as `helm template` does, with
// Helm's Go library (no helm binary):
//
//	cd adapters/kubernetes/kubecluster && go run ./chart/template [-f values.yaml] [-name gantry] [-namespace gantry]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gantryhq/gantry/adapters/kubernetes/kubecluster/chart"
)

func main() {
	values := flag.String("f", "", "a values file (default: the chart's values.yaml alone)")
	name := flag.String("name", "gantry", "the release's name")
	ns := flag.String("namespace", "gantry", "the release's namespace")
	flag.Parse()
	var vals map[string]any
	if *values != "" {
		v, err := chart.ReadValues(*values)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		vals = v
	}
	ms, err := chart.Render(chart.Dir(), chart.Release{Name: *name, Namespace: *ns}, vals)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print(chart.Text(ms))
}
