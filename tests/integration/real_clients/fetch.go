// fetch: GET each URL with Go's default client (proxy from the environment, roots from SSL_CERT_FILE or the
// system's) and print one JSON object: URL -> "ok <status> <body>" or "error <message>". Standard library only.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	client := &http.Client{Timeout: 10 * time.Second}
	out := map[string]string{}
	for _, url := range os.Args[1:] {
		resp, err := client.Get(url)
		if err != nil {
			out[url] = "error " + err.Error()
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			out[url] = "error " + err.Error()
			continue
		}
		out[url] = fmt.Sprintf("ok %d %s", resp.StatusCode, body)
	}
	enc, _ := json.Marshal(out)
	fmt.Println(string(enc))
}
