// Asks Go's net/http which proxy it would use for each URL given as an argument, with the environment of
// this process (http.ProxyFromEnvironment reads it once per process). Prints one JSON object:
// {"version": runtime.Version(), "decisions": {url: {"decision": "proxy"|"bypass"|"error", "detail": ...}}}.
// Standard library only; no traffic.
package main

import (
	"encoding/json"
	"net/http"
	"os"
	"runtime"
)

type answer struct {
	Decision string `json:"decision"`
	Detail   string `json:"detail"`
}

func main() {
	out := map[string]any{"version": runtime.Version()}
	decisions := map[string]answer{}
	for _, raw := range os.Args[1:] {
		req, err := http.NewRequest("GET", raw, nil)
		if err != nil {
			decisions[raw] = answer{"error", "NewRequest: " + err.Error()}
			continue
		}
		proxy, err := http.ProxyFromEnvironment(req)
		switch {
		case err != nil:
			decisions[raw] = answer{"error", err.Error()}
		case proxy == nil:
			decisions[raw] = answer{"bypass", ""}
		default:
			decisions[raw] = answer{"proxy", proxy.String()}
		}
	}
	out["decisions"] = decisions
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
