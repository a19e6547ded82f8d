// composecheck loads compose files the way docker compose v2 does (compose-go, with its
// consistency checks: undefined services in depends_on, unknown keys, bad references)
// and prints the resolved project as JSON. Built by tests/integration/test_compose.py
// from the Go module proxy into a cache; usage: composecheck FILE... (env: the variables
// the files interpolate).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	options, err := cli.NewProjectOptions(
		os.Args[1:],
		cli.WithOsEnv,
		cli.WithProfiles([]string{"*"}),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, err := json.Marshal(project)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(string(out))
}
